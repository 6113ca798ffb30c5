// The per-peer router: two backends in one rank, each serving some peers,
// behave as one transport. Both backends here are TCP (under different
// store keys): what is tested is the routing, which a shared-memory backend
// will use the same way.
#include <algorithm>
#include <array>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "support/catch.hpp"

#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/transport/peer_router.hpp>
#include <collie/transport/tcp.hpp>

#include "support/eventually.hpp"
#include "support/store_fixture.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;
using collie::transport::PeerRouter;
using collie::transport::TcpTransport;
using collie::transport::TransportOptions;

namespace {

constexpr int kWorld = 3;

// Pairs with rank 2 go through backend 1, the others through backend 0:
// both ranks of a pair decide alike.
std::vector<std::size_t> routes(int rank) {
  std::vector<std::size_t> of;
  for (int p = 0; p < kWorld; ++p)
    of.push_back(p == 2 || rank == 2 ? 1 : 0);
  return of;
}

struct RoutedWorld {
  RoutedWorld() {
    const auto id = collie::crypto::random_u64();
    for (int r = 0; r < kWorld; ++r) {
      std::vector<std::shared_ptr<collie::transport::Transport>> both;
      for (const char* group : {"world", "side"}) {
        TransportOptions o;
        o.rank = r;
        o.world_size = kWorld;
        o.group = group;
        o.group_id = id;
        o.timeout = 30s;
        auto t = std::make_shared<TcpTransport>(fixture.shared_client(), o);
        tcp[static_cast<std::size_t>(r)].push_back(t);
        both.push_back(t);
      }
      routers.push_back(std::make_unique<PeerRouter>(both, routes(r)));
    }
  }
  void run(const std::function<void(int)>& body) {
    std::vector<std::future<void>> done;
    for (int r = 0; r < kWorld; ++r)
      done.push_back(std::async(std::launch::async, body, r));
    for (auto& f : done)
      f.get();
  }

  collie::test::StoreFixture fixture;
  std::array<std::vector<std::shared_ptr<TcpTransport>>, kWorld> tcp;
  std::vector<std::unique_ptr<PeerRouter>> routers;
};

std::vector<int> payload(int from, int to) {
  std::vector<int> v(1000 + static_cast<std::size_t>(to));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = from * 100000 + to * 10000 + static_cast<int>(i);
  return v;
}

}  // namespace

TEST_CASE("peer router: every pair talks through the backend chosen for it", "[router]") {
  RoutedWorld w;
  w.run([&](int r) {
    auto& t = *w.routers[static_cast<std::size_t>(r)];
    std::vector<std::vector<int>> in(kWorld), out(kWorld);
    std::vector<collie::transport::RequestPtr> requests;
    for (int p = 0; p < kWorld; ++p) {
      out[static_cast<std::size_t>(p)] = payload(r, p);
      in[static_cast<std::size_t>(p)].resize(1000 + static_cast<std::size_t>(r));
      requests.push_back(t.irecv(p, 5, in[static_cast<std::size_t>(p)].data(),
                                 in[static_cast<std::size_t>(p)].size() * sizeof(int)));
    }
    for (int p = 0; p < kWorld; ++p) {
      const auto& v = out[static_cast<std::size_t>(p)];
      requests.push_back(
          t.isend(p, 5, v.data(), v.size() * sizeof(int), 40u + static_cast<unsigned>(r)));
    }
    for (auto& q : requests)
      t.wait(q);
    for (int p = 0; p < kWorld; ++p) {
      expect(in[static_cast<std::size_t>(p)] == payload(p, r),
             fmt::format("rank {} from rank {}", r, p));
      expect(t.fingerprint(requests[static_cast<std::size_t>(p)]) == 40u + static_cast<unsigned>(p),
             fmt::format("fingerprint from rank {}", p));
    }
  });
  // Each backend connected only to the peers routed to it.
  CHECK(w.tcp[0][0]->open_connections() == 1);  // 0-1
  CHECK(w.tcp[0][1]->open_connections() == 1);  // 0-2
  CHECK(w.tcp[1][0]->open_connections() == 1);  // 1-0
  CHECK(w.tcp[1][1]->open_connections() == 1);  // 1-2
  CHECK(w.tcp[2][0]->open_connections() == 0);
  CHECK(w.tcp[2][1]->open_connections() == 2);  // 2-0, 2-1
  CHECK(w.routers[0]->describe() == "tcp on " + w.tcp[0][0]->address() + " (ranks 0-1); tcp on " +
                                        w.tcp[0][1]->address() + " (ranks 2)");
  CHECK(w.routers[2]->describe() == "tcp on " + w.tcp[2][1]->address() + " (ranks 0-2)");
  CHECK(w.routers[0]->describe_peer(2) == w.tcp[0][1]->describe_peer(2));
}

