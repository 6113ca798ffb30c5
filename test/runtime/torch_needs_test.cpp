// What the torch.distributed backend needs from the runtime, tested in C++
// with the ranks as threads: receives from any rank, the collectives with a
// count per rank (all_to_all_v, all_gather_v, gather_v) and groups that meet
// in a store the program gives (InitOptions::store). Both transports.
#include <cstring>
#include <numeric>
#include <future>
#include <set>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/process_group.hpp>
#include <collie/store/client.hpp>
#include <collie/store/prefix_store.hpp>
#include <collie/store/server.hpp>

#include "support/shm_skip.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;

namespace {

void run_on(const std::string& transport, int world,
            const std::function<void(collie::ProcessGroup&)>& body,
            std::chrono::milliseconds timeout = 60s) {
  collie::test::run_ranks(world, body, timeout,
                          [&](collie::InitOptions& o) { o.transport = transport; });
}

// The byte a rank puts at element i of what it sends to `to` (any dtype:
// the v-collectives move bytes, so every byte is checked).
std::byte pattern(int from, int to, std::size_t byte) {
  return static_cast<std::byte>((from * 53 + to * 31 + static_cast<int>(byte) * 7 + 1) & 0xff);
}

// Shared memory unusable here (shm_skip.hpp says when): say so, skip it.
bool no_shm() {
  const auto why = collie::transport::shared_memory_unusable();
  if (!why.empty()) WARN("skipped on shared memory: " << why);
  return !why.empty();
}

}  // namespace

TEST_CASE("recv_any returns each sender once with its message, on both transports",
          "[any_source]") {
  for (const std::string transport : {"tcp", "shm"}) {
    if (transport == "shm" && no_shm()) continue;
    for (int world = 1; world <= 4; ++world) {
      INFO(transport << ", world " << world);
      run_on(transport, world, [&](collie::ProcessGroup& pg) {
        const int n = pg.size();
        if (pg.rank() != 0) {
          std::int64_t mine = 1000 + pg.rank();
          pg.send(&mine, sizeof mine, 0, 7);
          // A message under another tag is not taken by the receive of tag 7.
          std::int64_t other = -pg.rank();
          pg.send(&other, sizeof other, 0, 8);
          return;
        }
        if (n == 1) {  // to oneself
          std::int64_t out = 5, in = 0;
          pg.send(&out, sizeof out, 0, 7);
          expect(pg.recv_any(&in, sizeof in, 7) == 0 && in == 5, "a world of one");
          return;
        }
        std::set<int> seen;
        for (int k = 1; k < n; ++k) {
          std::int64_t v = 0;
          auto work = pg.irecv_any(&v, sizeof v, 7);
          work.wait();
          const int from = work.source();
          expect(from >= 1 && from < n, fmt::format("source {}", from));
          expect(v == 1000 + from, fmt::format("from {}: {}", from, v));
          expect(seen.insert(from).second, fmt::format("rank {} twice", from));
        }
        for (int k = 1; k < n; ++k) {
          std::int64_t v = 0;
          const int from = pg.recv_any(&v, sizeof v, 8);
          expect(v == -from, fmt::format("tag 8 from {}: {}", from, v));
        }
      });
    }
  }
}

TEST_CASE("recv_any: a wrong size, a timeout and a negative tag say what is wrong",
          "[any_source]") {
  run_on("tcp", 2, [](collie::ProcessGroup& pg) {
    std::int32_t small = 0;
    if (pg.rank() == 1) {
      std::int64_t big = 1;
      pg.send(&big, sizeof big, 0, 1);
      pg.barrier();
      return;
    }
    auto work = pg.irecv_any(&small, sizeof small, 1);
    expect(work.source() == -1, "no source before it completes");
    try {
      work.wait();
      expect(false, "a message of 8 bytes fills a receive of 4");
    } catch (const collie::RequestError& e) {
      expect(std::string(e.what()).find('8') != std::string::npos, e.what());
    }
    try {
      pg.irecv_any(&small, sizeof small, 2).wait(50ms);
      expect(false, "nobody sent with tag 2");
    } catch (const collie::TimeoutError& e) {
      expect(std::string(e.what()).find("any rank") != std::string::npos, e.what());
    }
    try {
      pg.recv_any(&small, sizeof small, -1);
      expect(false, "a negative tag");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("negative") != std::string::npos, e.what());
    }
    pg.barrier();
  });
}

