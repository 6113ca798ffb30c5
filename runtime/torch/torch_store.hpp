// torch's store, as collie's: the Store a torch group's collie group meets
// in (InitOptions::store), and where that store is, alike on every rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <collie/store/store.hpp>

namespace collie_torch {

// collie's Store interface over torch's c10d::Store (torch_store.cpp says
// what it lacks and how each call is made of torch's).
std::shared_ptr<collie::store::Store> adapt(c10::intrusive_ptr<c10d::Store> store);

// Where the store is and which namespace of it a group uses, alike on
// every rank ("127.0.0.1:29500 default_pg/1"), and the host to route to.
struct StoreIdentity {
  std::string name;
  std::string host;  // the TCPStore's ("" if it is no TCPStore)
  int port = 0;
  std::string prefix;  // its PrefixStores' prefixes, outermost last: "a/b"
};
StoreIdentity identify(c10::intrusive_ptr<c10d::Store> store);

// Whether a rank other than 0 should, on dropping its world group, wait for
// the store to close (StoreCloseWatch): torch's own TCPStore, served by
// rank 0's process (env:// or tcp:// without a launcher; not under collie
// launch or torchrun, whose store outlives the groups), and the world
// group's namespace of it (a sub-group leaves the store open).
bool hosted_by_rank_zero(const StoreIdentity& id);

// Rank 0's TCPStore watched until it closes: a group made again at once
// would otherwise reach the old store and lose it midway ("Connection reset
// by peer"). A connection of its own that sends nothing, opened while the
// group is made and so to the store the group met in: when rank 0 drops its
// group and with it the store, the server closes it. A store made again on
// the same port at once (mp.spawn's loop of init and destroy) is told from
// the old one by that connection, not waited out.
class StoreCloseWatch {
 public:
  explicit StoreCloseWatch(const StoreIdentity& id);  // one it cannot reach watches nothing
  ~StoreCloseWatch();
  StoreCloseWatch(const StoreCloseWatch&) = delete;
  StoreCloseWatch& operator=(const StoreCloseWatch&) = delete;
  // Until the old store has closed this connection and its port (refused,
  // or a new store there), `limit` at most.
  void wait(std::chrono::milliseconds limit);

 private:
  StoreIdentity id_;
  int fd_ = -1;
};

// A PrefixStore's own prefix ("cuda/") and the store under it; "" and
// nullptr for any other store.
std::pair<std::string, c10::intrusive_ptr<c10d::Store>> outer_prefix(
    const c10::intrusive_ptr<c10d::Store>& store);

// Under collie launch (COLLIE_STORE_HOSTED=1, and the TCPStore is at
// MASTER_ADDR:MASTER_PORT) the store is collie's: a collie client of it
// with the job's token, under the same prefix, so the group has every
// store operation (stall reports among them). nullptr otherwise.
std::shared_ptr<collie::store::Store> collie_served(const StoreIdentity& id,
                                                   std::chrono::milliseconds timeout);

}  // namespace collie_torch
