// Copying a message into a peer's ring, the store kind chosen by measuring.
//
// A ring is written by one core and read by another, over and over. When
// the two cores share a cache (one CCX, one die), ordinary stores are the
// fastest: the reader takes each line from the writer's cache. When they
// do not (two dies or sockets, which is where a virtual machine's vCPUs
// may sit, and where ranks spread over a large machine sit), every line
// the writer stores is first taken back from the reader's cache, and the
// same copy runs several times slower; non-temporal stores, which write
// around the caches, keep most of the speed there (the figures:
// docs/PERFORMANCE.md, "Shared memory"). The copier times the
// pieces it copies with the store kind it uses, now and then tries the
// other, and keeps whichever has been faster lately: the placement of
// ranks on cores is not known and changes while a job runs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace collie::transport::shm {

enum class Stores {
  Auto,       // measure both, use the faster
  Cached,     // ordinary stores (memcpy)
  Streaming,  // non-temporal stores, where the CPU has them; else ordinary
};

// Whether this build and CPU have non-temporal stores (x86-64: always).
bool streaming_stores_available();

// Copies n bytes with non-temporal stores where dst is 16-byte aligned
// (the rest with ordinary ones), then fences them: a release store that
// publishes the bytes may follow. Ordinary memcpy where unavailable.
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n);

class RingCopier {
 public:
  explicit RingCopier(Stores mode = Stores::Auto);

  // Copies n bytes into the ring; every store is visible before a release
  // store that follows.
  void copy(std::byte* dst, const std::byte* src, std::size_t n);

  // copy() is choose(), the copy, and record() with the time it took when
  // the choice says to time it (public for tests).
  struct Choice {
    bool streaming = false;
    bool timed = false;
  };
  Choice choose(std::size_t n);
  void record(Choice c, std::uint64_t ns, std::size_t n);

  // What it uses now (Stores::Cached or Stores::Streaming).
  Stores current() const { return streaming_ ? Stores::Streaming : Stores::Cached; }

  // Pieces at least this long are timed and may be streamed; shorter ones
  // (latency matters more than bandwidth) always use ordinary stores.
  static constexpr std::size_t kMeasuredFrom = 8 * 1024;
  // Now and then a piece uses the other store kind, to see whether it has
  // become the faster: after kTryOtherFirst pieces, then twice as many
  // pieces after every try that confirms the choice, up to
  // kTryOtherAtMost (a try of the slower kind costs up to 10 pieces).
  static constexpr std::uint64_t kTryOtherFirst = 16;
  static constexpr std::uint64_t kTryOtherAtMost = 512;
  // One piece in this many of the kind in use is timed.
  static constexpr unsigned kTimeEvery = 8;

 private:
  Stores mode_;
  bool streaming_ = false;
  std::uint64_t pieces_ = 0;
  std::uint64_t try_every_ = kTryOtherFirst;
  std::uint64_t next_try_ = kTryOtherFirst;
  // Recent nanoseconds per KiB for each kind (0: not measured yet).
  double cost_[2] = {0, 0};
};

}  // namespace collie::transport::shm