TEST_CASE("peer router: queued messages of every backend, and failures of one", "[router]") {
  RoutedWorld w;
  const int one = 1;
  w.run([&](int r) {
    if (r == 0) return;
    auto& t = *w.routers[static_cast<std::size_t>(r)];
    t.wait(t.isend(0, 9, &one, sizeof(one), 100u + static_cast<unsigned>(r)));
  });
  auto& t = *w.routers[0];
  // Both messages come in, each through its own backend, moved by the
  // backends' own threads while nobody waits.
  std::vector<std::pair<int, std::uint64_t>> queued;
  collie::test::eventually([&] {
    queued = t.queued_fingerprints(9);
    return queued.size() >= 2;
  }, 30s);
  std::sort(queued.begin(), queued.end());
  REQUIRE(queued.size() == 2);
  CHECK(queued[0] == std::pair<int, std::uint64_t>{1, 101});
  CHECK(queued[1] == std::pair<int, std::uint64_t>{2, 102});
  // Rank 2 goes away: only the pairs through its backend fail.
  w.routers[2].reset();
  w.tcp[2].clear();
  int got = 0;
  CHECK_THROWS_AS(t.wait(t.irecv(2, 10, &got, sizeof(got)), 20s), collie::ConnectionError);
  t.wait(t.irecv(1, 9, &got, sizeof(got)), 20s);
  CHECK(got == 1);
}

TEST_CASE("peer router refuses backends that do not fit", "[router]") {
  collie::test::StoreFixture fixture;
  auto make = [&](int rank, int world, const char* group) {
    TransportOptions o;
    o.rank = rank;
    o.world_size = world;
    o.group = group;
    return std::make_shared<TcpTransport>(fixture.shared_client(), o);
  };
  auto a = make(0, 2, "a");
  CHECK_THROWS_WITH(PeerRouter({a, make(0, 3, "b")}, {0, 1}),
                    ContainsSubstring("backends disagree") && ContainsSubstring("rank 0 of 3"));
  CHECK_THROWS_WITH(PeerRouter({a}, {0}), ContainsSubstring("1 backend choices for a world of 2"));
  CHECK_THROWS_WITH(PeerRouter({a}, {0, 1}), ContainsSubstring("rank 1 goes to backend 1, of 1"));
  CHECK_THROWS_AS(PeerRouter({}, {}), collie::ArgumentError);
  PeerRouter fine({a}, {0, 0});
  int x = 0;
  CHECK_THROWS_WITH(fine.isend(2, 0, &x, sizeof(x)), ContainsSubstring("rank 2 is not in the group"));
  // The router and the TCP backend word it alike, naming the operation.
  CHECK_THROWS_WITH(fine.irecv(-1, 0, &x, sizeof(x)),
                    "rank 0: recv from rank -1: rank -1 is not in the group (ranks 0 to 1)");
  CHECK_THROWS_WITH(a->isend(5, 0, &x, sizeof(x)),
                    "rank 0: send to rank 5: rank 5 is not in the group (ranks 0 to 1)");
  CHECK_THROWS_WITH(a->irecv_consume(1, 3, 4, {}),
                    ContainsSubstring("rank 0: irecv_consume from rank 1 (tag 3, 4 bytes)") &&
                        ContainsSubstring("consumer is empty"));
}

TEST_CASE("peer router: wait_any with no requests moves every backend's messages in", "[router]") {
  // A progress claim keeps the backends' threads out (as a collective's
  // does): only wait_any({}, t) moves the messages into the queues then.
  RoutedWorld w;
  auto& t = *w.routers[0];
  const auto claim = t.claim_progress();
  const int one = 1;
  w.run([&](int r) {
    if (r == 0) return;
    auto& s = *w.routers[static_cast<std::size_t>(r)];
    s.wait(s.isend(0, 9, &one, sizeof(one), 100u + static_cast<unsigned>(r)));
  });
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  auto queued = t.queued_fingerprints(9);
  while (queued.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    CHECK(t.wait_any({}, 10ms) == -1);
    queued = t.queued_fingerprints(9);
  }
  std::sort(queued.begin(), queued.end());
  REQUIRE(queued.size() == 2);
  CHECK(queued[0] == std::pair<int, std::uint64_t>{1, 101});
  CHECK(queued[1] == std::pair<int, std::uint64_t>{2, 102});
}
