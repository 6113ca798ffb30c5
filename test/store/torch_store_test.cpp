// torch's TCPStore dialect (store/src/torch_dialect.hpp): the parser byte by
// byte, and the server answering torch's clients in both dialects, on the
// same keys as collie's clients, refusing what it should. The real torch
// 1.13 client is exercised in test/tools/cli_torch_store_test.cpp.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include "support/catch.hpp"

#include "support/eventually.hpp"
#include "support/raw_connection.hpp"
#include "support/store_fixture.hpp"
#include "support/torch_query.hpp"
#include "peer_user.hpp"
#include "torch_dialect.hpp"

using namespace std::chrono_literals;
namespace torch = collie::store::torch;
using Bytes = std::vector<std::uint8_t>;

namespace {

using collie::test::le64;
using Q = collie::test::TorchQuery;
namespace v1 = collie::test::v1;
namespace v2 = collie::test::v2;

// A raw torch client of a server started with torch_clients.
struct TorchClient {
  explicit TorchClient(std::uint16_t port) : raw(port) {}
  void send(const Q& q) { raw.send(q.b); }
  Bytes read(std::size_t n) {
    auto got = raw.read_exactly(n, 10s);
    REQUIRE(got);
    return *got;
  }
  std::string value() {
    const auto n = static_cast<std::size_t>(le64(read(8)));
    const auto b = n == 0 ? Bytes{} : read(n);
    return std::string(b.begin(), b.end());
  }
  std::int64_t i64() { return le64(read(8)); }
  std::uint8_t u8() { return read(1)[0]; }
  collie::test::RawConnection raw;
};

collie::store::ServerOptions with_torch() {
  auto o = collie::test::StoreFixture::loopback();
  o.torch_clients = true;
  return o;
}

}  // namespace

TEST_CASE("torch dialect: a connection's first bytes tell collie, torch 1.x and torch 2.x apart",
          "[store][torch]") {
  CHECK(torch::classify(Bytes{}) == torch::Opening::NeedMore);
  CHECK(torch::classify(Bytes{'C', 'L', 'S', 'T'}) == torch::Opening::Collie);
  CHECK(torch::classify(Bytes{3}) == torch::Opening::TorchV1);  // ADD
  CHECK(torch::classify(Bytes{0, 0xCE}) == torch::Opening::NeedMore);
  CHECK(torch::classify(Bytes{0, 0xCE, 0xF7, 0x85, 0x3C}) == torch::Opening::TorchV2);
  CHECK(torch::classify(Q(v1::SET).str("/k").b) == torch::Opening::TorchV1);
  CHECK(torch::classify(Bytes{9}) == torch::Opening::Stranger);
  CHECK(torch::classify(Bytes{0x16, 0x03, 0x01}) == torch::Opening::Stranger);  // TLS
}

