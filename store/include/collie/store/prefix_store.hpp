// PrefixStore: a namespaced view of another Store.
//
//   auto job = std::make_shared<StoreClient>(host, port);
//   PrefixStore group(job, "group/1");
//   group.set("addr/0", "...");        // is key "group/1/addr/0" in `job`
//   group.num_keys();                  // counts only keys under "group/1/"
//
// Every key and barrier name is prefixed with `prefix + "/"`; list_keys()
// returns names without it. Views nest. Thread-safe when the inner store is.
#pragma once

#include <memory>
#include <string>

#include <collie/store/store.hpp>

namespace collie::store {

class PrefixStore final : public Store {
 public:
  // Throws collie::ArgumentError if `inner` is null.
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix);

  // Every call of the Store interface (store.hpp), as it documents them.
  COLLIE_STORE_OVERRIDES

  // The full prefix this view adds, "prefix/".
  const std::string& prefix() const { return prefix_; }
  Store& inner() { return *inner_; }

 private:
  std::string full(std::string_view key) const { return prefix_ + std::string(key); }
  std::vector<std::string> full(std::span<const std::string> keys) const;

  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

}  // namespace collie::store
