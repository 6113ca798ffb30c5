// Receives that consume the payload where it arrives (irecv_consume), and
// claims on the sockets (claim_progress), on both backends, in one process
// (support/transport_cluster.hpp).
#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <numeric>
#include <set>
#include <span>
#include <sys/socket.h>
#include <thread>

#include "support/catch.hpp"

#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/store/prefix_store.hpp>
#include <collie/transport/shm.hpp>
#include <collie/transport/tcp.hpp>

#include "support/eventually.hpp"
#include "support/log_capture.hpp"
#include "support/mesh_hello.hpp"
#include "support/raw_connection.hpp"
#include "support/shm_skip.hpp"
#include "support/thread_ranks.hpp"
#include "support/transport_cluster.hpp"
#include "tcp/sockets.hpp"
#include "tcp/wire.hpp"

using namespace collie::test;
using collie::test::expect;

namespace {

// What a consuming receive saw: every piece in order, checked for coverage.
struct Consumed {
  std::vector<std::uint8_t> bytes;
  std::vector<std::pair<std::size_t, std::size_t>> pieces;  // (offset, size)
  collie::transport::Consumer consumer() {
    return [this](std::size_t offset, std::span<const std::byte> piece) {
      pieces.emplace_back(offset, piece.size());
      if (bytes.size() < offset + piece.size()) bytes.resize(offset + piece.size());
      std::memcpy(bytes.data() + offset, piece.data(), piece.size());
    };
  }
  // The pieces follow each other from 0 and end at `total`.
  bool covers(std::size_t total) const {
    std::size_t next = 0;
    for (const auto& [offset, size] : pieces) {
      if (offset != next || size == 0) return false;
      next += size;
    }
    return next == total;
  }
};

}  // namespace

TEST_CASE("mesh irecv_consume hands the payload over in order, posted before or after", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  const std::vector<std::size_t> sizes = {0, 1, 4095, 4096, 65536, 65537, (1 << 20) + 3};
  std::vector<Consumed> early(sizes.size()), late(sizes.size());
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      recv(m, 1, 2, 0);  // rank 1 has posted the early receives
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        send(m, 1, 100 + i, pattern(sizes[i], 0, 100 + i));  // posted before it arrives
        send(m, 1, 200 + i, pattern(sizes[i], 0, 200 + i));  // arrives first
      }
      send(m, 1, 1, {});  // all sent
    } else {
      std::vector<RequestPtr> posted;
      for (std::size_t i = 0; i < sizes.size(); ++i)
        posted.push_back(m.irecv_consume(0, 100 + i, sizes[i], early[i].consumer()));
      send(m, 0, 2, {});
      for (auto& q : posted)
        m.wait(q);
      recv(m, 0, 1, 0);  // the late ones are all queued, complete
      for (std::size_t i = 0; i < sizes.size(); ++i)
        m.wait(m.irecv_consume(0, 200 + i, sizes[i], late[i].consumer()));
    }
  });
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("size " << sizes[i]);
    CHECK(early[i].covers(sizes[i]));
    CHECK(early[i].bytes == pattern(sizes[i], 0, 100 + i));
    CHECK(late[i].covers(sizes[i]));
    CHECK(late[i].bytes == pattern(sizes[i], 0, 200 + i));
  }
  // A large message arrives in more than one piece (through the receive
  // buffer, never whole into memory the caller did not give).
  CHECK(early.back().pieces.size() > 1);
}

TEST_CASE("mesh irecv_consume keeps elements aligned: byte o of the payload at an address o mod 16",
          "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  // A piece may end mid-element; the next must not shift the rest of the
  // message off its alignment (the reduce kernels read whole elements).
  // The first piece follows the header wherever the stream put it; every
  // later one is read for the receive, at its phase.
  Cluster c(2, backend);
  constexpr std::size_t kBytes = (8 << 20) + 8;
  std::vector<std::pair<std::uintptr_t, std::size_t>> pieces;  // address, offset
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      recv(m, 1, 2, 0);
      send(m, 1, 5, pattern(kBytes, 0, 5));
    } else {
      auto q = m.irecv_consume(0, 5, kBytes, [&](std::size_t offset, std::span<const std::byte> p) {
        pieces.emplace_back(reinterpret_cast<std::uintptr_t>(p.data()), offset);
      });
      send(m, 0, 2, {});
      m.wait(q);
    }
  });
  REQUIRE(pieces.size() > 2);
  for (std::size_t i = 1; i < pieces.size(); ++i) {
    INFO("piece " << i << " at offset " << pieces[i].second);
    CHECK((pieces[i].first - pieces[i].second) % 16 == 0);
  }
}

