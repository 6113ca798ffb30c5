// The transport's contract on both backends, in one process: each rank is a
// TcpTransport or a ShmTransport (the tests that take `backend` run on
// both) driven by its own thread, all meeting through one store server
// (support/transport_cluster.hpp); and what only TCP has (connections,
// handshakes, strangers, socket options). Receives that consume where the
// bytes arrive: transport_consume_test.cpp; shared memory's own:
// shm_test.cpp. Multi-process tests through `collie launch` are in
// p2p_launch_test.cpp.
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

#include "support/log_capture.hpp"
#include "support/mesh_hello.hpp"
#include "support/shm_skip.hpp"
#include "support/raw_connection.hpp"
#include "support/eventually.hpp"
#include "support/thread_ranks.hpp"
#include "support/transport_cluster.hpp"
#include "tcp/sockets.hpp"
#include "tcp/wire.hpp"

using namespace collie::test;
using collie::test::expect;

TEST_CASE("mesh ping-pong carries every size intact, both ways", "[mesh][volume]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  // Shared memory: with each way of storing into a ring (ring_copy.hpp).
  const std::string stores =
      backend == "shm" ? GENERATE(as<std::string>{}, "auto", "cached", "streaming") : "";
  INFO("backend " << backend << " " << stores);
  Cluster c(2, [&](MeshOptions& o) { o.settings.shm_stores = stores.empty() ? "auto" : stores; }, backend);
  const std::vector<std::size_t> sizes = {0,     1,     7,       31,          32,
                                          33,    4095,  4096,    8191,        8193,
                                          65537, 1 << 20, (3 << 20) + 5, (9 << 20) + 17};
  ping_pong(c, sizes);
  if (backend == "tcp") {
    CHECK(c.tcp(0).open_connections() == 1);
    CHECK(c.tcp(1).open_connections() == 1);
  }
}

TEST_CASE("mesh matches tags independently and keeps order within a tag", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  constexpr int kTags = 40;
  constexpr int kPerTag = 5;
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      // Interleaved: round k sends message k of every tag.
      std::vector<std::vector<std::uint8_t>> keep;
      std::vector<RequestPtr> sends;
      for (int k = 0; k < kPerTag; ++k) {
        for (int t = 0; t < kTags; ++t) {
          keep.push_back(
              pattern(100 + static_cast<std::size_t>(t), k, static_cast<std::uint64_t>(t)));
          sends.push_back(
              m.isend(1, static_cast<std::uint64_t>(t), keep.back().data(), keep.back().size()));
        }
      }
      for (auto& s : sends)
        m.wait(s);
    } else {
      // Tags in reverse, half posted before anything arrives, half after.
      std::vector<std::vector<std::uint8_t>> out(kTags * kPerTag);
      std::vector<RequestPtr> recvs;
      for (int t = kTags - 1; t >= kTags / 2; --t) {
        for (int k = 0; k < kPerTag; ++k) {
          auto& v = out[static_cast<std::size_t>(t * kPerTag + k)];
          v.assign(100 + static_cast<std::size_t>(t), 0);
          recvs.push_back(m.irecv(0, static_cast<std::uint64_t>(t), v.data(), v.size()));
        }
      }
      // The rest arrive before their receives: queued, every one.
      expect(collie::test::eventually([&] {
               m.wait_any({}, 1ms);  // moves what is on its way
               for (int t = 0; t < kTags / 2; ++t)
                 if (m.queued_fingerprints(static_cast<std::uint64_t>(t)).size() <
                     static_cast<std::size_t>(kPerTag))
                   return false;
               return true;
             }),
             "the rest never arrived");
      for (int t = kTags / 2 - 1; t >= 0; --t) {
        for (int k = 0; k < kPerTag; ++k) {
          auto& v = out[static_cast<std::size_t>(t * kPerTag + k)];
          v.assign(100 + static_cast<std::size_t>(t), 0);
          recvs.push_back(m.irecv(0, static_cast<std::uint64_t>(t), v.data(), v.size()));
        }
      }
      for (auto& q : recvs)
        m.wait(q);
      for (int t = 0; t < kTags; ++t)
        for (int k = 0; k < kPerTag; ++k)
          expect(out[static_cast<std::size_t>(t * kPerTag + k)] ==
                     pattern(100 + static_cast<std::size_t>(t), k, static_cast<std::uint64_t>(t)),
                 "tag " + std::to_string(t) + " message " + std::to_string(k) + " is wrong");
    }
  });
}

