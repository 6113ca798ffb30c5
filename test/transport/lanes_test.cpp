// A pair's lanes (transport/src/tcp/lanes.hpp), in one process: large
// messages striped over several connections arrive whole and in their
// order, clear and sealed, into posted receives, the unexpected queue, a
// receive posted half-way and consuming receives; small ones stay on the
// pair's connection; a size mismatch leaves the pair in step; a lost peer
// fails the pair by name.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <span>
#include <thread>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/transport/tcp.hpp>

#include "support/eventually.hpp"
#include "support/thread_ranks.hpp"
#include "support/transport_cluster.hpp"
#include "tcp/lanes.hpp"

using namespace collie::test;
using collie::test::expect;
using collie::transport::TcpTransport;
using collie::transport::tcp::kChunkBytes;
using collie::transport::tcp::kStripeFrom;

namespace {

// `streams` lanes per pair; sealed ("on": loopback too) or clear.
std::function<void(MeshOptions&)> lanes_of(int streams, const std::string& seal) {
  return [=](MeshOptions& o) {
    o.settings.streams = streams;
    o.settings.seal = seal;
    o.token = "secret";
  };
}

// The chunks the lanes of `from`'s pair with `to` carried, sending side and
// receiving side, and how many lanes carried any.
struct LaneTotals {
  std::uint64_t sent = 0, received = 0, sent_bytes = 0, received_bytes = 0;
  int used = 0, open = 0;
};
LaneTotals totals(Cluster& c, int from, int to) {
  LaneTotals t;
  for (const auto& l : c.tcp(from).lanes(to)) {
    if (!l.sending) continue;
    ++t.open;
    t.sent += l.chunks;
    t.sent_bytes += l.bytes;
    if (l.chunks > 0) ++t.used;
  }
  for (const auto& l : c.tcp(to).lanes(from)) {
    if (l.sending) continue;
    t.received += l.chunks;
    t.received_bytes += l.bytes;
  }
  return t;
}

// The chunks a message of `n` bytes takes when striped; 0 when it is not.
std::uint64_t chunks_of(std::size_t n) {
  return n >= kStripeFrom ? (n + kChunkBytes - 1) / kChunkBytes : 0;
}

}  // namespace

