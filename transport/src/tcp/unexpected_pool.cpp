// The bounded memory of messages that came before their receive
// (unexpected_pool.hpp).
#include "unexpected_pool.hpp"

#include <algorithm>

namespace collie::transport::tcp {

std::shared_ptr<Unexpected> UnexpectedPool::hold(std::size_t length, std::uint64_t fingerprint) {
  auto u = std::make_shared<Unexpected>();
  u->fingerprint = fingerprint;
  u->length = length;
  if (auto it = spare_.find(length); it != spare_.end() && !it->second.empty()) {
    u->data = std::move(it->second.back());
    it->second.pop_back();
    spare_bytes_ -= length;
  } else {
    u->data = std::unique_ptr<std::byte[]>(new std::byte[std::max<std::size_t>(length, 1)]);
  }
  held_ += length;
  queued_.fetch_add(1, std::memory_order_relaxed);
  return u;
}

void UnexpectedPool::recycle(std::unique_ptr<std::byte[]> buffer, std::size_t length) {
  if (length < kMinRecycled || spare_bytes_ + length > kMaxSpareBytes) return;
  spare_bytes_ += length;
  spare_[length].push_back(std::move(buffer));
}

}  // namespace collie::transport::tcp