TEST_CASE("torch dialect: every query parses whole, and any prefix of it asks for more",
          "[store][torch]") {
  const collie::store::StoreLimits limits;
  struct Case {
    torch::Dialect dialect;
    Bytes bytes;
    torch::Command command;
    std::vector<std::string> keys, values;
    std::int64_t number = 0;
    std::uint32_t word = 0;
  };
  const std::vector<Case> cases = {
      {torch::Dialect::V1, Q(v1::SET).str("/a").str("xyz").b, torch::Command::Set, {"/a"}, {"xyz"}},
      {torch::Dialect::V1, Q(v1::COMPARE_SET).str("/c").str("").str("new").b,
       torch::Command::CompareSet, {"/c"}, {"", "new"}},
      {torch::Dialect::V1, Q(v1::GET).str("/a").b, torch::Command::Get, {"/a"}, {}},
      {torch::Dialect::V1, Q(v1::ADD).str("/n").u64(static_cast<std::uint64_t>(-7)).b,
       torch::Command::Add, {"/n"}, {}, -7},
      {torch::Dialect::V1, Q(v1::CHECK).u64(2).str("/a").str("/b").b, torch::Command::Check,
       {"/a", "/b"}, {}},
      {torch::Dialect::V1, Q(v1::WAIT).u64(1).str("/a").b, torch::Command::Wait, {"/a"}, {}},
      {torch::Dialect::V1, Q(v1::GETNUMKEYS).b, torch::Command::NumKeys, {}, {}},
      {torch::Dialect::V1, Q(v1::WATCH_KEY).str("/w").b, torch::Command::WatchKey, {"/w"}, {}},
      {torch::Dialect::V1, Q(v1::DELETE_KEY).str("/a").b, torch::Command::Delete, {"/a"}, {}},
      {torch::Dialect::V2, Q(v2::VALIDATE).u32(torch::kValidateMagic).b, torch::Command::Validate,
       {}, {}, 0, torch::kValidateMagic},
      {torch::Dialect::V2, Q(v2::SET).str("/a").str("").b, torch::Command::Set, {"/a"}, {""}},
      {torch::Dialect::V2, Q(v2::APPEND).str("/l").str("+1").b, torch::Command::Append, {"/l"},
       {"+1"}},
      {torch::Dialect::V2, Q(v2::MULTI_GET).u64(2).str("/a").str("/l").b, torch::Command::MultiGet,
       {"/a", "/l"}, {}},
      {torch::Dialect::V2, Q(v2::MULTI_SET).u64(2).str("/x").str("1").str("/y").str("2").b,
       torch::Command::MultiSet, {"/x", "/y"}, {"1", "2"}},
      {torch::Dialect::V2, Q(v2::CANCEL_WAIT).b, torch::Command::CancelWait, {}, {}},
      {torch::Dialect::V2, Q(v2::PING).u32(0xdeadbeef).b, torch::Command::Ping, {}, {}, 0,
       0xdeadbeef},
  };
  for (const auto& c : cases) {
    INFO(torch::command_name(c.command));
    // A second query right behind it: the parser takes only its own bytes.
    Bytes two = c.bytes;
    two.push_back(0x7);
    torch::Query q;
    const auto p = torch::parse(c.dialect, two, limits, q);
    REQUIRE(p.result == torch::Parse::Done);
    CHECK(p.used == c.bytes.size());
    CHECK(q.command == c.command);
    CHECK(q.keys == c.keys);
    CHECK(q.values == c.values);
    CHECK(q.number == c.number);
    CHECK(q.word == c.word);
    for (std::size_t cut = 0; cut < c.bytes.size(); ++cut) {
      torch::Query partial;
      const auto pp = torch::parse(c.dialect,
                                   std::span<const std::uint8_t>(c.bytes.data(), cut), limits,
                                   partial);
      INFO("first " << cut << " bytes");
      CHECK(pp.result == torch::Parse::NeedMore);
    }
  }
}

TEST_CASE("torch dialect: lengths over the limits are refused before their bytes arrive",
          "[store][torch]") {
  collie::store::StoreLimits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 100;
  limits.max_keys_per_request = 3;
  torch::Query q;
  auto p = torch::parse(torch::Dialect::V1, Q(v1::GET).u64(17).b, limits, q);
  CHECK(p.result == torch::Parse::TooLarge);
  CHECK_THAT(p.error, ContainsSubstring("key of 17 bytes"));
  p = torch::parse(torch::Dialect::V1, Q(v1::SET).str("/k").u64(std::uint64_t{1} << 62).b,
                   limits, q);
  CHECK(p.result == torch::Parse::TooLarge);
  p = torch::parse(torch::Dialect::V1, Q(v1::WAIT).u64(4).b, limits, q);
  CHECK(p.result == torch::Parse::TooLarge);
  CHECK_THAT(p.error, ContainsSubstring("4 keys"));
  p = torch::parse(torch::Dialect::V1, Bytes{9}, limits, q);
  CHECK(p.result == torch::Parse::Malformed);
  CHECK_THAT(p.error, ContainsSubstring("unknown torch TCPStore query type 9"));
  p = torch::parse(torch::Dialect::V2, Bytes{14}, limits, q);
  CHECK(p.result == torch::Parse::Malformed);
}