TEST_CASE("lanes: large messages striped over the lanes arrive intact, every size, both ways",
          "[mesh][lanes]") {
  const std::string seal = GENERATE(as<std::string>{}, "off", "on");
  const int streams = GENERATE(2, 4);
  INFO("COLLIE_SEAL=" << seal << ", " << streams << " lanes");
  Cluster c(2, lanes_of(streams, seal));
  const std::vector<std::size_t> sizes = {1,           4096,        kStripeFrom - 1,
                                          kStripeFrom, kStripeFrom + 1, (1 << 20) + 5,
                                          (3 << 20) + 17, 8 << 20};
  ping_pong(c, sizes);
  std::uint64_t chunks = 0, bytes = 0;
  for (std::size_t n : sizes) {
    chunks += chunks_of(n);
    bytes += chunks_of(n) > 0 ? n : 0;
  }
  for (const auto& [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
    const auto t = totals(c, from, to);
    INFO("rank " << from << " to rank " << to);
    CHECK(t.open == streams);
    CHECK(t.sent == chunks);
    CHECK(t.received == chunks);
    CHECK(t.sent_bytes == bytes);
    CHECK(t.received_bytes == bytes);
    CHECK(t.used >= 2);  // the chunks went over more than one lane
  }
  CHECK(c.tcp(0).open_connections() == 1);
}

TEST_CASE("lanes: one stream opens none, and small messages never open them", "[mesh][lanes]") {
  SECTION("COLLIE_STREAMS=1") {
    Cluster c(2, lanes_of(1, "off"));
    c.run([&](int r) {
      const std::size_t n = 4 << 20;
      if (r == 0) send(c[0], 1, 7, pattern(n, 0, 7));
      else expect(recv(c[1], 0, 7, n) == pattern(n, 0, 7), "the message");
    });
    CHECK(c.tcp(0).lanes(1).empty());
    CHECK(c.tcp(1).lanes(0).empty());
  }
  SECTION("messages under the striping size") {
    Cluster c(2, lanes_of(4, "off"));
    c.run([&](int r) {
      for (std::uint64_t tag = 0; tag < 20; ++tag) {
        const std::size_t n = kStripeFrom - 1 - tag;
        if (r == 0) send(c[0], 1, tag, pattern(n, 0, tag));
        else expect(recv(c[1], 0, tag, n) == pattern(n, 0, tag), "a message");
      }
    });
    CHECK(c.tcp(0).lanes(1).empty());
  }
}

TEST_CASE("lanes: striped and small messages keep their order within a tag, and queue unexpected",
          "[mesh][lanes]") {
  const std::string seal = GENERATE(as<std::string>{}, "off", "on");
  INFO("COLLIE_SEAL=" << seal);
  Cluster c(2, lanes_of(3, seal));
  // Sizes that alternate striped and not, under two tags, all sent before
  // any receive is posted: they wait in the unexpected queue, in order.
  const std::vector<std::size_t> sizes = {1 << 20, 5, (1 << 20) + 3, kStripeFrom, 100,
                                          (2 << 20) + 1};
  c.run([&](int r) {
    if (r == 0) {
      std::vector<std::vector<std::uint8_t>> payloads;
      std::vector<collie::transport::RequestPtr> sends;
      for (std::size_t i = 0; i < sizes.size(); ++i)
        payloads.push_back(pattern(sizes[i], 0, i));
      for (std::size_t i = 0; i < sizes.size(); ++i)
        sends.push_back(c[0].isend(1, i % 2, payloads[i].data(), sizes[i]));
      for (auto& s : sends)
        c[0].wait(s);
      send(c[0], 1, 99, pattern(1, 0, 99));  // all sent
    } else {
      expect(recv(c[1], 0, 99, 1) == pattern(1, 0, 99), "the last message");
      // Tag 1's first, then tag 0's: each tag in its own order.
      for (int tag : {1, 0})
        for (std::size_t i = static_cast<std::size_t>(tag); i < sizes.size(); i += 2)
          expect(recv(c[1], 0, static_cast<std::uint64_t>(tag), sizes[i]) ==
                     pattern(sizes[i], 0, i),
                 "message " + std::to_string(i) + " differs");
    }
  });
}

TEST_CASE("lanes: a receive posted while a striped message is half-way in the queue gets it whole",
          "[mesh][lanes]") {
  const std::string seal = GENERATE(as<std::string>{}, "off", "on");
  INFO("COLLIE_SEAL=" << seal);
  Cluster c(2, lanes_of(4, seal));
  const std::size_t n = 48 << 20;
  c.run([&](int r) {
    if (r == 0) {
      send(c[0], 1, 5, pattern(n, 0, 5));
    } else {
      // The message has begun (queued unexpected); its receive comes now,
      // most likely before the last chunk (either way it must be whole).
      expect(eventually([&] { return c[1].any_queued(); }, std::chrono::seconds(20)),
             "the message never began");
      expect(recv(c[1], 0, 5, n) == pattern(n, 0, 5), "the message differs");
    }
  });
}

TEST_CASE("lanes: a consuming receive gets every chunk once, whole, at its offset",
          "[mesh][lanes]") {
  const std::string seal = GENERATE(as<std::string>{}, "off", "on");
  INFO("COLLIE_SEAL=" << seal);
  Cluster c(2, lanes_of(4, seal));
  const std::size_t n = (4 << 20) + 12;
  c.run([&](int r) {
    if (r == 0) {
      send(c[0], 1, 3, pattern(n, 0, 3));
      return;
    }
    std::vector<std::uint8_t> got(n, 0);
    std::vector<std::uint8_t> seen(n, 0);
    bool whole = true;
    auto req = c[1].irecv_consume(1 - r, 3, n,
                                  [&](std::size_t offset, std::span<const std::byte> piece) {
                                    // A chunk: at a multiple of 64 KiB, whole
                                    // (the last one shorter).
                                    whole = whole && offset % kChunkBytes == 0 &&
                                            (piece.size() == kChunkBytes ||
                                             offset + piece.size() == n);
                                    std::memcpy(got.data() + offset, piece.data(), piece.size());
                                    for (std::size_t i = 0; i < piece.size(); ++i)
                                      ++seen[offset + i];
                                  });
    c[1].wait(req);
    expect(whole, "a piece was not a whole chunk at its offset");
    expect(std::all_of(seen.begin(), seen.end(), [](std::uint8_t s) { return s == 1; }),
           "a byte was handed over twice, or never");
    expect(got == pattern(n, 0, 3), "the bytes differ");
  });
}

TEST_CASE("lanes: a striped message of another size fails its receive, and the pair goes on",
          "[mesh][lanes]") {
  Cluster c(2, lanes_of(2, "off"));
  const std::size_t n = 1 << 20;
  c.run([&](int r) {
    if (r == 0) {
      send(c[0], 1, 1, pattern(n, 0, 1));
      send(c[0], 1, 2, pattern(n + 7, 0, 2));
    } else {
      std::vector<std::uint8_t> wrong(n / 2);
      try {
        c[1].wait(c[1].irecv(0, 1, wrong.data(), wrong.size()));
        expect(false, "a receive of the wrong size succeeded");
      } catch (const collie::RequestError& e) {
        expect(std::string(e.what()).find(std::to_string(n)) != std::string::npos,
               std::string("the error does not name the message's size: ") + e.what());
      }
      expect(recv(c[1], 0, 2, n + 7) == pattern(n + 7, 0, 2), "the next message differs");
    }
  });
}

TEST_CASE("lanes: a peer that goes away fails the pair by name, lanes and all", "[mesh][lanes]") {
  Cluster c(2, lanes_of(4, "on"));
  const std::size_t n = 2 << 20;
  c.run([&](int r) {
    if (r == 0) send(c[0], 1, 1, pattern(n, 0, 1));
    else expect(recv(c[1], 0, 1, n) == pattern(n, 0, 1), "the first message");
  });
  REQUIRE(totals(c, 0, 1).open == 4);
  c.meshes[1].reset();  // rank 1 goes away
  std::vector<std::uint8_t> back(n);
  try {
    c[0].wait(c[0].irecv(1, 2, back.data(), back.size()), std::chrono::seconds(20));
    FAIL("a receive from a rank that is gone succeeded");
  } catch (const collie::ConnectionError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("rank 1"));
  }
}