TEST_CASE("mesh sends to itself, before or after the receive is posted", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(1, backend);
  auto& m = c[0];
  const auto a = pattern(1000, 0, 1);
  send(m, 0, 1, a);  // buffered
  CHECK(recv(m, 0, 1, a.size()) == a);
  std::vector<std::uint8_t> out(a.size());
  auto r = m.irecv(0, 2, out.data(), out.size());
  CHECK_FALSE(m.test(r));
  send(m, 0, 2, a);
  m.wait(r);
  CHECK(out == a);
  send(m, 0, 3, {});
  CHECK(recv(m, 0, 3, 0).empty());
  if (backend == "tcp") CHECK(c.tcp(0).open_connections() == 0);
}

TEST_CASE("mesh fails a receive of the wrong size, names both sizes, and goes on", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  std::string error;
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      send(m, 1, 5, pattern(16, 0, 5));
      send(m, 1, 5, pattern(8, 0, 5));
    } else {
      std::vector<std::uint8_t> wrong(32);
      try {
        m.wait(m.irecv(0, 5, wrong.data(), wrong.size()));
      } catch (const collie::RequestError& e) {
        error = e.what();
      }
      expect(recv(m, 0, 5, 8) == pattern(8, 0, 5), "the next message is wrong");
    }
  });
  CHECK_THAT(error, ContainsSubstring("16 bytes") && ContainsSubstring("32 bytes") &&
                        ContainsSubstring("rank 0"));
}

TEST_CASE("mesh: large messages both ways at once never deadlock", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  // More than the kernel buffers between two sockets of one host (an
  // autotuned receive buffer reaches 32 MiB on some), so that neither send
  // can finish before the other rank receives. The ranks' buffers are made
  // once per process and reused: 256 MiB of fresh pages per run cost the
  // sanitized build most of its time (page faults, and the IPIs that
  // unmapping them sends every core), and they are filled and checked with
  // the C library's memset and memcmp (a byte loop under ThreadSanitizer
  // instruments every byte).
  const std::size_t n = std::size_t{64} << 20;
  static std::vector<std::uint8_t> outs[2], ins[2];
  for (auto* v : {&outs[0], &outs[1], &ins[0], &ins[1]}) v->resize(n);
  SECTION("blocking send, then receive, on both ranks") {
    Cluster c(2, backend);
    c.run([&](int r) {
      auto& m = c[r];
      auto& out = outs[r];
      auto& in = ins[r];
      std::memset(out.data(), 1, n);
      std::memset(in.data(), 0, n);
      out[0] = static_cast<std::uint8_t>(r);
      out[n - 1] = static_cast<std::uint8_t>(r + 10);
      m.wait(m.isend(1 - r, 0, out.data(), n));
      m.wait(m.irecv(1 - r, 0, in.data(), n));
      expect(in[0] == 1 - r && in[n - 1] == 11 - r && in[n / 2] == 1, "payload wrong");
    });
  }
  SECTION("isend and irecv with a small unexpected-message queue") {
    Cluster c(2, [](MeshOptions& o) { o.max_unexpected_bytes = 1 << 20; }, backend);
    std::atomic<int> sending{0};
    c.run([&](int r) {
      auto& m = c[r];
      auto& out = outs[r];
      auto& in = ins[r];
      std::memset(out.data(), r + 1, n);
      std::memset(in.data(), 0, n);
      auto s = m.isend(1 - r, 0, out.data(), n);
      // Both sends under way before either receive: each message arrives
      // with no receive for it, far larger than the queue.
      ++sending;
      expect(collie::test::eventually(
                 [&] { return sending.load() == 2 && m.transferred(s) > 0; }),
             "both sends under way");
      auto q = m.irecv(1 - r, 0, in.data(), n);
      m.wait(s);
      m.wait(q);
      // Every byte equal to the first (each to the next), and that one right.
      expect(in[0] == 2 - r && std::memcmp(in.data(), in.data() + 1, n - 1) == 0,
             "payload wrong");
    });
  }
}