TEST_CASE("torch store: torch 1.x queries on the keys collie's clients see", "[store][torch]") {
  collie::test::StoreFixture f(with_torch());
  auto collie_client = f.client();
  TorchClient t(f.server.port());
  t.send(Q(v1::SET).str("/a").str("hello"));
  t.send(Q(v1::GET).str("/a"));
  CHECK(t.value() == "hello");
  CHECK(collie_client->get("/a") == "hello");  // the same key
  t.send(Q(v1::ADD).str("/n").u64(5));
  CHECK(t.i64() == 5);
  collie_client->add("/n", 10);
  t.send(Q(v1::ADD).str("/n").u64(static_cast<std::uint64_t>(-1)));
  CHECK(t.i64() == 14);
  // compare_set: as torch's own server answers.
  t.send(Q(v1::COMPARE_SET).str("/c").str("").str("first"));
  CHECK(t.value() == "first");
  t.send(Q(v1::COMPARE_SET).str("/c").str("wrong").str("x"));
  CHECK(t.value() == "first");
  t.send(Q(v1::COMPARE_SET).str("/c").str("first").str("second"));
  CHECK(t.value() == "second");
  t.send(Q(v1::COMPARE_SET).str("/missing").str("expected").str("x"));
  CHECK(t.value() == "expected");
  CHECK_FALSE(collie_client->try_get("/missing").has_value());
  t.send(Q(v1::CHECK).u64(2).str("/a").str("/n"));
  CHECK(t.u8() == torch::kCheckReady);
  t.send(Q(v1::CHECK).u64(2).str("/a").str("/later"));
  CHECK(t.u8() == torch::kCheckNotReady);
  // A wait blocks until a collie client sets the key.
  t.send(Q(v1::WAIT).u64(2).str("/a").str("/later"));
  CHECK_FALSE(t.raw.read_exactly(1, 200ms).has_value());
  collie_client->set("/later", "now");
  CHECK(t.u8() == torch::kStopWaiting);
  t.send(Q(v1::GETNUMKEYS));
  CHECK(t.i64() == 4);  // /a /n /c /later
  t.send(Q(v1::DELETE_KEY).str("/a"));
  CHECK(t.i64() == 1);
  t.send(Q(v1::DELETE_KEY).str("/a"));
  CHECK(t.i64() == 0);
  // A get of a missing key waits for it, as torch's client expects.
  t.send(Q(v1::GET).str("/b"));
  collie_client->set("/b", std::string("\0\1\2", 3));
  CHECK(t.value() == std::string("\0\1\2", 3));
}

TEST_CASE("torch store: torch 2.x validates, pings, appends, sets and gets many, cancels a wait",
          "[store][torch]") {
  collie::test::StoreFixture f(with_torch());
  auto collie_client = f.client();
  TorchClient t(f.server.port());
  t.send(Q(v2::VALIDATE).u32(torch::kValidateMagic));
  t.send(Q(v2::PING).u32(0x1234abcd));
  const auto pong = t.read(4);
  CHECK(pong == Bytes{0xcd, 0xab, 0x34, 0x12});
  t.send(Q(v2::SET).str("/s").str("v"));
  t.send(Q(v2::APPEND).str("/s").str("w"));
  t.send(Q(v2::APPEND).str("/new").str("x"));
  t.send(Q(v2::MULTI_SET).u64(2).str("/m1").str("one").str("/m2").str("two"));
  t.send(Q(v2::MULTI_GET).u64(4).str("/s").str("/new").str("/m1").str("/m2"));
  CHECK(t.value() == "vw");
  CHECK(t.value() == "x");
  CHECK(t.value() == "one");
  CHECK(t.value() == "two");
  CHECK(collie_client->get("/m2") == "two");
  t.send(Q(v2::GET).str("/s"));
  CHECK(t.value() == "vw");
  // A wait, then its cancellation: only WAIT_CANCELED comes back, and the
  // connection goes on.
  t.send(Q(v2::WAIT).u64(1).str("/never"));
  CHECK_FALSE(t.raw.read_exactly(1, 200ms).has_value());
  t.send(Q(v2::CANCEL_WAIT));
  CHECK(t.u8() == torch::kWaitCanceled);
  collie_client->set("/never", "now");
  t.send(Q(v2::PING).u32(7));
  CHECK(t.read(4) == Bytes{7, 0, 0, 0});
}

TEST_CASE("torch store: garbage, oversized and unsupported queries close their connection only",
          "[store][torch]") {
  auto options = with_torch();
  options.limits.max_key_bytes = 64;
  collie::test::StoreFixture f(options);
  auto collie_client = f.client();
  TorchClient good(f.server.port());
  good.send(Q(v1::SET).str("/k").str("v"));
  {
    collie::test::RawConnection bad(f.server.port());
    bad.send(Bytes{0x99, 1, 2, 3});
    CHECK(bad.closed_by_peer(10s));
  }
  {
    TorchClient bad(f.server.port());
    bad.send(Q(v1::GET).u64(65));  // a key over the limit: refused before it arrives
    CHECK(bad.raw.closed_by_peer(10s));
  }
  {
    TorchClient bad(f.server.port());
    bad.send(Q(v1::WATCH_KEY).str("/k"));
    CHECK(bad.raw.closed_by_peer(10s));
  }
  {
    TorchClient bad(f.server.port());
    bad.send(Q(v1::SET).str("/text").str("not a number"));
    bad.send(Q(v1::ADD).str("/text").u64(1));
    CHECK(bad.raw.closed_by_peer(10s));
  }
  {
    TorchClient bad(f.server.port());
    bad.send(Q(v2::VALIDATE).u32(torch::kValidateMagic));
    bad.send(Q(v2::VALIDATE).u32(1));  // a second, wrong magic
    CHECK(bad.raw.closed_by_peer(10s));
  }
  // Everyone else is served on.
  good.send(Q(v1::GET).str("/k"));
  CHECK(good.value() == "v");
  CHECK(collie_client->get("/k") == "v");
}

