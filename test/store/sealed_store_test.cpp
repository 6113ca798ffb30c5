// The store's connections sealed (docs/security.md, "The sealed wire"): a
// store that seals (ServerOptions::seal On, as Auto does for a client on
// another host) and a client through a man in the middle (support/relay.hpp)
// that records what crosses (none of a key or value) or changes the
// client's bytes once sealed (the client fails with a ProtocolError that
// names the store and what was wrong; the store serves everyone else);
// settings that cannot agree are refused with both named; a wrong token
// still gets nothing but a refusal.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/seal.hpp>

#include "protocol.hpp"
#include "support/relay.hpp"
#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using collie::test::Change;
using collie::test::Relay;
using collie::test::StoreFixture;

namespace {

const std::string kToken = "sealed-store-test-token";

collie::store::ServerOptions sealing_store(collie::seal::Mode mode = collie::seal::Mode::On) {
  auto o = StoreFixture::loopback();
  o.token = kToken;
  o.seal = mode;
  return o;
}

collie::store::ClientOptions client_options(collie::seal::Mode mode = collie::seal::Mode::Auto,
                                            const std::string& token = kToken) {
  collie::store::ClientOptions o;
  o.token = token;
  o.seal = mode;
  o.timeout = 20s;
  o.connect_timeout = 10s;
  return o;
}

// A value whose every 48 bytes are told apart from any other's (a period
// of 251, shifted by `seed`).
std::string value_of(std::size_t n, unsigned seed) {
  std::string v(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<char>((i * 131 + seed * 17) % 251);
  return v;
}

bool holds(const std::vector<std::uint8_t>& haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

// The client's bytes before its first sealed one: its hello and its proof.
constexpr std::size_t kPastHandshake =
    collie::store::wire::kClientHelloBytes + collie::store::wire::kProofBytes;

}  // namespace

TEST_CASE("sealed store: values of every size cross intact, and the wire holds none of them",
          "[store][seal]") {
  StoreFixture f(sealing_store());
  Relay relay(f.server.port(), Change::None);
  collie::store::StoreClient client("127.0.0.1", relay.port(), client_options());
  const std::vector<std::size_t> sizes = {1, 100, 65536 + 7, (1 << 20) + 3};
  for (unsigned i = 0; i < sizes.size(); ++i)
    client.set(fmt::format("the-sealed-key-{}", i), value_of(sizes[i], i));
  for (unsigned i = 0; i < sizes.size(); ++i)
    CHECK(client.get(fmt::format("the-sealed-key-{}", i)) == value_of(sizes[i], i));
  // Another client, on the store's own port, reads the same values.
  CHECK(f.client(client_options())->get("the-sealed-key-3") == value_of(sizes[3], 3));
  const auto wire = relay.captured();
  CHECK(wire.size() > (2u << 20));  // both ways went through the relay
  CHECK_FALSE(holds(wire, "the-sealed-key-"));
  for (unsigned i = 1; i < sizes.size(); ++i)
    CHECK_FALSE(holds(wire, value_of(48, i)));
  CHECK_FALSE(holds(wire, kToken));
}

TEST_CASE("sealed store: a changed byte stream fails the client by name, never a wrong value",
          "[store][seal]") {
  const auto change = GENERATE(Change::Flip, Change::Drop, Change::Duplicate, Change::Reorder);
  INFO("change " << static_cast<int>(change));
  StoreFixture f(sealing_store());
  f.client(client_options())->set("k", "the right value");
  Relay relay(f.server.port(), change, kPastHandshake);
  collie::store::StoreClient client("127.0.0.1", relay.port(), client_options());
  std::string error;
  try {
    // Requests of a few hundred bytes each: the change lands in one.
    for (int i = 0; i < 20; ++i) {
      client.set(fmt::format("k{}", i), value_of(300, static_cast<unsigned>(i)));
      CHECK(client.get("k") == "the right value");
    }
  } catch (const collie::ProtocolError& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("127.0.0.1") &&
                        ContainsSubstring("sealed stream broke on its way to the store") &&
                        (ContainsSubstring("fails its authentication") ||
                         ContainsSubstring("says it holds")));
  // Nothing the changed request carried was stored, and the store serves on.
  auto other = f.client(client_options());
  CHECK(other->get("k") == "the right value");
  for (int i = 0; i < 20; ++i) {
    const auto key = fmt::format("k{}", i);
    if (other->check({key})) CHECK(other->get(key) == value_of(300, static_cast<unsigned>(i)));
  }
}


TEST_CASE("sealed store: a client still sending when the store closes names the store's reason",
          "[store][seal]") {
  // A changed record early in a value of several MiB: the store closes
  // while the client still writes the rest, and the client gets the
  // store's reason and a reset together (the relay holds the rest of the
  // client's bytes unread), so its send fails as its read finds the
  // reason. The store said why, and that is what the client reports.
  StoreFixture f(sealing_store());
  Relay relay(f.server.port(), Change::FlipThenHold, kPastHandshake);
  collie::store::StoreClient client("127.0.0.1", relay.port(), client_options());
  const auto value = value_of(24 << 20, 3);
  std::string error;
  try {
    client.set("big", value);
  } catch (const collie::ProtocolError& e) {
    error = e.what();
  } catch (const collie::Error& e) {
    error = std::string("not a ProtocolError: ") + e.what();
  }
  CHECK_THAT(error, ContainsSubstring("127.0.0.1") &&
                        ContainsSubstring("sealed stream broke on its way to the store"));
  CHECK_FALSE(f.client(client_options())->check({"big"}));
}
TEST_CASE("sealed store: settings that cannot agree are refused, both named", "[store][seal]") {
  SECTION("a store that seals, a client that is off") {
    StoreFixture f(sealing_store(collie::seal::Mode::On));
    try {
      f.client(client_options(collie::seal::Mode::Off));
      FAIL("connected");
    } catch (const collie::AuthenticationError& e) {
      CHECK_THAT(e.what(), ContainsSubstring("COLLIE_SEAL=on") &&
                               ContainsSubstring("COLLIE_SEAL=off") &&
                               ContainsSubstring("set COLLIE_SEAL alike"));
    }
  }
  SECTION("a client that seals, a store that is off") {
    StoreFixture f(sealing_store(collie::seal::Mode::Off));
    CHECK_THROWS_AS(f.client(client_options(collie::seal::Mode::On)), collie::AuthenticationError);
  }
  SECTION("both off, or both auto on one host: clear, and served") {
    StoreFixture f(sealing_store(collie::seal::Mode::Off));
    f.client(client_options(collie::seal::Mode::Off))->set("a", "b");
    StoreFixture g(sealing_store(collie::seal::Mode::Auto));
    Relay relay(g.server.port(), Change::None);
    collie::store::StoreClient clear("127.0.0.1", relay.port(), client_options());
    clear.set("plain-key", "plain-value");
    CHECK(holds(relay.captured(), "plain-value"));  // loopback stays clear under auto
  }
}

TEST_CASE("sealed store: a wrong token or none still gets nothing but a refusal",
          "[store][seal]") {
  StoreFixture f(sealing_store());
  f.client(client_options())->set("secret-key", "secret-value");
  Relay relay(f.server.port(), Change::None);
  CHECK_THROWS_AS(collie::store::StoreClient("127.0.0.1", relay.port(),
                                             client_options(collie::seal::Mode::On, "wrong")),
                  collie::AuthenticationError);
  CHECK_FALSE(holds(relay.captured(), "secret-value"));
  CHECK_THROWS_AS(f.client(client_options(collie::seal::Mode::Auto, "")),
                  collie::AuthenticationError);
}

TEST_CASE("sealed store: a client that stops in the middle of a record is closed, not waited for",
          "[store][seal]") {
  // The store's watch on a request under way covers a sealed record under
  // way: the client is told at the handshake timeout, not at its own.
  auto options = sealing_store();
  options.handshake_timeout = 300ms;
  StoreFixture f(options);
  Relay relay(f.server.port(), Change::Stall, kPastHandshake);
  auto slow = client_options();
  slow.timeout = 60s;
  collie::store::StoreClient client("127.0.0.1", relay.port(), slow);
  CHECK_THROWS_AS(client.set("k", value_of(1000, 1)), collie::ConnectionError);
  CHECK_FALSE(f.client(client_options())->check({"k"}));
}

TEST_CASE("sealed store: what a sealed connection holds is counted, and given back when idle",
          "[store][seal]") {
  StoreFixture f(sealing_store());
  const auto before = f.server.stats().memory_bytes;
  std::vector<std::unique_ptr<collie::store::StoreClient>> clients;
  for (unsigned i = 0; i < 8; ++i) {
    clients.push_back(f.client(client_options(collie::seal::Mode::On)));
    // Several records and batches each way.
    clients.back()->set(fmt::format("k{}", i), value_of((600 << 10) + i, i));
    CHECK(clients.back()->get(fmt::format("k{}", i)) == value_of((600 << 10) + i, i));
  }
  for (unsigned i = 0; i < 8; ++i)
    CHECK(clients[i]->delete_key(fmt::format("k{}", i)));
  // Every value gone, eight sealed connections open and idle: the budget
  // is where it was (their buffers, counted while they held bytes, are
  // given back; the store's bookkeeping holds nothing more for them).
  CHECK(f.server.stats().connections == 8);
  CHECK(f.server.stats().memory_bytes == before);
}