TEST_CASE("mesh pauses a peer when the unexpected queue is full, and resumes", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  // Room for one 256 KiB message: the second one waits in the kernel.
  Cluster c(2, [](MeshOptions& o) { o.max_unexpected_bytes = 300 * 1024; }, backend);
  constexpr int kMessages = 8;
  const std::size_t n = 256 * 1024;
  std::string stuck;
  c.run([&](int r) {
    auto& m = c[r];
    if (r == 0) {
      std::vector<std::vector<std::uint8_t>> keep;
      std::vector<RequestPtr> sends;
      for (int t = 0; t < kMessages; ++t) {
        keep.push_back(pattern(n, 0, static_cast<std::uint64_t>(t)));
        sends.push_back(m.isend(1, static_cast<std::uint64_t>(t), keep.back().data(), n));
      }
      for (auto& s : sends)
        m.wait(s);
    } else {
      // Tag 0 is queued, and reading pauses at tag 1 (it does not fit).
      expect(collie::test::eventually([&] {
               m.wait_any({}, 1ms);
               return m.queued_fingerprints(0).size() == 1;
             }),
             "tag 0 never arrived");
      // Tag 2 is behind tag 1 in the stream: asking for it first cannot
      // succeed with this bound, and the timeout says why.
      std::vector<std::uint8_t> early(n);
      try {
        m.wait(m.irecv(0, 2, early.data(), n), 300ms);
      } catch (const collie::TimeoutError& e) {
        stuck = e.what();
      }
      // Pairs in swapped order: the paused message first, then the queued one.
      for (int t = 0; t < kMessages; t += 2) {
        for (int u : {t + 1, t}) {
          expect(recv(m, 0, static_cast<std::uint64_t>(u), n) ==
                     pattern(n, 0, static_cast<std::uint64_t>(u)),
                 "message " + std::to_string(u) + " is wrong");
        }
      }
    }
  });
  CHECK_THAT(stuck, ContainsSubstring("unexpected-message queue is full") &&
                        ContainsSubstring("limit 307200 bytes"));
}

TEST_CASE("mesh connects lazily: a ring opens two connections per rank", "[mesh]") {
  Cluster c(5);
  c.run([&](int r) {
    auto& m = c[r];
    const int n = c.size();
    const auto out = pattern(4096, r, 0);
    auto s = m.isend((r + 1) % n, 0, out.data(), out.size());
    expect(recv(m, (r + n - 1) % n, 0, 4096) == pattern(4096, (r + n - 1) % n, 0), "ring");
    m.wait(s);
  });
  for (int r = 0; r < c.size(); ++r)
    CHECK(c.tcp(r).open_connections() == 2);
}

TEST_CASE("mesh: two ranks connecting to each other at once end with one connection", "[mesh]") {
  for (int round = 0; round < 10; ++round) {
    Cluster c(2);
    c.run([&](int r) {
      auto& m = c[r];
      const auto out = pattern(64, r, 0);
      auto s = m.isend(1 - r, 0, out.data(), out.size());
      expect(recv(m, 1 - r, 0, 64) == pattern(64, 1 - r, 0), "payload");
      m.wait(s);
    });
    CHECK(c.tcp(0).open_connections() == 1);
    CHECK(c.tcp(1).open_connections() == 1);
  }
}

