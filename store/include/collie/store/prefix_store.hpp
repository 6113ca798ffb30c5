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

  using Store::check;
  using Store::multi_get;
  using Store::multi_set;
  using Store::wait;

  void set(std::string_view key, std::string_view value, Timeout timeout = {}) override;
  std::string get(std::string_view key, Timeout timeout = {}) override;
  std::optional<std::string> try_get(std::string_view key, Timeout timeout = {}) override;
  std::int64_t add(std::string_view key, std::int64_t delta, Timeout timeout = {}) override;
  CompareSetResult compare_set(std::string_view key, std::string_view expected,
                               std::string_view desired, Timeout timeout = {}) override;
  void wait(std::span<const std::string> keys, Timeout timeout = {}) override;
  bool check(std::span<const std::string> keys, Timeout timeout = {}) override;
  bool delete_key(std::string_view key, Timeout timeout = {}) override;
  std::int64_t count_keys(std::string_view prefix, Timeout timeout = {}) override;
  std::vector<std::string> list_keys(std::string_view prefix, Timeout timeout = {}) override;
  std::vector<std::string> multi_get(std::span<const std::string> keys,
                                     Timeout timeout = {}) override;
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                 Timeout timeout = {}) override;
  void append(std::string_view key, std::string_view value, Timeout timeout = {}) override;
  void barrier(std::string_view name, std::uint32_t n, Timeout timeout = {}) override;
  std::chrono::milliseconds timeout() const override;

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
