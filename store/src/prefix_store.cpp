// A namespaced view of another store (prefix_store.hpp).
#include <collie/error.hpp>
#include <collie/store/prefix_store.hpp>

namespace collie::store {

PrefixStore::PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix) + "/") {
  if (!inner_) throw ArgumentError("PrefixStore: the inner store is null");
}

std::vector<std::string> PrefixStore::full(std::span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys)
    out.push_back(full(key));
  return out;
}

void PrefixStore::set(std::string_view key, std::string_view value, Timeout timeout) {
  inner_->set(full(key), value, timeout);
}

std::string PrefixStore::get(std::string_view key, Timeout timeout) {
  return inner_->get(full(key), timeout);
}

std::optional<std::string> PrefixStore::try_get(std::string_view key, Timeout timeout) {
  return inner_->try_get(full(key), timeout);
}

std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta, Timeout timeout) {
  return inner_->add(full(key), delta, timeout);
}

CompareSetResult PrefixStore::compare_set(std::string_view key, std::string_view expected,
                                          std::string_view desired, Timeout timeout) {
  return inner_->compare_set(full(key), expected, desired, timeout);
}

void PrefixStore::wait(std::span<const std::string> keys, Timeout timeout) {
  inner_->wait(full(keys), timeout);
}

bool PrefixStore::check(std::span<const std::string> keys, Timeout timeout) {
  return inner_->check(full(keys), timeout);
}

bool PrefixStore::delete_key(std::string_view key, Timeout timeout) {
  return inner_->delete_key(full(key), timeout);
}

std::int64_t PrefixStore::count_keys(std::string_view prefix, Timeout timeout) {
  return inner_->count_keys(full(prefix), timeout);
}

std::vector<std::string> PrefixStore::list_keys(std::string_view prefix, Timeout timeout) {
  auto keys = inner_->list_keys(full(prefix), timeout);
  for (auto& key : keys)
    key.erase(0, prefix_.size());
  return keys;
}

std::vector<std::string> PrefixStore::multi_get(std::span<const std::string> keys,
                                                Timeout timeout) {
  return inner_->multi_get(full(keys), timeout);
}

void PrefixStore::multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                            Timeout timeout) {
  inner_->multi_set(full(keys), values, timeout);
}

void PrefixStore::append(std::string_view key, std::string_view value, Timeout timeout) {
  inner_->append(full(key), value, timeout);
}

void PrefixStore::barrier(std::string_view name, std::uint32_t n, Timeout timeout) {
  inner_->barrier(full(name), n, timeout);
}

std::chrono::milliseconds PrefixStore::timeout() const {
  return inner_->timeout();
}

}  // namespace collie::store