TEST_CASE("mesh: 8 ranks each send to all others, from several threads", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(8, backend);
  c.run([&](int r) {
    auto& m = c[r];
    const int n = c.size();
    std::vector<std::vector<std::uint8_t>> in(static_cast<std::size_t>(n));
    std::vector<std::uint8_t> out = pattern(10000 + static_cast<std::size_t>(r), r, 3);
    std::vector<RequestPtr> reqs;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      in[static_cast<std::size_t>(p)].resize(10000 + static_cast<std::size_t>(p));
      reqs.push_back(m.irecv(p, 3, in[static_cast<std::size_t>(p)].data(),
                             in[static_cast<std::size_t>(p)].size()));
    }
    // Sends from a second thread while this one waits for the receives.
    auto sender = std::async(std::launch::async, [&] {
      for (int p = 0; p < n; ++p)
        if (p != r) m.wait(m.isend(p, 3, out.data(), out.size()));
    });
    for (auto& q : reqs)
      m.wait(q);
    sender.get();
    for (int p = 0; p < n; ++p)
      if (p != r)
        expect(
            in[static_cast<std::size_t>(p)] == pattern(10000 + static_cast<std::size_t>(p), p, 3),
            "from rank " + std::to_string(p));
  });
}

TEST_CASE("mesh: a peer that goes away fails pending and later operations at once", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  std::vector<std::uint8_t> in(1 << 20);
  // Connected and working first.
  c.run([&](int r) {
    if (r == 0)
      send(c[0], 1, 0, pattern(10, 0, 0));
    else
      expect(recv(c[1], 0, 0, 10) == pattern(10, 0, 0), "first message");
  });
  auto pending = c[0].irecv(1, 9, in.data(), in.size());
  CHECK(c[0].failure_of(1).empty());  // alive
  const auto closed_at = std::chrono::steady_clock::now();
  c.meshes[1].reset();  // rank 1 closes its connections
  std::string error;
  try {
    c[0].wait(pending, 20s);
  } catch (const collie::ConnectionError& e) {
    error = e.what();
  }
  const auto took = std::chrono::steady_clock::now() - closed_at;
  CHECK(took < 1s);
  CHECK_THAT(error, ContainsSubstring("rank 1") && ContainsSubstring("recv") &&
                        ContainsSubstring("0 of 1048576 bytes received"));
  if (backend == "tcp")
    CHECK_THAT(error, ContainsSubstring("rank 1 at 127.0.0.1:") &&
                          ContainsSubstring("closed the connection"));
  else
    CHECK_THAT(error, ContainsSubstring("rank 1 (shared memory) closed its transport"));
  // The transport says why, when asked of the peer.
  CHECK_THAT(c[0].failure_of(1), ContainsSubstring("rank 1"));
  // Later operations fail at once too.
  const auto out = pattern(5, 0, 0);
  CHECK_THROWS_AS(c[0].wait(c[0].isend(1, 0, out.data(), out.size()), 20s),
                  collie::ConnectionError);
}

TEST_CASE("mesh: what a peer sent whole before it closed is received, then it is named gone",
          "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  constexpr int kMessages = 8;
  // Rank 1 sends 8 messages and closes; rank 0 has taken in only the first.
  for (int i = 0; i < kMessages; ++i)
    c[1].wait(c[1].isend(0, 3, pattern(1024, 1, i).data(), 1024), 20s);
  expect(recv(c[0], 1, 3, 1024) == pattern(1024, 1, 0), "message 0");
  c.meshes[1].reset();
  // A receive of something rank 1 never sent fails, naming it: meanwhile
  // rank 0 has looked at rank 1's state and seen it gone.
  std::vector<std::uint8_t> never(16);
  CHECK_THROWS_AS(c[0].wait(c[0].irecv(1, 99, never.data(), never.size()), 20s),
                  collie::ConnectionError);
  // What it had sent is all there, in order.
  for (int i = 1; i < kMessages; ++i) {
    INFO("message " << i);
    CHECK(recv(c[0], 1, 3, 1024) == pattern(1024, 1, i));
  }
  std::vector<std::uint8_t> more(1024);
  CHECK_THROWS_AS(c[0].wait(c[0].irecv(1, 3, more.data(), more.size()), 20s),
                  collie::ConnectionError);
}

