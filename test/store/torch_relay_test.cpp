// store::TorchRelay: torch's clients on loopback carried to a store that
// wants the job's token, over a tunnel that proved it (op 17), and
// collie's clients passed through, proving it themselves.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/store/client.hpp>
#include <collie/store/torch_relay.hpp>

#include "support/eventually.hpp"
#include "support/log_capture.hpp"
#include "support/raw_connection.hpp"
#include "support/store_fixture.hpp"
#include "support/torch_query.hpp"
#include "torch_dialect.hpp"

using namespace std::chrono_literals;

namespace {

using Bytes = std::vector<std::uint8_t>;

// torch 1.x's queries: a type, strings with their lengths, and ADD's number.
Bytes query(std::uint8_t type, const std::vector<std::string>& strings, std::int64_t number = 0,
            bool with_number = false) {
  collie::test::TorchQuery q(type);
  for (const auto& str : strings)
    q.str(str);
  if (with_number) q.u64(static_cast<std::uint64_t>(number));
  return q.b;
}
std::uint64_t le64(const Bytes& b) { return static_cast<std::uint64_t>(collie::test::le64(b)); }
constexpr std::uint8_t kSet = collie::test::v1::SET, kGet = collie::test::v1::GET,
                       kAdd = collie::test::v1::ADD;

const std::string kToken = "relay-test-token-0123456789";

collie::store::ServerOptions guarded() {
  auto o = collie::test::StoreFixture::loopback();
  o.token = kToken;
  o.torch_clients = true;
  o.torch_loopback_only = true;
  return o;
}

collie::store::ClientOptions with_token(const std::string& token) {
  collie::store::ClientOptions o;
  o.token = token;
  o.timeout = 10s;
  o.connect_timeout = 10s;
  return o;
}

}  // namespace

TEST_CASE("torch relay: a torch client's queries reach a store that wants a token",
          "[store][torch]") {
  // A store that seals every connection (as one on another host does) seals
  // the relay's tunnel too.
  auto options = guarded();
  options.seal = GENERATE(collie::seal::Mode::Auto, collie::seal::Mode::On);
  collie::test::StoreFixture f(options);
  collie::store::TorchRelay relay("127.0.0.1", f.server.port(), with_token(kToken));
  REQUIRE(relay.port() != 0);
  REQUIRE(relay.port() != f.server.port());
  collie::test::RawConnection t(relay.port());
  t.send(query(kSet, {"/a", "through the relay"}));
  t.send(query(kGet, {"/a"}));
  auto n = t.read_exactly(8, 10s);
  REQUIRE(n);
  auto value = t.read_exactly(le64(*n), 10s);
  REQUIRE(value);
  CHECK(std::string(value->begin(), value->end()) == "through the relay");
  // The same data a collie client sees.
  auto collie_client = f.client(with_token(kToken));
  CHECK(collie_client->get("/a") == "through the relay");
  collie_client->add("/n", 40);
  t.send(query(kAdd, {"/n"}, 2, true));
  auto sum = t.read_exactly(8, 10s);
  REQUIRE(sum);
  CHECK(le64(*sum) == 42);
  // A second torch client at once has a tunnel of its own.
  collie::test::RawConnection u(relay.port());
  u.send(query(kGet, {"/n"}));
  n = u.read_exactly(8, 10s);
  REQUIRE(n);
  value = u.read_exactly(le64(*n), 10s);
  REQUIRE(value);
  CHECK(std::string(value->begin(), value->end()) == "42");
}

TEST_CASE("torch relay: collie's clients pass through and prove the token themselves",
          "[store][torch]") {
  auto options = guarded();
  options.seal = GENERATE(collie::seal::Mode::Auto, collie::seal::Mode::On);
  collie::test::StoreFixture f(options);
  collie::store::TorchRelay relay("127.0.0.1", f.server.port(), with_token(kToken));
  collie::store::StoreClient through("127.0.0.1", relay.port(), with_token(kToken));
  through.set("k", "v");
  CHECK(f.client(with_token(kToken))->get("k") == "v");
  // The relay proves nothing for them: a wrong token is refused end to end.
  CHECK_THROWS_AS(collie::store::StoreClient("127.0.0.1", relay.port(), with_token("wrong")),
                  collie::AuthenticationError);
}

// A port on loopback where a store listened and no longer does.
static std::uint16_t port_of_a_gone_store() {
  collie::test::StoreFixture f(guarded());
  return f.server.port();
}

TEST_CASE("torch relay: a store it cannot reach closes the torch client, nothing hangs",
          "[store][torch]") {
  const std::uint16_t gone = port_of_a_gone_store();
  auto options = with_token(kToken);
  options.connect_timeout = 500ms;
  collie::store::TorchRelay relay("127.0.0.1", gone, options);
  collie::test::RawConnection t(relay.port());
  t.send(query(kGet, {"/a"}));
  CHECK(t.closed_by_peer(20s));
}

// collie launch's next round replaces a relay whose store went with its
// node: the relay must not wait out its connect timeout first (it did, 300
// s, when the first node was lost under etcd rendezvous).
TEST_CASE("torch relay: stopped while it connects to a store that is gone, it returns at once",
          "[store][torch]") {
  const std::uint16_t gone = port_of_a_gone_store();
  auto options = with_token(kToken);
  options.connect_timeout = 300s;
  collie::test::LogCapture log(spdlog::level::debug);
  auto relay = std::make_unique<collie::store::TorchRelay>("127.0.0.1", gone, options);
  collie::test::RawConnection torch_client(relay->port());
  torch_client.send(query(kGet, {"/a"}));
  // The relay is carrying it once its client has been refused by the port.
  REQUIRE(collie::test::eventually([&] { return !log.containing("retrying in").empty(); }));
  const auto start = std::chrono::steady_clock::now();
  relay.reset();
  const auto took = std::chrono::steady_clock::now() - start;
  INFO("the relay's destructor took " << std::chrono::duration<double>(took).count() << " s");
  CHECK(took < 30s);
  CHECK(torch_client.closed_by_peer(20s));
  CHECK(log.containing("cannot reach the store").empty());
}
