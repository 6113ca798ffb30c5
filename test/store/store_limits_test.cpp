// The server's limits across all clients: memory, connections, blocked
// requests, idle connections, failed authentication, and its log. Each limit
// is reached for real; the client that reaches it gets an error naming it,
// and the server goes on serving everyone else.
#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

#include "protocol.hpp"
#include "support/eventually.hpp"
#include "support/log_capture.hpp"
#include "support/raw_connection.hpp"
#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using namespace collie::store;
using collie::test::eventually;
using collie::test::frame_of;
using collie::test::RawConnection;
using collie::test::StoreFixture;
using Clock = std::chrono::steady_clock;

namespace {

// A well-behaved client is served, and quickly.
void serves_within_a_second(const StoreFixture& f, const std::string& tag) {
  const auto start = Clock::now();
  auto c = f.client();
  c->set("alive/" + tag, tag);
  CHECK(c->get("alive/" + tag) == tag);
  CHECK(Clock::now() - start < 1s);
}

}  // namespace

TEST_CASE("memory: a full store refuses writes, names the limit, and serves on", "[limits]") {
  auto options = StoreFixture::loopback();
  options.max_memory_bytes = 8 << 20;
  StoreFixture f(options);
  auto c = f.client();
  const std::string value(1 << 20, 'v');
  int stored = 0;
  std::string error;
  for (; stored < 20; ++stored) {
    try {
      c->set(fmt::format("big/{}", stored), value);
    } catch (const collie::RequestError& e) {
      error = e.what();
      break;
    }
  }
  // About 8 values of 1 MiB fit in 8 MiB, less what buffers hold.
  CHECK(stored >= 5);
  CHECK(stored < 8);
  CHECK_THAT(error, ContainsSubstring("the store is full") && ContainsSubstring("8388608 bytes") &&
                        ContainsSubstring("--max-memory"));
  CHECK(f.server.stats().memory_bytes <= options.max_memory_bytes);
  // The same connection goes on; what was stored is intact; small values fit.
  CHECK(c->get("big/0") == value);
  serves_within_a_second(f, "full");
  // Deleting frees room for the next one.
  CHECK(c->delete_key("big/0"));
  c->set(fmt::format("big/{}", stored), value);
  CHECK(c->get(fmt::format("big/{}", stored)) == value);

  SECTION("a request too large for what is left is refused before it is read") {
    std::string refused;
    try {
      c->set("bigger", std::string(6 << 20, 'x'));
    } catch (const collie::RequestError& e) {
      refused = e.what();
    }
    CHECK_THAT(refused, ContainsSubstring("the store is full"));
    CHECK(c->try_get("bigger") == std::nullopt);
    CHECK(c->get("big/1") == value);  // the connection is still in step
  }
  SECTION("append and multi_set are refused whole") {
    CHECK_THROWS_WITH(c->multi_set(std::vector<std::string>{"m/1", "m/2", "m/3"},
                                   std::vector<std::string>{value, value, value}),
                      ContainsSubstring("the store is full"));
    CHECK(c->try_get("m/1") == std::nullopt);
    c->set("grow", "x");
    CHECK_THROWS_WITH(
        [&] {
          for (int i = 0; i < 20; ++i)
            c->append("grow", value);
        }(),
        ContainsSubstring("the store is full"));
  }
}

TEST_CASE("memory: replies to a client that does not read cost no copies of the value",
          "[limits]") {
  auto options = StoreFixture::loopback();
  options.max_memory_bytes = 16 << 20;
  StoreFixture f(options);
  auto c = f.client();
  const std::string value(4 << 20, 'r');
  c->set("shared", value);
  const auto before = f.server.stats().memory_bytes;
  // 20 gets of a 4 MiB value, never read: 80 MiB if each reply copied it.
  RawConnection raw(f.server.port());
  raw.handshake();
  std::vector<std::uint8_t> body = {static_cast<std::uint8_t>(wire::Op::Get), 0, 0, 0, 0};
  wire::Writer(body).bytes("shared");
  for (std::uint8_t id = 1; id <= 20; ++id) {
    body[4] = id;
    raw.send(frame_of(body));
  }
  serves_within_a_second(f, "after-unread-gets");
  CHECK(f.server.stats().memory_bytes < before + (1 << 20));
  // Overwriting the value keeps the old one counted while replies point at it.
  c->set("shared", std::string(4 << 20, 's'));
  CHECK(f.server.stats().memory_bytes > before + (3 << 20));
}