TEST_CASE("mesh: a wait past its timeout names the operation, the peer and the bytes", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  std::vector<std::uint8_t> in(8);
  // rank 1 never sends with tag 4.
  auto r = c[0].irecv(1, 4, in.data(), in.size());
  std::string error;
  try {
    c[0].wait(r, 200ms);
  } catch (const collie::TimeoutError& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("recv from rank 1") && ContainsSubstring("tag 4") &&
                        ContainsSubstring("200 ms") && ContainsSubstring("0 of 8 bytes received"));
  // A receive that had not started is withdrawn cleanly: the pair still works.
  c.run([&](int rank) {
    if (rank == 1)
      send(c[1], 0, 4, pattern(8, 1, 4));
    else
      expect(recv(c[0], 1, 4, 8) == pattern(8, 1, 4), "after the timeout");
  });
}

TEST_CASE("mesh refuses strangers and keeps working", "[mesh]") {
  Cluster c(2, [](MeshOptions& o) { o.token = "secret"; });
  const auto port = port_of(c.tcp(0));
  namespace wire = collie::transport::tcp::wire;

  SECTION("random bytes") {
    collie::test::RawConnection raw(port);
    raw.send(std::vector<std::uint8_t>{'G', 'E', 'T', ' ', '/', '\r', '\n', '\r', '\n'});
    CHECK(raw.closed_by_peer(5s));
  }
  SECTION("a flood of strangers is one line in the log") {
    collie::test::LogCapture log;
    for (int i = 0; i < 20; ++i) {
      collie::test::RawConnection raw(port);
      raw.send(std::vector<std::uint8_t>{'G', 'E', 'T', ' ', '/', '\r', '\n', '\r', '\n'});
      CHECK(raw.closed_by_peer(5s));
    }
    const auto lines = log.containing("refused a connection from 127.0.0.1");
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], ContainsSubstring("not a collie peer"));
  }
  SECTION("a hello with the wrong token, group or rank") {
    struct Case {
      std::string token;
      std::uint64_t group_offset;
      std::uint32_t to;
      std::string reason;
    };
    const std::vector<Case> cases = {{"guess", 0, 0, "wrong token"},
                                     {"secret", 1, 0, "another job"},
                                     {"secret", 0, 1, "ranks it names do not fit"}};
    for (const auto& k : cases) {
      collie::test::RawConnection raw(port);
      const auto answer = collie::test::send_mesh_hello(
          raw, c.tcp(0).options().group_id + k.group_offset, 1, k.to, 2, k.token, 5s);
      REQUIRE(answer);
      CHECK(answer->verdict == wire::Verdict::Refused);
      const std::string& told = answer->reason;
      CHECK_THAT(told, ContainsSubstring(k.reason));
      // Nothing a stranger could use: the group's id, its size, this rank.
      CHECK_THAT(told, !ContainsSubstring(fmt::format("{:016x}", c.tcp(0).options().group_id)) &&
                           !ContainsSubstring("world size") && !ContainsSubstring("rank 0"));
      CHECK(raw.closed_by_peer(5s));
    }
  }
  SECTION("silence until the handshake timeout is not a problem for others") {
    collie::test::RawConnection raw(port);  // says nothing
    c.run([&](int r) {
      if (r == 1)
        send(c[1], 0, 0, pattern(100, 1, 0));
      else
        expect(recv(c[0], 1, 0, 100) == pattern(100, 1, 0), "while a stranger is silent");
    });
  }
  // The job is unharmed.
  c.run([&](int r) {
    if (r == 1)
      send(c[1], 0, 1, pattern(1000, 1, 1));
    else
      expect(recv(c[0], 1, 1, 1000) == pattern(1000, 1, 1), "after the stranger");
  });
}