TEST_CASE("lanes: under auto none until the runtime asks, then as many, and a user's number stays",
          "[mesh][lanes]") {
  const std::size_t n = 1 << 20;
  const auto exchange = [&](Cluster& c, std::uint64_t tag) {
    c.run([&](int r) {
      if (r == 0) send(c[0], 1, tag, pattern(n, 0, tag));
      else expect(recv(c[1], 0, tag, n) == pattern(n, 0, tag), "the message");
    });
  };
  SECTION("auto (0)") {
    Cluster c(2, lanes_of(0, "off"));
    CHECK(c.tcp(0).streams() == 1);
    exchange(c, 1);
    CHECK(totals(c, 0, 1).open == 0);
    c.tcp(0).set_streams(4);
    exchange(c, 2);
    auto t = totals(c, 0, 1);
    CHECK(t.open == 4);
    CHECK(t.sent == chunks_of(n));
    c.tcp(0).set_streams(8);  // more: the pair opens the rest at its next large message
    exchange(c, 3);
    CHECK(totals(c, 0, 1).open == 8);
    c.tcp(0).set_streams(1);  // fewer: nothing striped from now on
    const auto before = totals(c, 0, 1).sent;
    exchange(c, 4);
    CHECK(totals(c, 0, 1).sent == before);
  }
  SECTION("a number the user set") {
    Cluster c(2, lanes_of(2, "off"));
    c.tcp(0).set_streams(8);
    CHECK(c.tcp(0).streams() == 2);
    exchange(c, 1);
    CHECK(totals(c, 0, 1).open == 2);
  }
}

TEST_CASE("lanes: a lane with bytes queued leaves a chunk to one that would deliver it well "
          "sooner",
          "[mesh][lanes]") {
  using collie::transport::tcp::lane_rest;
  using collie::transport::tcp::LaneLoad;
  using namespace std::chrono;
  constexpr std::size_t n = 64 * 1024;
  constexpr double mbyte = 1e6;  // rates in bytes a second
  const std::vector<LaneLoad> fast{{256 * 1024, 120 * mbyte}};
  // Idle, or of a rate not yet known: it takes the chunk, however fast the others.
  CHECK(lane_rest({0, 1 * mbyte}, fast, n) == nanoseconds(0));
  CHECK(lane_rest({1 << 20, 0}, fast, n) == nanoseconds(0));
  // As loaded and as fast as the others, or slower by less than the margin: it takes it.
  CHECK(lane_rest({256 * 1024, 120 * mbyte}, fast, n) == nanoseconds(0));
  CHECK(lane_rest({256 * 1024, 100 * mbyte}, fast, n) == nanoseconds(0));
  // No other lane with a known rate: it takes it.
  CHECK(lane_rest({1 << 20, 1 * mbyte}, std::vector<LaneLoad>{{0, 0}}, n) == nanoseconds(0));
  CHECK(lane_rest({1 << 20, 1 * mbyte}, {}, n) == nanoseconds(0));
  // Half as fast with as much queued: the other delivers it in 2.7 ms, this
  // one in 5.5: it rests half the difference.
  const auto rest = lane_rest({256 * 1024, 60 * mbyte}, fast, n);
  const double mine = (256.0 * 1024 + n) / (60 * mbyte);
  const double best = (256.0 * 1024 + n) / (120 * mbyte);
  CHECK(duration<double>(rest).count() == Approx((mine - best) / 2).epsilon(1e-6));
  // As fast, but with four times as much queued: it rests too.
  CHECK(lane_rest({1 << 20, 120 * mbyte}, fast, n) > nanoseconds(0));
  // The best of several counts (an idle one delivers in 1.1 ms); a rest is
  // never longer than 2 ms.
  const std::vector<LaneLoad> several{{1 << 20, 10 * mbyte}, {0, 60 * mbyte}, {4 << 20, 0}};
  CHECK(lane_rest({4 << 20, 1 * mbyte}, several, n) == milliseconds(2));
  CHECK(lane_rest({64 * 1024, 100 * mbyte}, several, n) == nanoseconds(0));  // 1.3 ms
  CHECK(lane_rest({64 * 1024, 40 * mbyte}, several, n) > nanoseconds(0));    // 3.3 ms
}