TEST_CASE("blocked requests: a limit per connection and one across the server", "[limits]") {
  auto options = StoreFixture::loopback();
  options.max_waits = 3;
  StoreFixture f(options);
  std::vector<std::future<std::string>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(std::async(std::launch::async,
                                 [&f, i] { return f.client()->get(fmt::format("later/{}", i)); }));
  }
  REQUIRE(eventually([&] { return f.server.stats().blocked == 3; }));
  auto c = f.client();
  CHECK_THROWS_WITH(c->get("later/3", 5s), ContainsSubstring("already holds 3 blocked requests") &&
                                               ContainsSubstring("--max-waits"));
  CHECK_THROWS_WITH(c->barrier("b", 2, 5s), ContainsSubstring("already holds 3 blocked requests"));
  for (int i = 0; i < 3; ++i)
    c->set(fmt::format("later/{}", i), std::to_string(i));
  for (int i = 0; i < 3; ++i)
    CHECK(waiting[static_cast<std::size_t>(i)].get() == std::to_string(i));
  CHECK(f.server.stats().blocked == 0);
  // Room again.
  auto g = std::async(std::launch::async, [&] { return f.client()->get("later/4"); });
  REQUIRE(eventually([&] { return f.server.stats().blocked == 1; }));
  c->set("later/4", "4");
  CHECK(g.get() == "4");
}

TEST_CASE("connections: a limit in all and per address, each named to the client", "[limits]") {
  auto options = StoreFixture::loopback();
  ClientOptions quick;
  quick.connect_timeout = 300ms;

  SECTION("in all") {
    options.max_connections = 3;
    StoreFixture f(options);
    auto a = f.client();
    auto b = f.client();
    auto c = f.client();
    CHECK_THROWS_WITH(f.client(quick), ContainsSubstring("as many connections as its limit allows") &&
                                           ContainsSubstring("--max-connections"));
    CHECK(f.server.connections() == 3);
    CHECK(f.server.stats().refused >= 1);
    a.reset();
    REQUIRE(eventually([&] { return f.server.connections() == 2; }));
    auto d = f.client();
    d->set("k", "v");
    CHECK(b->get("k") == "v");
  }
  SECTION("per address") {
    options.max_connections_per_address = 2;
    StoreFixture f(options);
    auto a = f.client();
    auto b = f.client();
    CHECK_THROWS_WITH(f.client(quick), ContainsSubstring("from this host's address") &&
                                           ContainsSubstring("--max-connections-per-address"));
    // Another address is not affected.
    RawConnection other(f.server.port(), "127.0.0.1", "127.0.0.2");
    CHECK(other.handshake().status == wire::HelloStatus::Ok);
    CHECK(f.server.connections() == 3);
  }
}

TEST_CASE("silent strangers cannot hold a connection limit against real clients", "[limits]") {
  auto options = StoreFixture::loopback();
  options.max_connections_per_address = 40;
  options.token = "the-secret";
  StoreFixture f(options);
  // 40 connections that never say a word fill the address's limit.
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < 40; ++i)
    silent.push_back(std::make_unique<RawConnection>(f.server.port()));
  REQUIRE(eventually([&] { return f.server.connections() == 40; }));
  // A real client is refused at first, retries, and once the strangers
  // have been silent for a second one of them makes way for it.
  ClientOptions good;
  good.token = "the-secret";
  good.connect_timeout = 20s;
  auto c = f.client(good);
  c->set("k", "v");
  CHECK(c->get("k") == "v");
  CHECK(silent.front()->closed_by_peer(10s));
  CHECK(f.server.connections() == 40);
  const auto stats = f.server.stats();
  CHECK(stats.evicted >= 1);
  // Connections past their handshake never make way: more newcomers
  // replace strangers, and the real client goes on.
  for (int i = 0; i < 5; ++i) {
    RawConnection newcomer(f.server.port());
    CHECK(newcomer.authenticate("the-secret", 10s) == wire::AuthStatus::Ok);
  }
  CHECK(c->get("k") == "v");
}