TEST_CASE("mesh: a second hello for a connected rank is refused, even with the token", "[mesh]") {
  Cluster c(2, [](MeshOptions& o) { o.token = "secret"; });
  namespace wire = collie::transport::tcp::wire;
  c.run([&](int r) {  // rank 1 connects to rank 0
    if (r == 1)
      send(c[1], 0, 0, pattern(10, 1, 0));
    else
      expect(recv(c[0], 1, 0, 10) == pattern(10, 1, 0), "before");
  });
  const auto port = port_of(c.tcp(0));
  // An insider (it has the token) claims to be rank 1 again.
  collie::test::RawConnection raw(port);
  const auto answer =
      collie::test::send_mesh_hello(raw, c.tcp(0).options().group_id, 1, 0, 2, "secret", 5s);
  REQUIRE(answer);
  CHECK(answer->verdict == wire::Verdict::Duplicate);
  CHECK(raw.closed_by_peer(5s));
  // The first connection carries on, both ways.
  c.run([&](int r) {
    if (r == 1) {
      send(c[1], 0, 1, pattern(1000, 1, 1));
      expect(recv(c[1], 0, 2, 1000) == pattern(1000, 0, 2), "after, from rank 0");
    } else {
      expect(recv(c[0], 1, 1, 1000) == pattern(1000, 1, 1), "after, from rank 1");
      send(c[0], 1, 2, pattern(1000, 0, 2));
    }
  });
}

TEST_CASE("mesh: a rank with another token cannot connect, and says why", "[mesh]") {
  collie::test::StoreFixture fixture;
  const auto id = collie::crypto::random_u64();
  MeshOptions a;
  a.world_size = 2;
  a.group_id = id;
  a.token = "one";
  a.timeout = 10s;
  MeshOptions b = a;
  b.rank = 1;
  b.token = "two";
  Mesh m0(fixture.shared_client(), a);
  Mesh m1(fixture.shared_client(), b);
  const auto out = pattern(4, 1, 0);
  std::string error;
  try {
    m1.wait(m1.isend(0, 0, out.data(), out.size()));
  } catch (const collie::ConnectionError& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("rank 0 at") && ContainsSubstring("refused") &&
                        ContainsSubstring("wrong token"));
}

TEST_CASE("mesh: many threads share one mesh", "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  Cluster c(2, backend);
  constexpr int kThreads = 4;
  constexpr int kMessages = 200;
  c.run([&](int r) {
    std::vector<std::future<void>> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.push_back(std::async(std::launch::async, [&, t] {
        auto& m = c[r];
        const auto tag = static_cast<std::uint64_t>(t);
        for (int k = 0; k < kMessages; ++k) {
          const auto out = pattern(static_cast<std::size_t>(k * 37 % 3000), r,
                                   tag + static_cast<std::uint64_t>(k));
          auto s = m.isend(1 - r, tag, out.data(), out.size());
          expect(recv(m, 1 - r, tag, out.size()) ==
                     pattern(out.size(), 1 - r, tag + static_cast<std::uint64_t>(k)),
                 "thread " + std::to_string(t) + " message " + std::to_string(k));
          m.wait(s);
        }
      }));
    }
    for (auto& f : threads)
      f.get();
  });
}