TEST_CASE("mesh claim_progress: claims nest, and once dropped, sends finish with nobody waiting",
          "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  constexpr std::size_t kBytes = 32 << 20;  // more than the sockets' buffers hold
  bool finished_alone = false, intact = false;
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      const auto data = pattern(kBytes, 0, 9);
      RequestPtr s;
      {
        auto outer = m.claim_progress();
        auto inner = m.claim_progress();
        s = m.isend(1, 9, data.data(), data.size());
        recv(m, 1, 3, 0);  // a wait under the claims drives the sockets
      }
      // No wait from here: the transport's own thread finishes the send.
      finished_alone = collie::test::eventually([&] { return m.test(s); }, 60s);
      m.wait(s, 0ms);
    } else {
      std::vector<unsigned char> got(kBytes);
      auto q = m.irecv(0, 9, got.data(), got.size());
      send(m, 0, 3, {});
      m.wait(q);
      intact = got == pattern(kBytes, 0, 9);
    }
  });
  CHECK(finished_alone);
  CHECK(intact);
}

TEST_CASE("mesh irecv_consume reduces straight from the arriving bytes", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  constexpr std::size_t kCount = (3 << 20) / sizeof(std::int32_t) + 7;
  std::vector<std::int32_t> mine(kCount), theirs(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    mine[i] = static_cast<std::int32_t>(i * 3);
    theirs[i] = static_cast<std::int32_t>(1000000 - i);
  }
  std::size_t consumed = 0;
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      m.wait(m.isend(1, 7, theirs.data(), kCount * sizeof(std::int32_t)));
      return;
    }
    // Pieces may split an element: keep the partial bytes of one.
    std::array<std::byte, sizeof(std::int32_t)> carry{};
    auto consume = [&](std::size_t offset, std::span<const std::byte> piece) {
      for (std::size_t k = 0; k < piece.size(); ++k) {
        const std::size_t at = offset + k;
        carry[at % sizeof(std::int32_t)] = piece[k];
        if (at % sizeof(std::int32_t) == sizeof(std::int32_t) - 1) {
          std::int32_t v = 0;
          std::memcpy(&v, carry.data(), sizeof(v));
          mine[at / sizeof(std::int32_t)] += v;
        }
      }
      consumed += piece.size();
    };
    m.wait(m.irecv_consume(0, 7, kCount * sizeof(std::int32_t), consume));
  });
  CHECK(consumed == kCount * sizeof(std::int32_t));
  for (std::size_t i = 0; i < kCount; ++i) {
    if (mine[i] != static_cast<std::int32_t>(i * 3 + 1000000 - i)) {
      FAIL("element " << i << " is " << mine[i]);
    }
  }
}

TEST_CASE("mesh irecv_consume from itself, a wrong size, and a consumer that throws", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  SECTION("to itself, before and after the send") {
    Cluster c(1, backend);
    auto& m = c[0];
    const auto a = pattern(5000, 0, 1);
    Consumed before, after;
    auto q = m.irecv_consume(0, 1, a.size(), before.consumer());
    send(m, 0, 1, a);
    m.wait(q);
    send(m, 0, 2, a);
    m.wait(m.irecv_consume(0, 2, a.size(), after.consumer()));
    CHECK(before.covers(a.size()));
    CHECK(before.bytes == a);
    CHECK(after.covers(a.size()));
    CHECK(after.bytes == a);
  }
  SECTION("between two ranks") {
    Cluster c(2, backend);
    std::string wrong_size, threw;
    Consumed next;
    c.run([&](int r) {
      auto& m = c[r];
      if (r == 0) {
        send(m, 1, 3, pattern(100, 0, 3));
        send(m, 1, 3, pattern(200000, 0, 3));
        send(m, 1, 3, pattern(300, 0, 3));
        return;
      }
      Consumed unused;
      try {
        m.wait(m.irecv_consume(0, 3, 99, unused.consumer()));
      } catch (const collie::RequestError& e) {
        wrong_size = e.what();
      }
      expect(unused.pieces.empty(), "a message of the wrong size reached the consumer");
      try {
        m.wait(m.irecv_consume(0, 3, 200000, [](std::size_t, std::span<const std::byte>) {
          throw std::runtime_error("no room for it");
        }));
      } catch (const collie::RequestError& e) {
        threw = e.what();
      }
      // The stream stays in step: the next message is whole.
      m.wait(m.irecv_consume(0, 3, 300, next.consumer()));
    });
    CHECK_THAT(wrong_size, ContainsSubstring("100 bytes") && ContainsSubstring("expected 99 bytes"));
    CHECK_THAT(threw, ContainsSubstring("consumer threw") && ContainsSubstring("no room for it"));
    CHECK(next.covers(300));
    CHECK(next.bytes == pattern(300, 0, 3));
  }
}