TEST_CASE("idle connections are closed, and clients reconnect by themselves", "[limits]") {
  auto options = StoreFixture::loopback();
  options.idle_timeout = 300ms;
  StoreFixture f(options);
  auto c = f.client();
  c->set("k", "before");
  // A raw client is told why, then closed.
  RawConnection raw(f.server.port());
  CHECK(raw.handshake().idle_timeout_ms == 300);
  auto notice = raw.read_frame(20s);
  REQUIRE(notice);
  wire::Reader r(*notice);
  CHECK(r.u8() == static_cast<std::uint8_t>(wire::ReplyStatus::Error));
  CHECK(r.u32() == 0);
  CHECK(r.u16() == static_cast<std::uint16_t>(wire::ErrorCode::Idle));
  CHECK_THAT(std::string(r.bytes()), ContainsSubstring("idle timeout"));
  CHECK(raw.closed_by_peer(5s));
  // The server closed the idle client's connection too; the client's next
  // call opens a new one and is served.
  REQUIRE(eventually([&] { return f.server.connections() == 0; }));
  CHECK(c->get("k") == "before");
  c->set("k", "after");
  CHECK(c->get("k") == "after");

  SECTION("a connection with a blocked request is not idle") {
    auto waiting = std::async(std::launch::async, [&] { return f.client()->get("late", 60s); });
    REQUIRE(eventually([&] { return f.server.stats().blocked == 1; }));
    // Another connection's idle close shows that the timeout has passed.
    RawConnection clock(f.server.port());
    clock.handshake();
    CHECK(clock.read_frame(20s));
    CHECK(f.server.stats().blocked == 1);
    c->set("late", "served");
    CHECK(waiting.get() == "served");
  }
}

TEST_CASE("failed authentication slows its address down, and others are served", "[limits][auth]") {
  auto options = StoreFixture::loopback();
  options.token = "the-secret";
  StoreFixture f(options);
  ClientOptions good;
  good.token = "the-secret";
  auto c = f.client(good);
  c->set("k", "v");

  // Guesses one after another: each waits longer for its answer.
  std::vector<Clock::duration> took;
  for (int i = 0; i < 7; ++i) {
    RawConnection guess(f.server.port());
    const auto start = Clock::now();
    CHECK(guess.authenticate(fmt::format("guess-{}", i), 20s) == wire::AuthStatus::Failed);
    took.push_back(Clock::now() - start);
  }
  // 50 ms x 2^(f-1) apart after f failures: the 7th waits about 1.6 s.
  CHECK(took.back() >= 1200ms);
  CHECK(f.server.stats().auth_failures == 7);

  // Guesses all at once: those whose turn is more than 5 s away are refused
  // unchecked, at once.
  std::vector<std::future<std::optional<wire::AuthStatus>>> burst;
  for (int i = 0; i < 8; ++i) {
    burst.push_back(std::async(std::launch::async, [&f] {
      RawConnection guess(f.server.port());
      return guess.authenticate("guess", 20s);
    }));
  }
  int throttled = 0;
  for (auto& g : burst)
    throttled += g.get() == wire::AuthStatus::Throttled ? 1 : 0;
  CHECK(throttled >= 4);
  // The connected client never noticed; a client from another address is
  // not slowed down.
  const auto start = Clock::now();
  CHECK(c->get("k") == "v");
  RawConnection other(f.server.port(), "127.0.0.1", "127.0.0.2");
  CHECK(other.authenticate("the-secret", 20s) == wire::AuthStatus::Ok);
  CHECK(Clock::now() - start < 1s);

  // A client from the throttled address is told why it is refused.
  ClientOptions wrong;
  wrong.token = "another";
  wrong.connect_timeout = 2s;
  CHECK_THROWS_WITH(f.client(wrong), ContainsSubstring("too many failed attempts") ||
                                         ContainsSubstring("the tokens differ"));
}