TEST_CASE("recv_any fails, naming why, once every other rank has left without sending",
          "[any_source]") {
  for (const std::string transport : {"tcp", "shm"}) {
    if (transport == "shm" && no_shm()) continue;
    INFO(transport);
    run_on(transport, 3, [](collie::ProcessGroup& pg) {
      std::int64_t v = 0;
      // Everyone speaks once first, so connections exist to notice closing.
      if (pg.rank() != 0) {
        pg.send(&v, sizeof v, 0, 1);
        return;  // the group goes, its connections close
      }
      for (int k = 0; k < 2; ++k) pg.recv_any(&v, sizeof v, 1);
      const auto began = std::chrono::steady_clock::now();
      try {
        pg.recv_any(&v, sizeof v, 2);  // the group's timeout: 60 s
        expect(false, "a message from ranks that left");
      } catch (const collie::ConnectionError& e) {
        expect(std::string(e.what()).find("every other rank has failed or left") !=
                   std::string::npos,
               e.what());
      }
      expect(std::chrono::steady_clock::now() - began < 30s, "it waited for the timeout");
    });
  }
}

TEST_CASE("all_to_all_v, all_gather_v and gather_v move every byte of every dtype",
          "[counts]") {
  for (const std::string transport : {"tcp", "shm"}) {
    if (transport == "shm" && no_shm()) continue;
    for (int world = 1; world <= 5; ++world) {
      INFO(transport << ", world " << world);
      run_on(transport, world, [&](collie::ProcessGroup& pg) {
        const int n = pg.size(), me = pg.rank();
        const auto N = static_cast<std::size_t>(n);
        for (const auto dtype : collie::kDataTypes) {
          const std::size_t es = collie::dtype_size(dtype);
          const auto what = [&](const char* c) {
            return fmt::format("{} {} on rank {}", c, collie::dtype_name(dtype), me);
          };
          // all_to_all_v: i sends (i + 2j) % 4 elements to j (0 to 3:
          // empty blocks, one element, fewer than the ranks).
          auto count = [](int from, int to) { return static_cast<std::size_t>((from + 2 * to) % 4); };
          std::vector<std::size_t> send(N), recv(N);
          for (int j = 0; j < n; ++j) {
            send[static_cast<std::size_t>(j)] = count(me, j);
            recv[static_cast<std::size_t>(j)] = count(j, me);
          }
          const auto sends = std::accumulate(send.begin(), send.end(), std::size_t{0});
          const auto recvs = std::accumulate(recv.begin(), recv.end(), std::size_t{0});
          std::vector<std::byte> in(sends * es), out(recvs * es + 3, std::byte{0xee});
          for (std::size_t j = 0, at = 0; j < N; at += send[j] * es, ++j)
            for (std::size_t b = 0; b < send[j] * es; ++b)
              in[at + b] = pattern(me, static_cast<int>(j), b);
          pg.run_vector_collective(collie::Collective::AllToAll, dtype, in.data(), send,
                                   out.data(), recv, 0, {});
          for (std::size_t j = 0, at = 0; j < N; at += recv[j] * es, ++j)
            for (std::size_t b = 0; b < recv[j] * es; ++b)
              expect(out[at + b] == pattern(static_cast<int>(j), me, b),
                     fmt::format("{}: byte {} from rank {}", what("all_to_all_v"), b, j));
          for (std::size_t b = recvs * es; b < out.size(); ++b)
            expect(out[b] == std::byte{0xee}, what("all_to_all_v wrote past its blocks"));

          // all_gather_v and gather_v: rank j gives j % 3 elements (0 at rank 0).
          std::vector<std::size_t> counts(N);
          for (std::size_t j = 0; j < N; ++j) counts[j] = j % 3;
          const auto total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
          std::vector<std::byte> mine(counts[static_cast<std::size_t>(me)] * es);
          for (std::size_t b = 0; b < mine.size(); ++b) mine[b] = pattern(me, -1, b);
          const std::size_t own = counts[static_cast<std::size_t>(me)];
          auto check_gathered = [&](const std::vector<std::byte>& got, const std::string& c) {
            for (std::size_t j = 0, at = 0; j < N; at += counts[j] * es, ++j)
              for (std::size_t b = 0; b < counts[j] * es; ++b)
                expect(got[at + b] == pattern(static_cast<int>(j), -1, b),
                       fmt::format("{}: byte {} from rank {}", c, b, j));
          };
          std::vector<std::byte> all(total * es);
          pg.run_vector_collective(collie::Collective::AllGather, dtype, mine.data(),
                                   std::span(&own, 1), all.data(), counts, 0, {});
          check_gathered(all, what("all_gather_v"));
          for (int root = 0; root < n; ++root) {
            std::vector<std::byte> at_root(me == root ? total * es : 0);
            pg.run_vector_collective(collie::Collective::Gather, dtype, mine.data(),
                                     std::span(&own, 1), at_root.data(), counts, root, {});
            if (me == root) check_gathered(at_root, what("gather_v") + fmt::format(" root {}", root));
          }
        }
        // The typed forms, async, and a collective after them in order.
        std::vector<float> x(static_cast<std::size_t>(me + 1), static_cast<float>(me));
        std::vector<std::size_t> counts(N);
        for (std::size_t j = 0; j < N; ++j) counts[j] = j + 1;
        std::vector<float> gathered(N * (N + 1) / 2);
        auto work = pg.all_gather_v_async(std::span(x), std::span(gathered), counts);
        std::vector<int> one{1};
        pg.all_reduce(std::span(one));
        work.wait();
        expect(one[0] == n, "all_reduce after an async all_gather_v");
        std::vector<float> at_root(me == n - 1 ? gathered.size() : 0);
        pg.gather_v_async(std::span(x), std::span(at_root), counts, n - 1).wait();
        if (me == n - 1) expect(at_root == gathered, "typed gather_v_async");
        for (std::size_t j = 0, at = 0; j < N; at += j + 1, ++j)
          for (std::size_t i = 0; i <= j; ++i)
            expect(gathered[at + i] == static_cast<float>(j), "typed all_gather_v");
      });
    }
  }
}

