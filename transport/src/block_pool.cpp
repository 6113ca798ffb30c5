// The process-wide pool of blocks (block_pool.hpp).
#include "block_pool.hpp"

#include <array>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define COLLIE_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define COLLIE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define COLLIE_POISON(p, n) ((void)(p), (void)(n))
#define COLLIE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace collie::transport {

namespace {

struct SizeClass {
  std::size_t bytes;
  std::size_t kept;   // the most blocks kept
  std::size_t batch;  // made at once when the list is empty: the first
                      // calls' needs in one go, and later growth amortized
};
constexpr std::array<SizeClass, 3> kClasses{{
    {BlockPool::kSmallBytes, 4096, 256},  // 1 MiB kept; batches of 64 KiB
    {std::size_t{4} << 10, 512, 64},      // 2 MiB; 256 KiB
    {BlockPool::kLargestBytes, 128, 16},  // 8 MiB; 1 MiB
}};

std::size_t class_of(std::size_t bytes) {
  std::size_t c = 0;
  while (kClasses[c].bytes < bytes) ++c;
  return c;
}

void add_batch(std::vector<void*>& list, const SizeClass& size) {
  for (std::size_t i = 0; i < size.batch; ++i) {
    void* block = ::operator new(size.bytes);
    COLLIE_POISON(block, size.bytes);
    list.push_back(block);
  }
}

struct Pool {
  // Every class's first batch at once, whichever is needed first: a call
  // that first queues a message of a size never queued before should not
  // be the one that allocates.
  Pool() {
    for (std::size_t c = 0; c < kClasses.size(); ++c) {
      free[c].reserve(kClasses[c].kept);  // so that give() never allocates
      add_batch(free[c], kClasses[c]);
    }
  }
  std::mutex mu;
  std::array<std::vector<void*>, kClasses.size()> free;
};

// Never destroyed: requests may be dropped by static destructors and
// threads that outlive main's.
Pool& pool() {
  static Pool* const p = new Pool;
  return *p;
}

}  // namespace

void* BlockPool::take(std::size_t bytes) {
  const auto c = class_of(bytes);
  const auto& size = kClasses[c];
  auto& p = pool();
  std::lock_guard lock(p.mu);
  auto& list = p.free[c];
  if (list.empty()) add_batch(list, size);
  void* block = list.back();
  list.pop_back();
  // A block in the pool is out of bounds to AddressSanitizer, so a request
  // used after it went still reads as a use after free.
  COLLIE_UNPOISON(block, size.bytes);
  return block;
}

void BlockPool::give(void* block, std::size_t bytes) noexcept {
  const auto c = class_of(bytes);
  auto& p = pool();
  {
    std::lock_guard lock(p.mu);
    if (auto& list = p.free[c]; list.size() < kClasses[c].kept) {
      COLLIE_POISON(block, kClasses[c].bytes);
      list.push_back(block);
      return;
    }
  }
  ::operator delete(block);
}

}  // namespace collie::transport
