// The bounded memory of messages that came before their receive
// (unexpected_pool.hpp).
#include "unexpected_pool.hpp"

#include <algorithm>

#include "../block_pool.hpp"

namespace collie::transport::tcp {

void QueuedBytesDeleter::operator()(std::byte* p) const noexcept {
  if (pooled > 0) {
    BlockPool::give(p, pooled);
  } else {
    delete[] p;
  }
}

std::shared_ptr<Unexpected> UnexpectedPool::hold(std::size_t length, std::uint64_t fingerprint) {
  auto u = make_pooled<Unexpected>();
  u->fingerprint = fingerprint;
  u->length = length;
  if (auto it = spare_.find(length); it != spare_.end() && !it->second.empty()) {
    u->data = std::move(it->second.back());
    it->second.pop_back();
    spare_bytes_ -= length;
  } else if (const std::size_t bytes = std::max<std::size_t>(length, 1); BlockPool::pooled(bytes)) {
    u->data = QueuedBytes(static_cast<std::byte*>(BlockPool::take(bytes)), QueuedBytesDeleter{bytes});
  } else {
    u->data = QueuedBytes(new std::byte[length], QueuedBytesDeleter{0});
  }
  held_ += length;
  queued_.fetch_add(1, std::memory_order_relaxed);
  return u;
}

void UnexpectedPool::recycle(QueuedBytes buffer, std::size_t length) {
  if (length < kMinRecycled || spare_bytes_ + length > kMaxSpareBytes) return;
  spare_bytes_ += length;
  spare_[length].push_back(std::move(buffer));
}

}  // namespace collie::transport::tcp
