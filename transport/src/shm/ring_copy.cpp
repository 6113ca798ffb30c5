// The ring copier (ring_copy.hpp).
#include "ring_copy.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace collie::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;

// A timed piece that took longer than this was preempted: not a measure.
constexpr std::uint64_t kPreemptedNs = 1'000'000;
// Non-temporal stores are chosen when ordinary ones cost more than
// kStreamAbove times as much per byte, seen from the sender, and left when
// they cost less than kCachedBelow times as much: where the cores share a
// cache the ratio stays near 1 and ordinary stores are the faster end to
// end; where they do not it is several times that (the figures:
// docs/PERFORMANCE.md, "Shared memory").
constexpr double kStreamAbove = 4.0;
constexpr double kCachedBelow = 3.0;

}  // namespace

bool streaming_stores_available() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) {
#if defined(__x86_64__)
  std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  std::size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i + 16 <= n; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + i)));
  }
  std::memcpy(dst + i, src + i, n - i);
  // Non-temporal stores are not ordered with the stores after them.
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

RingCopier::RingCopier(Stores mode)
    : mode_(streaming_stores_available() ? mode : Stores::Cached),
      streaming_(mode_ == Stores::Streaming) {}

RingCopier::Choice RingCopier::choose(std::size_t n) {
  if (mode_ != Stores::Auto || n < kMeasuredFrom)
    return {mode_ == Stores::Streaming && n >= kMeasuredFrom, false};
  ++pieces_;
  // Each kind is measured first (ordinary stores first); then the one in
  // use every kTimeEvery pieces, and the other now and then.
  if (cost_[0] == 0) return {false, true};
  if (cost_[1] == 0) return {true, true};
  if (pieces_ >= next_try_) return {!streaming_, true};
  return {streaming_, pieces_ % kTimeEvery == 0};
}

void RingCopier::copy(std::byte* dst, const std::byte* src, std::size_t n) {
  if (n == 0) return;
  const Choice c = choose(n);
  const auto began = c.timed ? Clock::now() : Clock::time_point{};
  if (c.streaming) {
    stream_copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
  if (!c.timed) return;
  record(c, static_cast<std::uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - began).count()),
         n);
}

void RingCopier::record(Choice c, std::uint64_t ns, std::size_t n) {
  if (!c.timed) return;
  const bool streaming = c.streaming;
  const bool tried_other = cost_[0] != 0 && cost_[1] != 0 && streaming != streaming_;
  if (tried_other) next_try_ = pieces_ + try_every_;
  if (ns >= kPreemptedNs) return;
  const double per_kib = static_cast<double>(ns) * 1024.0 / static_cast<double>(n) + 1e-3;
  double& cost = cost_[streaming ? 1 : 0];
  // The kind in use is timed often: a running average. The other is timed
  // rarely, and what it cost long ago says little: its latest figure.
  cost = (cost == 0 || tried_other) ? per_kib : 0.75 * cost + 0.25 * per_kib;
  if (cost_[0] == 0 || cost_[1] == 0) return;
  // Seen from the sender, non-temporal stores look cheaper than they are
  // (the receiver then reads from memory, not from a cache): they are
  // chosen only when ordinary stores cost clearly more.
  const bool was = streaming_;
  streaming_ = streaming_ ? cost_[0] >= kCachedBelow * cost_[1]
                          : cost_[0] > kStreamAbove * cost_[1];
  if (!tried_other) return;
  // A try that confirms the choice comes back later; one that changes it,
  // soon.
  try_every_ = streaming_ == was ? std::min(try_every_ * 2, kTryOtherAtMost) : kTryOtherFirst;
  next_try_ = pieces_ + try_every_;
}

}  // namespace collie::transport::shm