TEST_CASE("torch store: a query larger than the memory left is refused as it comes",
          "[store][torch]") {
  auto options = with_torch();
  options.limits.max_value_bytes = 8u << 20;
  options.max_memory_bytes = 2u << 20;
  collie::test::StoreFixture f(options);
  auto collie_client = f.client();
  collie::test::RawConnection bad(f.server.port());
  bad.send(Q(v1::SET).str("/big").u64(6u << 20).b);  // within the value limit
  const Bytes chunk(256 * 1024, 0x5a);
  bool closed = false;
  std::size_t most = 0;  // the memory the server counted, at its highest seen
  for (int i = 0; i < 24 && !closed; ++i) {
    try {
      bad.send(chunk);
    } catch (const std::exception&) {
      closed = true;  // the server closed it mid-way
    }
    for (int look = 0; look < 5; ++look) {
      most = std::max(most, f.server.stats().memory_bytes);
      std::this_thread::sleep_for(2ms);  // a sample of the server's state, not a wait for it
    }
  }
  CHECK((closed || bad.closed_by_peer(10s)));
  // Never more than the budget and one read's worth over it.
  CHECK(most <= options.max_memory_bytes + 128 * 1024);
  // The memory came back: others are served.
  collie_client->set("/after", "ok");
  CHECK(collie_client->get("/after") == "ok");
  TorchClient t(f.server.port());
  t.send(Q(v1::GET).str("/after"));
  CHECK(t.value() == "ok");
}

TEST_CASE("torch store: part of a query, then silence, is closed after the handshake timeout",
          "[store][torch]") {
  auto options = with_torch();
  options.handshake_timeout = 300ms;
  collie::test::StoreFixture f(options);
  collie::test::RawConnection stalled(f.server.port());
  Bytes part = Q(v1::SET).u64(10).b;  // a key of 10 bytes, 3 of them sent
  part.insert(part.end(), {'/', 'a', 'b'});
  stalled.send(part);
  CHECK(stalled.closed_by_peer(10s));
  // A torch client that waits (no query under way) is not closed.
  TorchClient waiting(f.server.port());
  waiting.send(Q(v1::WAIT).u64(1).str("/later"));
  CHECK_FALSE(waiting.raw.read_exactly(1, 1s).has_value());
  f.client()->set("/later", "x");
  CHECK(waiting.u8() == torch::kStopWaiting);
}

TEST_CASE("torch store: silent connections are kept while they may be a torch client's",
          "[store][torch]") {
  // torch 1.x opens a second connection per client and sends nothing on
  // it; closed, torch 1.13's store thread spins on it in every rank. A bare
  // TCPStore's first connection is as silent until its program's first
  // query, which may come after the handshake time.
  auto options = with_torch();
  options.handshake_timeout = 300ms;
  options.idle_timeout = 500ms;
  collie::test::StoreFixture f(options);
  const auto port = f.server.port();
  using collie::test::eventually;
  using collie::test::RawConnection;
  // A torch client that has sent nothing yet on either of its connections,
  // past the handshake time: both are kept; a third from its address is
  // closed.
  auto first = std::make_unique<TorchClient>(port);
  RawConnection callback(port);
  RawConnection stranger(port);
  CHECK(stranger.closed_by_peer(10s));
  REQUIRE(eventually([&] { return f.server.connections() == 2; }));
  // The first speaks at last: a torch client now.
  first->send(Q(v1::SET).str("/a").str("x"));
  first->send(Q(v1::GET).str("/a"));
  REQUIRE(first->value() == "x");
  // One silent connection per torch client, and two more: a fourth is
  // closed. Another address counts its own.
  auto more = std::make_unique<RawConnection>(port);
  auto more2 = std::make_unique<RawConnection>(port);
  auto elsewhere = std::make_unique<RawConnection>(port, "127.0.0.1", "127.0.0.2");
  RawConnection too_many(port);
  CHECK(too_many.closed_by_peer(10s));
  CHECK_FALSE(more->closed_by_peer(200ms));
  CHECK_FALSE(more2->closed_by_peer(10ms));
  CHECK_FALSE(elsewhere->closed_by_peer(10ms));
  CHECK_FALSE(callback.closed_by_peer(10ms));
  // Past the idle timeout too (a collie client idle as long is closed).
  RawConnection idle(port);
  idle.handshake();
  CHECK(idle.closed_by_peer(10s));
  CHECK_FALSE(callback.closed_by_peer(200ms));
  more.reset();
  more2.reset();
  elsewhere.reset();
  REQUIRE(eventually([&] { return f.server.connections() == 2; }));
  // A second client and its callback; the first client leaves without its
  // callback connection: the newest one goes after the grace period.
  auto second = std::make_unique<TorchClient>(port);
  second->send(Q(v1::GET).str("/a"));
  REQUIRE(second->value() == "x");
  RawConnection callback2(port);
  auto spare = std::make_unique<RawConnection>(port);
  auto spare2 = std::make_unique<RawConnection>(port);
  RawConnection over(port);
  CHECK(over.closed_by_peer(10s));  // so callback2 and the spares were kept before it
  spare.reset();
  spare2.reset();
  REQUIRE(eventually([&] { return f.server.connections() == 4; }));
  first.reset();
  CHECK(callback2.closed_by_peer(10s));
  CHECK_FALSE(callback.closed_by_peer(200ms));
  // The last client leaves: so does the callback connection left.
  second.reset();
  CHECK(callback.closed_by_peer(10s));
  // A kept connection that speaks at last has the handshake time again:
  // collie's first byte and no more is closed.
  RawConnection late(port);
  RawConnection late2(port);
  RawConnection late3(port);
  CHECK(late3.closed_by_peer(10s));  // so late and late2 were kept before it
  late.send(Bytes{static_cast<std::uint8_t>(collie::store::wire::kMagic >> 24)});
  CHECK(late.closed_by_peer(10s));
  CHECK_FALSE(late2.closed_by_peer(10ms));
  REQUIRE(eventually([&] { return f.server.connections() == 1; }));
}

