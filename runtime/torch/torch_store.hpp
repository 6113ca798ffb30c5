// torch's store, as collie's: the Store a torch group's collie group meets
// in (InitOptions::store), and where that store is, alike on every rank.
#pragma once

#include <string>

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
  std::string host;
};
StoreIdentity identify(c10::intrusive_ptr<c10d::Store> store);

}  // namespace collie_torch
