// Bad clients, absent servers, servers that go away: nothing hangs, nothing
// crashes, and errors say what happened.
#include <future>
#include <random>
#include <thread>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>

#include "protocol.hpp"
#include "support/eventually.hpp"
#include "support/log_capture.hpp"
#include "support/name_resolution.hpp"
#include "support/raw_connection.hpp"
#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using namespace collie::store;
using collie::test::frame_of;
using collie::test::RawConnection;
using collie::test::StoreFixture;

namespace {

// The server still answers a well-behaved client correctly.
void still_serves(const StoreFixture& f) {
  auto c = f.client();
  c->set("alive", "yes");
  CHECK(c->get("alive") == "yes");
  CHECK(c->add("alive-count", 1) >= 1);
}

// Waits until the server has exactly `n` connections open.
bool connections_settle_at(const StoreServer& server, std::size_t n) {
  return collie::test::eventually([&] { return server.connections() == n; }, 10s);
}

}  // namespace

TEST_CASE("random bytes instead of a handshake close only that connection", "[robustness]") {
  StoreFixture f;
  std::mt19937 random(7);
  for (int i = 0; i < 20; ++i) {
    RawConnection raw(f.server.port());
    std::vector<std::uint8_t> junk(64 + static_cast<std::size_t>(i) * 13);
    for (auto& b : junk)
      b = static_cast<std::uint8_t>(random());
    raw.send(junk);
    CHECK(raw.closed_by_peer(5s));
  }
  still_serves(f);
  CHECK(connections_settle_at(f.server, 0));
}

TEST_CASE("an HTTP request is refused as not a collie client", "[robustness]") {
  StoreFixture f;
  RawConnection raw(f.server.port());
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
  raw.send(std::vector<std::uint8_t>(http.begin(), http.end()));
  CHECK(raw.closed_by_peer(5s));
  still_serves(f);
}

TEST_CASE("a client of another protocol version is told the server's version", "[robustness]") {
  StoreFixture f;
  RawConnection raw(f.server.port());
  // Version 2's hello: the base every version shares, and no more.
  wire::ClientHello hello;
  hello.version = 2;
  const auto bytes = wire::encode(hello);
  raw.send(std::span<const std::uint8_t>(bytes.data(), wire::kClientHelloBaseBytes));
  auto reply = raw.read_exactly(wire::kServerHelloBytes, 5s);
  REQUIRE(reply);
  const auto server_hello = wire::decode_server_hello(
      std::span<const std::uint8_t, wire::kServerHelloBytes>(reply->data(), reply->size()));
  CHECK(server_hello.status == wire::HelloStatus::UnsupportedVersion);
  CHECK(server_hello.version == wire::kVersion);
  CHECK(raw.closed_by_peer(5s));
}

TEST_CASE("a connection that never completes the handshake is closed", "[robustness]") {
  auto options = StoreFixture::loopback();
  options.handshake_timeout = 200ms;
  StoreFixture f(options);
  RawConnection silent(f.server.port());
  RawConnection half(f.server.port());
  half.send(std::vector<std::uint8_t>{0x43, 0x4c});  // two bytes of the magic, then nothing
  CHECK(silent.closed_by_peer(5s));
  CHECK(half.closed_by_peer(5s));
  still_serves(f);
}

TEST_CASE("a malformed request gets an error reply, then its connection closes", "[robustness]") {
  StoreFixture f;
  RawConnection raw(f.server.port());
  raw.handshake();
  // Op 99 does not exist; id 1234.
  raw.send(frame_of({99, 0, 0, 0x04, 0xd2}));
  auto reply = raw.read_frame(5s);
  REQUIRE(reply);
  wire::Reader r(*reply);
  CHECK(r.u8() == static_cast<std::uint8_t>(wire::ReplyStatus::Error));
  CHECK(r.u32() == 1234);
  CHECK(r.u16() == static_cast<std::uint16_t>(wire::ErrorCode::Malformed));
  CHECK_THAT(std::string(r.bytes()), ContainsSubstring("unknown operation code 99"));
  CHECK(raw.closed_by_peer(5s));
  still_serves(f);
}