TEST_CASE("torch store: without torch_clients a torch client is refused", "[store][torch]") {
  collie::test::StoreFixture f;  // the default: collie's clients only
  TorchClient t(f.server.port());
  // Both queries in one write: the server refuses at the first bytes it
  // reads, and a second write could meet that reset (ECONNRESET) instead.
  Bytes both = Q(v1::SET).str("/a").str("x").b;
  const Bytes get = Q(v1::GET).str("/a").b;
  both.insert(both.end(), get.begin(), get.end());
  t.raw.send(both);
  CHECK(t.raw.closed_by_peer(20s));
  auto c = f.client();
  CHECK_FALSE(c->try_get("/a").has_value());
}

TEST_CASE("peer_user: the owner of the other end of a loopback connection", "[torch][store]") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket client(io), served(io);
  client.connect(acceptor.local_endpoint());
  acceptor.accept(served);
  const auto uid = collie::store::peer_user(served.local_endpoint(), served.remote_endpoint());
  REQUIRE(uid.has_value());
  CHECK(*uid == ::geteuid());
  // The other way round is the server's own socket: also this user.
  CHECK(collie::store::peer_user(client.local_endpoint(), client.remote_endpoint()) == uid);
}

TEST_CASE("peer_user_in reads the kernel's tables, v4 and v4-mapped v6", "[torch][store]") {
  const std::string header =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n";
  // 127.0.0.1:40000 (0x9C40) connected to 127.0.0.1:29500 (0x733C), uid 1234.
  const std::string v4 = header +
                         "   0: 0100007F:733C 0100007F:9C40 01 00000000:00000000 00:00000000 "
                         "00000000     0        0 1 1 0 20 4 30 10 -1\n"
                         "   1: 0100007F:9C40 0100007F:733C 01 00000000:00000000 00:00000000 "
                         "00000000  1234        0 2 1 0 20 4 30 10 -1\n";
  const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"), 29500);
  const asio::ip::tcp::endpoint client(asio::ip::make_address("127.0.0.1"), 40000);
  CHECK(collie::store::peer_user_in(v4, header, server, client) == 1234u);
  CHECK(collie::store::peer_user_in(v4, header, client, server) == 0u);
  CHECK_FALSE(collie::store::peer_user_in(header, header, server, client).has_value());
  // A dual-stack server sees ::ffff:127.0.0.1; a v6 client socket is in tcp6.
  const std::string v6 = header +
                         "   0: 0000000000000000FFFF00000100007F:9C40 "
                         "0000000000000000FFFF00000100007F:733C 01 00000000:00000000 "
                         "00:00000000 00000000  4321        0 3 1 0 20 4 30 10 -1\n";
  const asio::ip::tcp::endpoint mapped_server(asio::ip::make_address("::ffff:127.0.0.1"), 29500);
  const asio::ip::tcp::endpoint mapped_client(asio::ip::make_address("::ffff:127.0.0.1"), 40000);
  CHECK(collie::store::peer_user_in(header, v6, mapped_server, mapped_client) == 4321u);
}