TEST_CASE("mesh sockets are close-on-exec: a rank's child never holds a peer's connection",
          "[mesh]") {
  Cluster c(2);
  c.run([&](int r) {
    if (r == 0)
      send(c[0], 1, 0, pattern(10, 0, 0));
    else
      expect(recv(c[1], 0, 0, 10) == pattern(10, 0, 0), "payload");
  });
  // Address and port: another socket of this process (the store's client)
  // may have the same port number on another address.
  std::set<std::pair<std::string, int>> ports;
  for (int r = 0; r < 2; ++r) {
    const auto address = c.tcp(r).address();
    ports.emplace(address.substr(0, address.rfind(':')),
                  std::stoi(address.substr(address.rfind(':') + 1)));
  }
  auto text = [](const sockaddr_in& a) {
    char buffer[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, buffer, sizeof buffer);
    return std::string(buffer);
  };
  // Every socket of this process at either end of a transport's port: the
  // two listeners and both ends of the connection.
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    sockaddr_in local{}, remote{};
    socklen_t length = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0 ||
        local.sin_family != AF_INET)
      continue;
    length = sizeof(remote);
    const bool connected = ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length) == 0;
    if (!ports.contains({text(local), ntohs(local.sin_port)}) &&
        !(connected && ports.contains({text(remote), ntohs(remote.sin_port)})))
      continue;
    ++found;
    INFO("descriptor " << fd << " port " << ntohs(local.sin_port));
    CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  // At least the two listeners and both ends of the connection. A full run
  // once found a fifth: a connection the mesh has dropped (the loser of a
  // simultaneous connect) still closing. It is checked like the others.
  CHECK(found >= 4);
}

TEST_CASE("mesh: a receive that times out half-way drops the rest, and the peer stays", "[mesh]") {
  Cluster c(2, [](MeshOptions& o) { o.token = "secret"; });
  namespace wire = collie::transport::tcp::wire;
  // Rank 1, by hand: 100 bytes of a 1000-byte message, then nothing.
  collie::test::RawConnection raw(port_of(c.tcp(0)));
  const auto answer =
      collie::test::send_mesh_hello(raw, c.tcp(0).options().group_id, 1, 0, 2, "secret", 5s);
  REQUIRE(answer);
  REQUIRE(answer->verdict == wire::Verdict::Accepted);
  auto message = [](std::uint64_t tag, std::uint64_t sequence, const std::vector<std::uint8_t>& v,
                    std::size_t from, std::size_t to) {
    const std::size_t header = from == 0 ? wire::kHeaderBytes : 0;
    std::vector<std::uint8_t> out(header + (to - from));
    if (header > 0) wire::encode(wire::Header{tag, sequence, v.size(), 0}, out.data());
    for (std::size_t i = from; i < to; ++i)
      out[header + i - from] = v[i];
    return out;
  };
  const auto big = pattern(1000, 1, 5);
  raw.send(message(5, 0, big, 0, 100));
  std::vector<std::uint8_t> in(1000, 0xEE);
  auto r = c[0].irecv(1, 5, in.data(), in.size());
  std::string error;
  try {
    // Until the 100 bytes are in, then past the timeout.
    while (c[0].transferred(r) < 100)
      c[0].wait_some(r, 10ms);
    c[0].wait(r, 100ms);
  } catch (const collie::TimeoutError& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("100 of 1000 bytes received"));
  // The rest of the message comes and is dropped; the next one is whole,
  // and the peer was not cut off.
  raw.send(message(5, 0, big, 100, 1000));
  const auto next = pattern(8, 1, 6);
  raw.send(message(6, 1, next, 0, 8));
  CHECK(recv(c[0], 1, 6, 8) == next);
  CHECK(std::all_of(in.begin() + 100, in.end(), [](std::uint8_t b) { return b == 0xEE; }));
  CHECK_FALSE(raw.closed_by_peer(200ms));
}

