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

// Each thread keeps a few blocks of each size of its own, so that a call's
// requests and its early messages take and give blocks without the lock:
// most are dropped by the thread that made them. Past its share a thread
// gives half back; at its exit, all.
constexpr std::array<std::size_t, kClasses.size()> kThreadKept{64, 16, 4};

struct ThreadCache {
  std::array<std::vector<void*>, kClasses.size()> free;
  ThreadCache() {
    for (std::size_t c = 0; c < kClasses.size(); ++c)
      free[c].reserve(kThreadKept[c]);
  }
  ~ThreadCache();
};

// Set once this thread's cache is gone (a request dropped by a later
// destructor goes straight to the pool).
thread_local bool t_cache_gone = false;

ThreadCache* thread_cache() {
  if (t_cache_gone) return nullptr;
  static thread_local ThreadCache cache;
  return &cache;
}

// Puts a block (poisoned) into the pool's list of size `c`, under its lock;
// one past the pool's budget goes back to the heap.
void shelve(std::vector<void*>& list, std::size_t c, void* block) {
  if (list.size() < kClasses[c].kept) {
    list.push_back(block);
  } else {
    ::operator delete(block);
  }
}

// Moves the last `n` blocks of `from` into the pool.
void give_back(std::vector<void*>& from, std::size_t c, std::size_t n) {
  auto& p = pool();
  std::lock_guard lock(p.mu);
  for (; n > 0; --n) {
    shelve(p.free[c], c, from.back());
    from.pop_back();
  }
}

ThreadCache::~ThreadCache() {
  t_cache_gone = true;
  for (std::size_t c = 0; c < kClasses.size(); ++c)
    give_back(free[c], c, free[c].size());
}

// A block of size `c` from the pool (made in a batch when it has none).
void* take_shared(std::size_t c) {
  const auto& size = kClasses[c];
  auto& p = pool();
  std::lock_guard lock(p.mu);
  auto& list = p.free[c];
  if (list.empty()) add_batch(list, size);
  void* block = list.back();
  list.pop_back();
  return block;
}

}  // namespace

void* BlockPool::take(std::size_t bytes) {
  const auto c = class_of(bytes);
  void* block = nullptr;
  if (auto* cache = thread_cache(); cache != nullptr && !cache->free[c].empty()) {
    block = cache->free[c].back();
    cache->free[c].pop_back();
  } else {
    block = take_shared(c);
  }
  // A block kept is out of bounds to AddressSanitizer, so a request used
  // after it went still reads as a use after free.
  COLLIE_UNPOISON(block, kClasses[c].bytes);
  return block;
}

void BlockPool::give(void* block, std::size_t bytes) noexcept {
  const auto c = class_of(bytes);
  COLLIE_POISON(block, kClasses[c].bytes);
  auto* cache = thread_cache();
  if (cache == nullptr) {  // this thread is ending
    auto& p = pool();
    std::lock_guard lock(p.mu);
    shelve(p.free[c], c, block);
    return;
  }
  auto& mine = cache->free[c];
  if (mine.size() == kThreadKept[c]) give_back(mine, c, kThreadKept[c] / 2);
  mine.push_back(block);
}

}  // namespace collie::transport