TEST_CASE("refusals are logged once per address per interval, with a count", "[limits][log]") {
  collie::test::LogCapture log;
  auto options = StoreFixture::loopback();
  options.log_interval = 500ms;
  StoreFixture f(options);
  for (int i = 0; i < 30; ++i) {
    RawConnection junk(f.server.port());
    junk.send(std::vector<std::uint8_t>(40, 'x'));
    CHECK(junk.closed_by_peer(5s));
  }
  RawConnection elsewhere(f.server.port(), "127.0.0.1", "127.0.0.2");
  elsewhere.send(std::vector<std::uint8_t>(40, 'y'));
  CHECK(elsewhere.closed_by_peer(5s));
  // The count comes when the interval ends, with no other event.
  REQUIRE(eventually([&] { return !log.containing("more like it").empty(); }));
  const auto lines = log.containing("from 127.0.0.1");
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], ContainsSubstring("not a collie store client"));
  CHECK_THAT(lines[1], ContainsSubstring("and 29 more like it from 127.0.0.1 in the last"));
  CHECK(log.containing("from 127.0.0.2").size() == 1);
  serves_within_a_second(f, "after-junk");
}

TEST_CASE("a torch TCPStore client refused is told where torch's clients are served", "[limits][log]") {
  // torch's first byte is a query type (0-13), not collie's magic.
  for (const std::string hint : {"", "collie launch serves torch's clients across nodes only "
                                     "with --insecure"}) {
    INFO("hint '" << hint << "'");
    collie::test::LogCapture log;
    auto options = StoreFixture::loopback();
    if (!hint.empty()) options.torch_refusal_hint = hint;
    StoreFixture f(options);
    RawConnection torch_like(f.server.port());
    torch_like.send(std::vector<std::uint8_t>(40, 0));
    CHECK(torch_like.closed_by_peer(5s));
    REQUIRE(eventually([&] { return !log.containing("a torch TCPStore client?").empty(); }));
    CHECK_THAT(log.containing("a torch TCPStore client?")[0],
               ContainsSubstring(hint.empty() ? "The server serves those with --torch" : hint));
  }
}

TEST_CASE("RateLimitedLog: one line per source per interval, then the count", "[log]") {
  collie::test::LogCapture log;
  collie::RateLimitedLog limited(2s, 2);  // long enough for a slow (sanitized) run
  for (int i = 0; i < 5; ++i)
    limited.log(spdlog::level::warn, "a", fmt::format("a says {}", i));
  limited.log(spdlog::level::info, "a", "below the level: never counted");
  limited.log(spdlog::level::warn, "b", "b says 0");
  // Two sources in their interval fill the table: others share one entry.
  limited.log(spdlog::level::warn, "c", "c says 0");
  limited.log(spdlog::level::warn, "d", "d says 0");
  limited.log(spdlog::level::warn, "c", "c says 1");
  CHECK(log.containing("a says").size() == 1);
  CHECK(log.containing("b says 0").size() == 1);
  CHECK(log.containing("c says 0").size() == 1);
  CHECK(log.containing("d says 0").empty());
  CHECK(log.containing("never counted").empty());
  // The counts come once the interval has ended.
  REQUIRE(limited.flush());
  REQUIRE(eventually([&] {
    limited.flush();
    return !log.containing("c says 1").empty();
  }));
  CHECK(log.containing("a says 4 (and 4 more like it from a in the last").size() == 1);
  CHECK_THAT(log.containing("c says 1")[0],
             ContainsSubstring("and 2 more like it from other addresses"));
  CHECK(log.containing("more like it").size() == 2);  // b had nothing left out
  CHECK_FALSE(limited.flush());                       // nothing pending
}
