// Blocks of memory kept for reuse, process-wide: what a request, or a
// message queued before its receive, is made in. A collective call makes a
// few requests and drops them again, and a peer ahead of this rank leaves
// its messages queued for a moment; with the blocks kept, a steady stream
// of calls allocates nothing once the pool holds what the busiest moment
// needed. Blocks come in three sizes (256 B, 4 KiB, 64 KiB), made in
// batches of 256, 64 and 16 blocks (every size's first batch when the pool
// is first used, so no later call is the one that meets a size first), and
// kept up to a budget (1, 2 and 8 MiB); past it memory goes back to the
// heap, as larger pieces always do. Each thread keeps a few blocks of each
// size of its own (taken and given without a lock: most requests are
// dropped by the thread that made them); the rest are one list per size
// under a lock, since blocks come back from whichever thread drops the
// last reference (a backend's own thread, often). Internal to
// transport/src.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace collie::transport {

class BlockPool {
 public:
  static constexpr std::size_t kSmallBytes = 256;   // a request, a small message
  static constexpr std::size_t kLargestBytes = std::size_t{64} << 10;

  // Whether blocks of `bytes` come from the pool (else from the heap).
  static bool pooled(std::size_t bytes) { return bytes > 0 && bytes <= kLargestBytes; }
  // A block of at least `bytes` (at most kLargestBytes), aligned for any
  // object; give() takes it back, told the same size.
  static void* take(std::size_t bytes);
  static void give(void* block, std::size_t bytes) noexcept;
};

// An allocator that serves what fits a block from the pool
// (std::allocate_shared's object and count together, a message's bytes),
// and anything larger from the heap.
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t));
    if (BlockPool::pooled(n * sizeof(T))) return static_cast<T*>(BlockPool::take(n * sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (BlockPool::pooled(n * sizeof(T))) {
      BlockPool::give(p, n * sizeof(T));
    } else {
      ::operator delete(p);
    }
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

// PoolAllocator whose elements a container would value-initialize (zero:
// vector::resize) are left as they are: for the bytes of a message queued
// before its receive, which the copy out of the ring writes before anything
// reads them (16 MiB calls on shared memory spent 1% of their time zeroing
// such buffers).
template <class T>
struct UninitPoolAllocator : PoolAllocator<T> {
  template <class U>
  struct rebind {
    using other = UninitPoolAllocator<U>;
  };
  UninitPoolAllocator() = default;
  template <class U>
  UninitPoolAllocator(const UninitPoolAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// std::make_shared, in a pooled block.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace collie::transport
