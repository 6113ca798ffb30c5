// The shared-memory ring copier (transport/src/shm/ring_copy.hpp): what it
// copies, and which store kind it keeps for which measured costs.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "support/catch.hpp"

#include "shm/ring_copy.hpp"

using collie::transport::shm::RingCopier;
using collie::transport::shm::Stores;
using collie::transport::shm::stream_copy;

namespace {

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

// Feeds a copier pieces of `n` bytes that cost `cached` and `streaming`
// nanoseconds per piece; returns how many of `pieces` it streamed.
int feed(RingCopier& c, int pieces, std::uint64_t cached, std::uint64_t streaming,
         std::size_t n = 32 * 1024) {
  int streamed = 0;
  for (int i = 0; i < pieces; ++i) {
    const auto choice = c.choose(n);
    streamed += choice.streaming ? 1 : 0;
    c.record(choice, choice.streaming ? streaming : cached, n);
  }
  return streamed;
}

}  // namespace

TEST_CASE("stream_copy copies every byte at every alignment and length, and nothing else",
          "[shm][ring_copy]") {
  const auto src = pattern(70 * 1024 + 64, 1);
  for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 4096, 70 * 1024 + 3}) {
    for (std::size_t from : {0, 1, 7, 16, 33}) {
      for (std::size_t to : {0, 3, 8, 16, 61}) {
        auto dst = pattern(n + 128, 2);
        const auto before = dst;
        stream_copy(dst.data() + 32 + to % 32, src.data() + from, n);
        INFO("n " << n << ", source offset " << from << ", destination offset " << to);
        const std::size_t at = 32 + to % 32;
        for (std::size_t i = 0; i < dst.size(); ++i) {
          const std::byte want = (i >= at && i < at + n) ? src[from + i - at] : before[i];
          if (dst[i] != want) FAIL("byte " << i << " differs");
        }
      }
    }
  }
}

TEST_CASE("a ring copier copies exactly, whichever stores it uses", "[shm][ring_copy]") {
  for (Stores mode : {Stores::Auto, Stores::Cached, Stores::Streaming}) {
    RingCopier c(mode);
    std::vector<std::byte> ring(256 * 1024);
    for (unsigned piece = 0; piece < 300; ++piece) {
      // Lengths around kMeasuredFrom, and whole pieces, at 64-byte places.
      const std::size_t n = piece % 3 == 0   ? 32 * 1024
                            : piece % 3 == 1 ? RingCopier::kMeasuredFrom - 64 + piece % 128
                                             : RingCopier::kMeasuredFrom + piece * 7;
      const auto src = pattern(n, piece);
      const std::size_t at = (piece * 64 * 37) % (ring.size() - n) / 64 * 64;
      c.copy(ring.data() + at, src.data(), n);
      INFO("mode " << static_cast<int>(mode) << ", piece " << piece);
      REQUIRE(std::equal(src.begin(), src.end(), ring.begin() + static_cast<std::ptrdiff_t>(at)));
    }
  }
}

TEST_CASE("a ring copier keeps ordinary stores while they cost about what non-temporal ones do",
          "[shm][ring_copy]") {
  if (!collie::transport::shm::streaming_stores_available()) {
    WARN("skipped: this CPU has no non-temporal stores, so the copier always uses ordinary ones");
    return;
  }
  // As measured where two cores share a cache: 27 against 37 ns per KiB
  // (a message in cache), 98 against 66 (one read from memory: non-temporal
  // stores look cheaper to the sender, and are slower end to end).
  for (auto [cached, streaming] : {std::pair{27, 37}, std::pair{98, 66}}) {
    RingCopier c;
    INFO("ordinary " << cached << ", non-temporal " << streaming << " ns per KiB");
    const int streamed = feed(c, 5000, cached * 32, streaming * 32);
    CHECK(c.current() == Stores::Cached);
    // Only its tries (the first piece, then fewer and fewer) stream.
    CHECK(streamed >= 2);
    CHECK(streamed <= 20);
  }
  RingCopier c;
  // Short pieces are never timed and never streamed.
  CHECK_FALSE(c.choose(RingCopier::kMeasuredFrom - 1).streaming);
  CHECK_FALSE(c.choose(RingCopier::kMeasuredFrom - 1).timed);
}

TEST_CASE("a ring copier streams where ordinary stores cost several times more, and comes back",
          "[shm][ring_copy]") {
  if (!collie::transport::shm::streaming_stores_available()) {
    WARN("skipped: this CPU has no non-temporal stores, so the copier always uses ordinary ones");
    return;
  }
  RingCopier c;
  // Cores that share no cache: 400 against 35 ns per KiB.
  const int streamed = feed(c, 5000, 400 * 32, 35 * 32);
  CHECK(c.current() == Stores::Streaming);
  CHECK(streamed >= 4980);  // ordinary stores only on its tries
  // The ranks move to cores that share a cache: it goes back to ordinary
  // stores within one interval between tries.
  feed(c, static_cast<int>(RingCopier::kTryOtherAtMost) + 1, 27 * 32, 37 * 32);
  CHECK(c.current() == Stores::Cached);
  // And it finds the slow placement again as soon.
  feed(c, static_cast<int>(RingCopier::kTryOtherAtMost) + 1, 400 * 32, 35 * 32);
  CHECK(c.current() == Stores::Streaming);
  // A piece that took a millisecond was preempted: it does not count.
  const auto choice = c.choose(32 * 1024);
  c.record(choice, 5'000'000, 32 * 1024);
  CHECK(c.current() == Stores::Streaming);
}

TEST_CASE("a ring copier told which stores to use uses them and never times", "[shm][ring_copy]") {
  RingCopier cached(Stores::Cached);
  CHECK_FALSE(cached.choose(1 << 20).streaming);
  CHECK_FALSE(cached.choose(1 << 20).timed);
  RingCopier streaming(Stores::Streaming);
  const bool available = collie::transport::shm::streaming_stores_available();
  CHECK(streaming.choose(1 << 20).streaming == available);
  CHECK_FALSE(streaming.choose(1 << 20).timed);
  CHECK_FALSE(streaming.choose(100).streaming);
}
