// A store that forgets what is written under some keys (they read back as
// missing), over a real one: for a test of what a rank says when the
// store it needs is gone (its host exited) by the time it reads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <collie/store/store.hpp>

namespace collie::test {

class ForgetfulStore final : public store::Store {
 public:
  // Forgets every key that contains `forget`.
  ForgetfulStore(std::shared_ptr<store::Store> inner, std::string forget)
      : inner_(std::move(inner)), forget_(std::move(forget)) {}

  void set(std::string_view key, std::string_view value, store::Timeout t) override {
    if (!forgets(key)) inner_->set(key, value, t);
  }
  std::string get(std::string_view key, store::Timeout t) override { return inner_->get(key, t); }
  std::optional<std::string> try_get(std::string_view key, store::Timeout t) override {
    return forgets(key) ? std::nullopt : inner_->try_get(key, t);
  }
  std::int64_t add(std::string_view key, std::int64_t delta, store::Timeout t) override {
    return inner_->add(key, delta, t);
  }
  store::CompareSetResult compare_set(std::string_view key, std::string_view expected,
                                      std::string_view desired, store::Timeout t) override {
    if (forgets(key)) return {};
    return inner_->compare_set(key, expected, desired, t);
  }
  void wait(std::span<const std::string> keys, store::Timeout t) override { inner_->wait(keys, t); }
  bool check(std::span<const std::string> keys, store::Timeout t) override {
    return inner_->check(keys, t);
  }
  bool delete_key(std::string_view key, store::Timeout t) override {
    return inner_->delete_key(key, t);
  }
  std::int64_t count_keys(std::string_view prefix, store::Timeout t) override {
    return inner_->count_keys(prefix, t);
  }
  std::vector<std::string> list_keys(std::string_view prefix, store::Timeout t) override {
    return inner_->list_keys(prefix, t);
  }
  std::vector<std::string> multi_get(std::span<const std::string> keys,
                                     store::Timeout t) override {
    return inner_->multi_get(keys, t);
  }
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                 store::Timeout t) override {
    inner_->multi_set(keys, values, t);
  }
  void append(std::string_view key, std::string_view value, store::Timeout t) override {
    inner_->append(key, value, t);
  }
  void barrier(std::string_view name, std::uint32_t n, store::Timeout t) override {
    inner_->barrier(name, n, t);
  }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

 private:
  bool forgets(std::string_view key) const { return key.find(forget_) != std::string_view::npos; }

  std::shared_ptr<store::Store> inner_;
  std::string forget_;
};

}  // namespace collie::test