TEST_CASE("a truncated request followed by a disconnect harms nobody", "[robustness]") {
  StoreFixture f;
  auto waiter = f.client();
  auto blocked = std::async(std::launch::async, [&] { return waiter->get("after", 20s); });
  for (int i = 0; i < 10; ++i) {
    RawConnection raw(f.server.port());
    raw.handshake();
    wire::Request request;
    request.op = wire::Op::Set;
    request.id = 1;
    request.keys = {"key"};
    request.values = {"a value that will be cut"};
    auto frame = wire::encode(request);
    frame.resize(frame.size() / 2 + static_cast<std::size_t>(i));
    raw.send(frame);
  }  // each raw connection closes here, mid-request
  CHECK(connections_settle_at(f.server, 1));
  auto writer = f.client();
  writer->set("after", "ok");
  CHECK(blocked.get() == "ok");
  CHECK_FALSE(writer->try_get("key").has_value());
}

TEST_CASE("a request over the message limit is refused and closes its connection", "[robustness]") {
  auto options = StoreFixture::loopback();
  options.limits.max_message_bytes = 64 * 1024;
  options.limits.max_value_bytes = 32 * 1024;
  StoreFixture f(options);
  RawConnection raw(f.server.port());
  const auto hello = raw.handshake();
  CHECK(hello.limits.max_message_bytes == 64 * 1024);
  std::vector<std::uint8_t> header(4);
  wire::put_u32(header.data(), 0x7fffffff);  // announces 2 GiB
  raw.send(header);
  auto reply = raw.read_frame(5s);
  REQUIRE(reply);
  wire::Reader r(*reply);
  CHECK(r.u8() == static_cast<std::uint8_t>(wire::ReplyStatus::Error));
  r.u32();
  CHECK(r.u16() == static_cast<std::uint16_t>(wire::ErrorCode::Malformed));
  CHECK_THAT(std::string(r.bytes()), ContainsSubstring("2147483647 bytes"));
  CHECK(raw.closed_by_peer(5s));
  still_serves(f);
}

TEST_CASE("random frames after a good handshake never bring the server down", "[robustness]") {
  StoreFixture f;
  std::mt19937 random(99);
  for (int i = 0; i < 200; ++i) {
    RawConnection raw(f.server.port());
    raw.handshake();
    std::vector<std::uint8_t> body(static_cast<std::size_t>(random() % 48));
    for (auto& b : body)
      b = static_cast<std::uint8_t>(random());
    if (!body.empty()) body[0] = static_cast<std::uint8_t>(1 + random() % 17);
    raw.send(frame_of(body));
  }
  still_serves(f);
  CHECK(connections_settle_at(f.server, 0));
}

TEST_CASE("a client that sends without reading cannot make the server hoard memory",
          "[robustness]") {
  StoreFixture f;
  auto setter = f.client();
  setter->set("big", std::string(1 << 20, 'b'));
  RawConnection greedy(f.server.port());
  greedy.handshake();
  // 200 gets of a 1 MiB value, never read: the server stops reading from
  // this client once a few MiB of replies are queued.
  wire::Request get;
  get.op = wire::Op::Get;
  get.keys = {"big"};
  std::vector<std::uint8_t> burst;
  for (std::uint32_t id = 1; id <= 200; ++id) {
    get.id = id;
    const auto frame = wire::encode(get);
    burst.insert(burst.end(), frame.begin(), frame.end());
  }
  greedy.send(burst);  // a few KiB: the kernel takes it all at once
  // The server is answering: its replies fill the sockets, and the rest
  // wait in its queue.
  REQUIRE(collie::test::eventually([&] { return greedy.unread() > 0; }));
  still_serves(f);
  // Reading now drains the queue: every reply arrives, in order.
  for (std::uint32_t id = 1; id <= 200; ++id) {
    auto reply = greedy.read_frame(10s);
    REQUIRE(reply);
    wire::Reader r(*reply);
    CHECK(r.u8() == 0);
    CHECK(r.u32() == id);
    CHECK(r.bytes().size() == (1u << 20));
  }
}

TEST_CASE("stopping the server fails blocked clients at once, without a hang", "[robustness]") {
  auto f = std::make_unique<StoreFixture>();
  auto waiter = f->client();
  auto barrier_client = f->client();
  auto get_call = std::async(std::launch::async, [&] { waiter->get("never", 60s); });
  auto barrier_call = std::async(std::launch::async, [&] { barrier_client->barrier("b", 5, 60s); });
  REQUIRE(f->blocked(2));
  const auto start = std::chrono::steady_clock::now();
  f->server.stop();
  try {
    get_call.get();
    FAIL("get returned although the server stopped");
  } catch (const collie::ConnectionError& e) {
    CHECK_THAT(e.what(),
               ContainsSubstring("closed the connection") && ContainsSubstring("get('never')"));
  }
  CHECK_THROWS_AS(barrier_call.get(), collie::ConnectionError);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // Later calls fail at once too.
  CHECK_THROWS_AS(waiter->set("k", "v"), collie::ConnectionError);
}

