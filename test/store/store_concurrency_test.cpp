// Many clients at once: counters stay exact, barriers release everyone.
#include <future>
#include <mutex>

#include <asio/io_context.hpp>
#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/store/async_client.hpp>

#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using namespace collie::store;
using collie::test::StoreFixture;

TEST_CASE("hundreds of blocking clients add and meet at a barrier", "[concurrency]") {
  StoreFixture f;
  constexpr int kClients = 200;
  constexpr int kRounds = 3;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kClients; ++i)
    clients.push_back(f.client());
  std::vector<std::vector<std::int64_t>> seen(kClients);
  std::vector<std::future<void>> threads;
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  for (int i = 0; i < kClients; ++i) {
    threads.push_back(std::async(std::launch::async, [&, i] {
      try {
        for (int round = 0; round < kRounds; ++round) {
          seen[static_cast<std::size_t>(i)].push_back(
              clients[static_cast<std::size_t>(i)]->add("counter", 1));
          clients[static_cast<std::size_t>(i)]->barrier("round", kClients, 60s);
          // After the barrier every add of this round is done.
          const auto total = std::stoll(clients[static_cast<std::size_t>(i)]->get("counter"));
          if (total < static_cast<std::int64_t>(kClients) * (round + 1)) {
            std::lock_guard lock(errors_mutex);
            errors.push_back("client " + std::to_string(i) + " read " + std::to_string(total) +
                             " after the barrier of round " + std::to_string(round));
          }
          clients[static_cast<std::size_t>(i)]->barrier("after-read", kClients, 60s);
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(errors_mutex);
        errors.push_back("client " + std::to_string(i) + ": " + e.what());
      }
    }));
  }
  for (auto& t : threads)
    t.get();
  CHECK(errors.empty());
  for (const auto& error : errors)
    UNSCOPED_INFO(error);
  // Every value 1..N*rounds was handed out exactly once.
  std::vector<std::int64_t> all;
  for (const auto& s : seen)
    all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == static_cast<std::size_t>(kClients * kRounds));
  for (std::size_t i = 0; i < all.size(); ++i)
    CHECK(all[i] == static_cast<std::int64_t>(i + 1));
}

TEST_CASE("a thousand asynchronous clients on one thread rendezvous", "[concurrency]") {
  StoreFixture f;
  constexpr int kClients = 1000;
  asio::io_context io(1);
  ClientOptions options;
  options.timeout = 60s;
  std::vector<std::unique_ptr<AsyncStoreClient>> clients;
  std::vector<std::int64_t> ranks;
  int released = 0;
  std::vector<std::string> failures;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<AsyncStoreClient>(io, options));
    auto* c = clients.back().get();
    c->connect("127.0.0.1", f.server.port(), [&, c](const Failure* failure, Done) {
      if (failure != nullptr) return failures.push_back(failure->message);
      c->add("rank", 1, [&, c](const Failure* f2, std::int64_t rank) {
        if (f2 != nullptr) return failures.push_back(f2->message);
        ranks.push_back(rank);
        c->set("addr/" + std::to_string(rank), "host-" + std::to_string(rank),
               [&, c](const Failure* f3, Done) {
                 if (f3 != nullptr) return failures.push_back(f3->message);
                 c->barrier("all", kClients, [&](const Failure* f4, Done) {
                   if (f4 != nullptr) return failures.push_back(f4->message);
                   ++released;
                 });
               });
      });
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (released + static_cast<int>(failures.size()) < kClients &&
         std::chrono::steady_clock::now() < deadline) {
    io.run_for(100ms);
  }
  CHECK(failures.empty());
  CHECK(released == kClients);
  std::sort(ranks.begin(), ranks.end());
  for (int i = 0; i < kClients; ++i)
    CHECK(ranks[static_cast<std::size_t>(i)] == i + 1);
  auto check = f.client();
  CHECK(check->count_keys("addr/") == kClients);
  CHECK(check->get("addr/500") == "host-500");
}

TEST_CASE("threads sharing one client are serialized, not interleaved", "[concurrency]") {
  StoreFixture f;
  auto shared = f.client();
  constexpr int kThreads = 8;
  constexpr int kAdds = 200;
  std::vector<std::future<void>> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(std::async(std::launch::async, [&, t] {
      for (int i = 0; i < kAdds; ++i) {
        shared->add("total", 1);
        shared->set("last/" + std::to_string(t), std::to_string(i));
      }
    }));
  }
  for (auto& t : threads)
    t.get();
  CHECK(shared->get("total") == std::to_string(kThreads * kAdds));
  for (int t = 0; t < kThreads; ++t)
    CHECK(shared->get("last/" + std::to_string(t)) == "199");
}

TEST_CASE("gets waiting on many keys are each woken by their own key", "[concurrency]") {
  StoreFixture f;
  constexpr int kWaiters = 50;
  std::vector<std::unique_ptr<StoreClient>> waiters;
  for (int i = 0; i < kWaiters; ++i)
    waiters.push_back(f.client());
  std::vector<std::future<std::string>> got;
  for (int i = 0; i < kWaiters; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] {
      return waiters[static_cast<std::size_t>(i)]->get("key/" + std::to_string(i), 60s);
    }));
  }
  auto writer = f.client();
  for (int i = kWaiters - 1; i >= 0; --i) {
    writer->set("key/" + std::to_string(i), "value " + std::to_string(i));
  }
  for (int i = 0; i < kWaiters; ++i) {
    CHECK(got[static_cast<std::size_t>(i)].get() == "value " + std::to_string(i));
  }
}

TEST_CASE("an async client abandoned mid-wait frees its request on the server", "[concurrency]") {
  StoreFixture f;
  asio::io_context io(1);
  AsyncStoreClient c(io);
  bool connected = false;
  c.connect("127.0.0.1", f.server.port(), [&](const Failure* failure, Done) {
    REQUIRE(failure == nullptr);
    connected = true;
  });
  while (!connected)
    io.run_one_for(100ms);
  bool called = false;
  const auto id = c.get("never", [&](const Failure*, std::string) { called = true; });
  io.run_for(50ms);
  c.abandon(id);
  bool pinged = false;
  c.ping([&](const Failure* failure, Done) { pinged = failure == nullptr; });
  while (!pinged)
    io.run_one_for(100ms);
  auto writer = f.client();
  writer->set("never", "now");
  // Had the server kept the get, its reply would reach the dropped handler.
  bool second_ping = false;
  c.ping([&](const Failure*, Done) { second_ping = true; });
  while (!second_ping)
    io.run_one_for(100ms);
  CHECK_FALSE(called);
  c.close();
  bool after_close = false;
  c.ping([&](const Failure* failure, Done) {
    CHECK(failure != nullptr);
    CHECK(failure->kind == Failure::Kind::Connection);
    after_close = true;
  });
  io.run_for(100ms);
  CHECK(after_close);
}