TEST_CASE("counts per rank: disagreements are named, as are bad arguments", "[counts]") {
  // Rank 1 expects 2 elements from rank 0, which sends 3.
  REQUIRE_THROWS_WITH(
      run_on("tcp", 2,
             [](collie::ProcessGroup& pg) {
               std::vector<int> in(4, 1), out(4, 0);
               const std::vector<std::size_t> send = pg.rank() == 0 ? std::vector<std::size_t>{1, 3}
                                                                    : std::vector<std::size_t>{1, 1};
               const std::vector<std::size_t> recv = pg.rank() == 0 ? std::vector<std::size_t>{1, 1}
                                                                    : std::vector<std::size_t>{2, 1};
               pg.all_to_all_v(std::span(in), send, std::span(out), recv);
             }),
      ContainsSubstring("rank 0 sent a block of another size than this rank's count for it (2 "
                      "elements)"));
  // Rank 0 calls all_gather_v while rank 1 calls broadcast.
  REQUIRE_THROWS_WITH(
      run_on("tcp", 2,
             [](collie::ProcessGroup& pg) {
               std::vector<int> in(1, 1), out(2, 0);
               collie::CollectiveOptions o;
               o.timeout = 3000ms;
               if (pg.rank() == 0)
                 pg.all_gather_v(std::span(in), std::span(out), {1, 1}, o);
               else
                 pg.broadcast(std::span(in), 1, o);
             }),
      ContainsSubstring("called all_gather_v(int32)"));
  run_on("tcp", 2, [](collie::ProcessGroup& pg) {
    std::vector<int> in(2), out(2);
    try {
      pg.all_to_all_v(std::span(in), {1}, std::span(out), {1, 1});
      expect(false, "one send count for two ranks");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("send_counts has 1 entries for 2 ranks") !=
                 std::string::npos,
             e.what());
    }
    try {
      pg.all_gather_v(std::span(in), std::span(out), {1, 2});
      expect(false, "an output too small");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("add up to 3 elements but the output has 2") !=
                 std::string::npos,
             e.what());
    }
    try {
      std::vector<int> one(1), four(4);
      pg.gather_v(std::span(one), std::span(four), {2, 2}, 0);
      expect(false, "a count that is not the input's");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("counts[") != std::string::npos, e.what());
    }
  });
}

TEST_CASE("a group meets in a store the program gives, and meets there again after it goes",
          "[given_store]") {
  collie::store::ServerOptions options;
  options.host = "127.0.0.1";
  collie::store::StoreServer server(options);
  const int n = 3;
  auto client = [&] {
    return std::make_shared<collie::store::PrefixStore>(
        std::make_shared<collie::store::StoreClient>("127.0.0.1", server.port()), "program");
  };
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<void>> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::async(std::launch::async, [&, r] {
        collie::InitOptions o;
        o.init_method = "tcp://192.0.2.1:1";  // ignored: the store is given
        o.store = client();
        o.store_name = fmt::format("test 127.0.0.1:{} program/", server.port());
        o.route_to = "127.0.0.1";
        o.rank = r;
        o.world_size = n;
        o.timeout = 30s;
        auto pg = collie::init(o);
        std::vector<std::int64_t> v{r + 1, 10 * (r + 1)};
        pg.all_reduce(std::span(v));
        expect(v[0] == 6 && v[1] == 60, fmt::format("round {} rank {}: {} {}", round, r, v[0], v[1]));
      }));
    }
    for (auto& f : ranks) f.get();
  }
  // The first group's keys and the second's, each in its own namespace,
  // under the program's prefix.
  collie::store::StoreClient look("127.0.0.1", server.port());
  for (const auto& k : look.list_keys("")) UNSCOPED_INFO(k);
  CHECK(look.check({"program/collie/run/0/world/id"}));
  CHECK(look.check({"program/collie/run/0/gen/1/world/id"}));
}