TEST_CASE("a client started before its server connects once the server is up", "[robustness]") {
  // The only test that needs the port before the server exists.
  const auto port = collie::test::momentarily_free_port();
  // The server starts once the client has tried and been refused.
  collie::test::LogCapture log(spdlog::level::debug);
  const auto refused = fmt::format("connecting to 127.0.0.1:{} failed", port);
  auto starter = std::async(std::launch::async, [&log, port, refused] {
    collie::test::eventually([&] { return !log.containing(refused).empty(); });
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = port;
    return std::make_unique<StoreServer>(options);
  });
  ClientOptions options;
  options.connect_timeout = 30s;
  StoreClient client("127.0.0.1", port, options);
  const auto server = starter.get();
  client.set("k", "v");
  CHECK(client.get("k") == "v");
}

TEST_CASE("connecting to nothing fails after the connect timeout, naming the address",
          "[robustness]") {
  const collie::test::RefusingPort nobody;
  const auto port = nobody.port();
  ClientOptions options;
  options.connect_timeout = 400ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    StoreClient client("127.0.0.1", port, options);
    FAIL("connected to a port with no server");
  } catch (const collie::ConnectionError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, ContainsSubstring(fmt::format("127.0.0.1:{}", port)));
    CHECK_THAT(message, ContainsSubstring("attempts"));
    CHECK_THAT(message, ContainsSubstring("refused"));
  }
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 350ms);
  CHECK(took < 5s);
}

TEST_CASE("a host that does not resolve is reported as such", "[robustness]") {
  ClientOptions options;
  options.connect_timeout = 200ms;
  CHECK_THROWS_WITH(StoreClient("no-such-host.invalid", 1, options),
                    ContainsSubstring("cannot resolve 'no-such-host.invalid'"));
}

TEST_CASE("a server that accepts but never answers times the handshake out", "[robustness]") {
  asio::io_context io;
  asio::ip::tcp::acceptor mute(io, {asio::ip::address_v4::loopback(), 0});
  ClientOptions options;
  options.connect_timeout = 300ms;
  CHECK_THROWS_AS(StoreClient("127.0.0.1", mute.local_endpoint().port(), options),
                  collie::TimeoutError);
}

TEST_CASE("listening on a port in use fails with the address in the message", "[robustness]") {
  StoreFixture f;
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = f.server.port();
  CHECK_THROWS_WITH(StoreServer(options),
                    ContainsSubstring(fmt::format("cannot listen on 127.0.0.1:{}", f.server.port())));
  options.host = "no-such-host.invalid";
  options.port = 0;
  CHECK_THROWS_WITH(StoreServer(options), ContainsSubstring("does not resolve"));
}

TEST_CASE("the default server listens on IPv4 and, where present, IPv6", "[robustness]") {
  StoreServer server;  // every interface
  REQUIRE(server.port() != 0);
  StoreClient v4("127.0.0.1", server.port());
  v4.set("from", "v4");
  if (!collie::test::ipv6_loopback_available()) {
    WARN("IPv6 is not available here: only IPv4 was checked");
    return;
  }
  CHECK_THAT(server.addresses().front(), StartsWith("[::]"));
  StoreClient v6("::1", server.port());
  CHECK(v6.get("from") == "v4");
  ServerOptions options;
  options.host = "::1";
  StoreServer v6_only(options);
  StoreClient c("::1", v6_only.port());
  c.set("k", "v");
  CHECK(c.address() == fmt::format("[::1]:{}", v6_only.port()));
}

TEST_CASE("a server on 'localhost' listens on every address of that name, one port",
          "[robustness]") {
  if (!collie::test::resolves("localhost")) {
    WARN("'localhost' does not resolve on this machine (no /etc/hosts): not checked");
    return;
  }
  ServerOptions options;
  options.host = "localhost";
  StoreServer server(options);
  for (const auto& address : server.addresses()) {
    CHECK_THAT(address, EndsWith(fmt::format(":{}", server.port())));
  }
  StoreClient c("localhost", server.port());
  c.set("k", "v");
  CHECK(c.get("k") == "v");
}
