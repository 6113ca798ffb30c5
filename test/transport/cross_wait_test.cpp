// One wait across backends (PeerRouter::wait_any given requests of shared
// memory and of TCP at once, as a collective's dataflow waits): it finishes
// with whichever kind of peer answers first, moves both kinds of data while
// it holds every backend's claim (no send is left half-written while it
// sleeps in the other backend), and its answers are the requests that
// finished. The same exchange runs over two TCP backends, where no backend
// watches for another (the wait then takes turns).
#include <algorithm>
#include <future>
#include <numeric>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/transport/open.hpp>
#include <collie/transport/peer_router.hpp>
#include <collie/transport/tcp.hpp>

#include "support/shm_skip.hpp"
#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using collie::transport::RequestPtr;
using collie::transport::Transport;
using collie::transport::TransportOptions;

namespace {

constexpr int kWorld = 3;

TransportOptions options(int rank, std::uint64_t id, const char* group = "world") {
  TransportOptions o;
  o.rank = rank;
  o.world_size = kWorld;
  o.group_id = id;
  o.group = group;
  o.timeout = 60s;
  return o;
}

// Ranks 0 and 1 on host "a" (shared memory between them), rank 2 on "b".
std::vector<std::shared_ptr<Transport>> mixed_world(collie::test::StoreFixture& fixture) {
  const auto id = collie::crypto::random_u64();
  std::vector<std::future<std::shared_ptr<Transport>>> opening;
  for (int r = 0; r < kWorld; ++r) {
    opening.push_back(std::async(std::launch::async, [&, r] {
      auto o = options(r, id);
      o.host_id.assign(1, r < 2 ? 'a' : 'b');  // (assign: g++ 12 warns on = here)
      return collie::transport::open_transport(fixture.shared_client(), o);
    }));
  }
  std::vector<std::shared_ptr<Transport>> t;
  for (auto& f : opening)
    t.push_back(f.get());
  return t;
}

// Two TCP backends per rank: pairs with rank 2 go through the second.
std::vector<std::shared_ptr<Transport>> two_tcp_world(collie::test::StoreFixture& fixture) {
  const auto id = collie::crypto::random_u64();
  std::vector<std::shared_ptr<Transport>> t;
  for (int r = 0; r < kWorld; ++r) {
    std::vector<std::shared_ptr<Transport>> both;
    for (const char* group : {"world", "side"})
      both.push_back(std::make_shared<collie::transport::TcpTransport>(fixture.shared_client(),
                                                                       options(r, id, group)));
    std::vector<std::size_t> of;
    for (int p = 0; p < kWorld; ++p)
      of.push_back(p == 2 || r == 2 ? 1 : 0);
    t.push_back(std::make_shared<collie::transport::PeerRouter>(both, of));
  }
  return t;
}

std::vector<std::uint8_t> pattern(int from, int round, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>(from * 31 + round * 7 + static_cast<int>(i % 251));
  return v;
}

// Each round rank 0 sends to ranks 1 and 2 and receives their answers (the
// message back, sent once it came), waiting with wait_any over all four
// requests under one claim, as the executor does. The sizes cover empty,
// one byte, and messages larger than a shared-memory ring and than a
// socket's buffers (they move in pieces while the wait sleeps in the other
// backend); under a sanitizer, which sees the same pieces move, the largest
// is 12 MiB, not 24.
void exchange(const std::vector<std::shared_ptr<Transport>>& t) {
  const std::size_t large = (COLLIE_TEST_SANITIZED ? 12u : 24u) << 20;
  const std::vector<std::size_t> sizes = {0, 1, 4096, 100000, 9u << 20, 3, large, 64};
  std::vector<std::future<void>> peers;
  for (int r = 1; r < kWorld; ++r) {
    peers.push_back(std::async(std::launch::async, [&, r] {
      auto& me = *t[static_cast<std::size_t>(r)];
      for (std::size_t round = 0; round < sizes.size(); ++round) {
        std::vector<std::uint8_t> in(sizes[round]);
        me.wait(me.irecv(0, 11, in.data(), in.size()));
        if (in != pattern(0, static_cast<int>(round), in.size()))
          throw std::runtime_error(fmt::format("rank {} round {}: rank 0's bytes are wrong", r,
                                               round));
        const auto out = pattern(r, static_cast<int>(round), in.size());
        me.wait(me.isend(0, 12, out.data(), out.size(), 1000u + static_cast<unsigned>(r)));
      }
    }));
  }
  auto& zero = *t[0];
  const auto claim = zero.claim_progress();
  for (std::size_t round = 0; round < sizes.size(); ++round) {
    const auto n = sizes[round];
    INFO("round " << round << ", " << n << " bytes");
    const auto out = pattern(0, static_cast<int>(round), n);
    std::vector<std::vector<std::uint8_t>> in(kWorld, std::vector<std::uint8_t>(n));
    std::vector<RequestPtr> requests = {
        zero.irecv(1, 12, in[1].data(), n), zero.irecv(2, 12, in[2].data(), n),
        zero.isend(1, 11, out.data(), n), zero.isend(2, 11, out.data(), n)};
    std::vector<RequestPtr> watch = requests;
    while (!watch.empty()) {
      const int k = zero.wait_any(watch, 60s);
      REQUIRE(k >= 0);
      REQUIRE(k < static_cast<int>(watch.size()));
      CHECK(zero.test(watch[static_cast<std::size_t>(k)]));
      zero.wait(watch[static_cast<std::size_t>(k)], 0ms);  // its error, if any
      watch.erase(watch.begin() + k);
    }
    for (int p = 1; p < kWorld; ++p) {
      CHECK(in[static_cast<std::size_t>(p)] == pattern(p, static_cast<int>(round), n));
      CHECK(zero.fingerprint(requests[static_cast<std::size_t>(p - 1)]) ==
            1000u + static_cast<unsigned>(p));
    }
  }
  for (auto& f : peers)
    f.get();
}

}  // namespace

TEST_CASE("wait across backends: shared memory and TCP in one wait_any", "[router][shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  collie::test::StoreFixture fixture;
  const auto t = mixed_world(fixture);
  REQUIRE(t[0]->shares_memory_with(1));
  REQUIRE(!t[0]->shares_memory_with(2));
  exchange(t);
}

TEST_CASE("wait across backends: two TCP backends take turns", "[router]") {
  collie::test::StoreFixture fixture;
  exchange(two_tcp_world(fixture));
}

TEST_CASE("wait across backends: a wait with no time left polls once, and a slice runs out",
          "[router][shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  collie::test::StoreFixture fixture;
  const auto t = mixed_world(fixture);
  auto& zero = *t[0];
  int a = 0, b = 0;
  std::vector<RequestPtr> requests = {zero.irecv(1, 5, &a, sizeof a),
                                      zero.irecv(2, 5, &b, sizeof b)};
  // Nobody sends: both answer "none" when their time is up.
  CHECK(zero.wait_any(requests, 0ms) == -1);
  CHECK(zero.wait_any(requests, 30ms) == -1);
  // Rank 2 (TCP) sends; the wait finishes with its receive whichever
  // backend it sleeps in.
  const int two = 2;
  t[2]->wait(t[2]->isend(0, 5, &two, sizeof two));
  CHECK(zero.wait_any(requests, 60s) == 1);
  CHECK(b == 2);
  const int one = 1;
  t[1]->wait(t[1]->isend(0, 5, &one, sizeof one));
  CHECK(zero.wait_any(std::span<const RequestPtr>(requests).first(1), 60s) == 0);
  CHECK(a == 1);
}
