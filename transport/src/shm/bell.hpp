// The bell: how a rank that has nothing to do sleeps until a peer gives it
// something (a futex in its mailbox's header), and how a peer wakes it
// without a system call when nobody sleeps.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "layout.hpp"

namespace collie::transport::shm {

// Sleeps while `word` still holds `seen`, for at most `d`.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::chrono::microseconds d);
// Wakes every thread asleep on `word`.
void futex_wake(std::atomic<std::uint32_t>& word);

// Wakes whoever sleeps on `h`'s bell, after this thread changed a cursor
// they may wait on. Pairs with a sleeper that counts itself in `sleepers`
// before it looks for work: the fence orders the cursor's store before the
// load of `sleepers`.
inline void ring_bell(MailboxHeader& h) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h.sleepers.load(std::memory_order_relaxed) == 0) return;
  h.bell.fetch_add(1, std::memory_order_release);
  futex_wake(h.bell);
}

// A pause in a spin (the CPU's hint that this is one).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace collie::transport::shm