TEST_CASE("tune: a connection between two processes of one host never paces (BBR)", "[mesh]") {
  // BBR, the default of many cloud images, paces loopback at a few GB/s once
  // it leaves start-up (sockets.cpp): tune() gives such a connection cubic
  // (or reno), and leaves any other algorithm as the host chose it.
  const auto congestion = [](int fd) {
    char name[32] = {};
    socklen_t length = sizeof name - 1;
    REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) == 0);
    return std::string(name);
  };
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  for (const char* before : {"bbr", "reno"}) {
    INFO("before: " << before);
    asio::ip::tcp::socket client(io), served(io);
    client.connect(acceptor.local_endpoint());
    acceptor.accept(served);
    if (::setsockopt(client.native_handle(), IPPROTO_TCP, TCP_CONGESTION, before,
                     static_cast<socklen_t>(std::strlen(before))) != 0) {
      WARN("skipped: this kernel cannot use " << before << " (" << std::strerror(errno) << ")");
      continue;
    }
    REQUIRE(congestion(client.native_handle()) == before);
    // Where ranks outnumber cores the runtime keeps BBR's pacing.
    collie::transport::tcp::tune(client, false);
    CHECK(congestion(client.native_handle()) == before);
    collie::transport::tcp::tune(client, true);
    const auto after = congestion(client.native_handle());
    if (std::string(before) == "bbr")
      CHECK((after == "cubic" || after == "reno"));
    else
      CHECK(after == before);
  }
}

TEST_CASE("tune: a connection between two processes of one host gets a fixed send buffer",
          "[mesh]") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket client(io), served(io);
  client.connect(acceptor.local_endpoint());
  acceptor.accept(served);
  const auto send_buffer = [](int fd) {
    int bytes = 0;
    socklen_t length = sizeof bytes;
    REQUIRE(::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, &length) == 0);
    return bytes;
  };
  const int before = send_buffer(client.native_handle());
  collie::transport::tcp::tune(client, true);
  // Linux doubles what is set (for its own bookkeeping) and clamps it to
  // net.core.wmem_max.
  int wmem_max = 0;
  std::ifstream("/proc/sys/net/core/wmem_max") >> wmem_max;
  const int expected = 2 * std::min(collie::transport::tcp::kSameHostSendBuffer,
                                    wmem_max > 0 ? wmem_max : INT32_MAX / 2);
  INFO("before tune: " << before << " B");
  CHECK(send_buffer(client.native_handle()) == expected);
}

TEST_CASE("mesh: a send nobody waits for, right after busy waits, still goes out whole",
          "[mesh]") {
  const std::string backend = BACKENDS;
  COLLIE_SKIP_WITHOUT_SHM(backend);
  INFO("backend " << backend);
  // The background thread leaves the sockets to waiting callers while their
  // requests keep finishing (progress.cpp, kQuiet); a send posted then, that
  // its sender never waits for, must still be written by it.
  Cluster c(2, backend);
  const std::size_t n = std::size_t{8} << 20;
  std::atomic<bool> received{false};
  c.run([&](int r) {
    auto& m = c[r];
    for (int i = 0; i < 200; ++i) {  // busy: many waits that finish requests
      if (r == 0) {
        send(m, 1, 1, pattern(64, 0, i));
        expect(recv(m, 1, 2, 64) == pattern(64, 1, i), "ping-pong reply");
      } else {
        expect(recv(m, 0, 1, 64) == pattern(64, 0, i), "ping-pong message");
        send(m, 0, 2, pattern(64, 1, i));
      }
    }
    if (r == 0) {
      const auto out = pattern(n, 0, 7);
      auto s = m.isend(1, 3, out.data(), n);
      // Not waiting: only the background thread writes beyond what isend
      // wrote at once. Rank 1's receive completes only if it does.
      expect(collie::test::eventually([&] { return received.load(); }, 60s),
             "rank 1 never got the message");
      expect(m.test(s), "the send is complete once its bytes arrived");
    } else {
      expect(recv(m, 0, 3, n) == pattern(n, 0, 7), "the large message");
      received = true;
    }
  });
}
