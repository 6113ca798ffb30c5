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
// the store to close (wait_until_closed): torch's own TCPStore, served by
// rank 0's process (env:// or tcp:// without a launcher; not under collie
// launch or torchrun, whose store outlives the groups), and the world
// group's namespace of it (a sub-group leaves the store open).
bool hosted_by_rank_zero(const StoreIdentity& id);
// Waits until the TCPStore `id` names closes (rank 0 dropped its group and with it the
// store), `limit` at most: a group made again at once would otherwise reach
// the old store and lose it midway ("Connection reset by peer").
void wait_until_closed(const StoreIdentity& id, std::chrono::milliseconds limit);

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
