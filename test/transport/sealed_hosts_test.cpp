// The sealed wire between hosts, as a job gets it by default (COLLIE_SEAL
// unset: auto): two ranks on namespace hosts 0 and 1 (support/netns.hpp),
// and a man in the middle on host 2 (support/relay.hpp) through which
// rank 1 reaches rank 0, or a store client on host 1 reaches a store on
// host 0. Both ends see a peer on another host, so both seal: the relay's
// capture holds none of a message's or a value's bytes, and a byte it
// flips, drops, duplicates or reorders ends in a ProtocolError that names
// the peer, never a wrong result or a hang. Skipped where namespaces
// cannot be made (not root, no iproute2).
#include <atomic>
#include <future>
#include <memory>
#include <thread>

#include "support/catch.hpp"

#include <collie/certificates.hpp>
#include <collie/error.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>
#include <collie/transport/keys.hpp>
#include <collie/transport/tcp.hpp>

#include "support/netns.hpp"
#include "support/relay.hpp"
#include "support/scratch_dir.hpp"
#include "support/test_pki.hpp"
#include "support/thread_ranks.hpp"
#include "support/transport_cluster.hpp"
#include "protocol.hpp"
#include "tcp/wire.hpp"

using namespace collie::test;

namespace {

const std::string kToken = "sealed-hosts-test";
// The connector's bytes before any change: its hello and the first
// message's record.
constexpr std::size_t kPastFirst = collie::transport::tcp::wire::kHelloBytes + 24;
constexpr std::uint64_t kFirst = 1u << 30;

bool contains(const std::vector<std::uint8_t>& haystack, const std::vector<std::uint8_t>& needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

// Three namespace hosts for every section of a test case (each test case
// runs in a process of its own): made once, gone at exit.
NetworkNamespaces& shared_hosts() {
  static NetworkNamespaces hosts(3);
  return hosts;
}

// Ranks 0 and 1 on hosts 0 and 1, their store on this process's loopback
// (each rank's client connected from here: a connected socket works from
// any namespace), rank 1 pointed at the relay on host 2 for rank 0.
struct TwoHosts {
  explicit TwoHosts(NetworkNamespaces& h) : hosts(h) {}

  // The ranks, each with its certificates (null: none), or `files` for
  // rank 1: its settings name the files (as COLLIE_SEAL_CERT, _KEY and
  // _CA do) and the transport loads them.
  void make(std::shared_ptr<const collie::seal::Certificates> c0 = nullptr,
            std::shared_ptr<const collie::seal::Certificates> c1 = nullptr,
            const std::vector<std::string>& files = {}) {
    const auto group = collie::crypto::random_u64();
    for (int r = 0; r < 2; ++r) {
      MeshOptions o;
      o.rank = r;
      o.world_size = 2;
      o.group_id = group;
      o.token = kToken;
      o.timeout = c0 || c1 ? 10s : 20s;  // a refused pair: rank 0 waits this long at most
      o.listen_address = NetworkNamespaces::address(r);
      o.certificates = r == 0 ? c0 : c1;
      if (r == 1 && files.size() == 3) {
        o.settings.seal_cert = files[0];
        o.settings.seal_key = files[1];
        o.settings.seal_ca = files[2];
      }
      auto client = fixture.shared_client();
      meshes.push_back(
          hosts.on_host(r, [&] { return std::make_shared<Mesh>(std::move(client), o); }));
    }
  }

  // Rank 1 sends rank 0 a message (either may connect first): "" if it
  // arrived intact, else what went wrong on each rank.
  std::string first_message() {
    std::string errors[2];
    run([&](int r) {
      try {
        if (r == 1) send(*meshes[1], 0, kFirst, pattern(100, 1, kFirst));
        if (r == 0 && recv(*meshes[0], 1, kFirst, 100) != pattern(100, 1, kFirst))
          errors[0] = "a wrong result";
      } catch (const collie::Error& e) {
        errors[r] = e.what();
      }
    });
    return errors[0].empty() && errors[1].empty()
               ? ""
               : "rank 0: " + errors[0] + " | rank 1: " + errors[1];
  }

  bool start(Change change, std::size_t at) {
    make();
    const auto target = port_of(*meshes[0]);
    relay = hosts.on_host(2, [&] {
      return std::make_unique<Relay>(NetworkNamespaces::address(2), NetworkNamespaces::address(0),
                                     target, change, at);
    });
    fixture.shared_client()->set(
        collie::keys::tcp_address("world", 0),
        NetworkNamespaces::address(2) + ":" + std::to_string(relay->port()));
    // Rank 1 connects first (through the relay; rank 0, connecting at
    // once, would win: the lower rank's connection is kept), with a message
    // rank 0 receives whole before anything is changed.
    hosts.on_host(1, [&] {
      send(*meshes[1], 0, kFirst, pattern(1, 1, kFirst));
      return true;
    });
    return hosts.on_host(0, [&] { return recv(*meshes[0], 1, kFirst, 1) == pattern(1, 1, kFirst); });
  }

  // body(rank) on a thread per rank, each in its rank's host.
  void run(const std::function<void(int)>& body) {
    std::vector<std::future<void>> done;
    for (int r = 0; r < 2; ++r)
      done.push_back(std::async(std::launch::async, [&, r] {
        hosts.enter(r);
        body(r);
      }));
    for (auto& f : done)
      f.get();
  }

  NetworkNamespaces& hosts;
  StoreFixture fixture;
  std::vector<std::shared_ptr<Mesh>> meshes;
  std::unique_ptr<Relay> relay;
};

}  // namespace

TEST_CASE("sealed between hosts by default: a capture on the link holds none of the messages",
          "[mesh][seal][multihost]") {
  auto& hosts = shared_hosts();
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  TwoHosts job(hosts);
  REQUIRE(job.start(Change::None, 0));
  const std::vector<std::size_t> sizes = {1, 4096, 65537, (1 << 20) + 5};
  job.run([&](int r) {
    auto& m = *job.meshes[static_cast<std::size_t>(r)];
    for (std::size_t n : sizes) {
      if (r == 1) {
        send(m, 0, n, pattern(n, 1, n));
        expect(recv(m, 0, n, n) == pattern(n, 0, n), "reply differs at size " + std::to_string(n));
      } else {
        expect(recv(m, 1, n, n) == pattern(n, 1, n), "message differs at size " + std::to_string(n));
        send(m, 1, n, pattern(n, 0, n));
      }
    }
  });
  const auto wire = job.relay->captured();
  std::size_t payload = 0;
  for (auto n : sizes)
    payload += 2 * n;
  CHECK(wire.size() > payload);  // everything crossed host 2
  for (int from : {0, 1})
    for (std::uint64_t tag : {std::uint64_t{4096}, std::uint64_t{(1 << 20) + 5}})
      CHECK_FALSE(contains(wire, pattern(48, from, tag)));
}

TEST_CASE("sealed between hosts by default: a man in the middle's change fails the pair by name",
          "[mesh][seal][multihost]") {
  auto& hosts = shared_hosts();
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  const auto change = GENERATE(Change::Flip, Change::Drop, Change::Duplicate, Change::Reorder);
  INFO("change " << static_cast<int>(change));
  TwoHosts job(hosts);
  REQUIRE(job.start(change, kPastFirst));
  constexpr int kMessages = 8;
  std::string error;
  std::atomic<int> good{0};
  job.run([&](int r) {
    auto& m = *job.meshes[static_cast<std::size_t>(r)];
    for (int i = 0; i < kMessages; ++i) {
      const auto tag = static_cast<std::uint64_t>(i);
      try {
        if (r == 1) {
          send(m, 0, tag, pattern(1000, 1, tag));
        } else {
          expect(recv(m, 1, tag, 1000) == pattern(1000, 1, tag), "a wrong result");
          ++good;
        }
      } catch (const collie::ProtocolError& e) {
        if (r == 0) error = e.what();
        return;
      } catch (const collie::Error&) {
        return;  // rank 1: rank 0 gave up on the pair
      }
    }
  });
  CHECK(good == 0);  // the change lands in the first record after the first message
  CHECK_THAT(error, ContainsSubstring("rank 1") &&
                        (ContainsSubstring("fails its authentication") ||
                         ContainsSubstring("broke the sealed protocol")));
}

TEST_CASE("sealed between hosts by default: a store client through a man in the middle",
          "[store][seal][multihost]") {
  auto& hosts = shared_hosts();
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  const auto change = GENERATE(Change::None, Change::Flip, Change::Drop, Change::Reorder);
  INFO("change " << static_cast<int>(change));
  collie::store::ServerOptions options;
  options.host = NetworkNamespaces::address(0);
  options.token = kToken;
  auto server = hosts.on_host(
      0, [&] { return std::make_unique<collie::store::StoreServer>(options); });
  const auto port = server->port();
  // The client's hello and proof cross untouched (each a write of its
  // own); the change lands in the chunk that begins with its first sealed
  // record.
  constexpr std::size_t kPastHandshake =
      collie::store::wire::kClientHelloBytes + collie::store::wire::kProofBytes;
  auto relay = hosts.on_host(2, [&] {
    return std::make_unique<Relay>(NetworkNamespaces::address(2), NetworkNamespaces::address(0),
                                   port, change, kPastHandshake);
  });
  // A value larger than the sockets take whole: the client may still be
  // sending when the store closes on a changed record, and reports the
  // store's reason all the same.
  std::string value(300 << 10, '\0');
  for (std::size_t i = 0; i < value.size(); ++i)
    value[i] = static_cast<char>((i * 131 + 5) % 251);
  const auto outcome = hosts.on_host(1, [&]() -> std::string {
    collie::store::ClientOptions o;
    o.token = kToken;
    o.timeout = 20s;
    o.connect_timeout = 10s;
    try {
      collie::store::StoreClient client(NetworkNamespaces::address(2), relay->port(), o);
      client.set("the-sealed-key", value);
      return client.get("the-sealed-key") == value ? "same" : "a wrong value";
    } catch (const collie::ProtocolError& e) {
      return std::string("ProtocolError: ") + e.what();
    } catch (const collie::Error& e) {
      return std::string("another error: ") + e.what();
    }
  });
  const auto wire = relay->captured();
  CHECK_FALSE(contains(wire, std::vector<std::uint8_t>(value.begin(), value.begin() + 48)));
  if (change == Change::None) {
    CHECK(outcome == "same");
    CHECK(wire.size() > 2 * value.size());
  } else {
    CHECK_THAT(outcome, StartsWith("ProtocolError: ") &&
                            ContainsSubstring(NetworkNamespaces::address(2)));
  }
}

namespace {

// Two hosts' certificates from one authority (for their addresses, or the
// names given), loaded.
struct Certified {
  explicit Certified(const std::string& name0 = "IP:" + NetworkNamespaces::address(0),
                     const std::string& name1 = "IP:" + NetworkNamespaces::address(1))
      : pki(dir.path(), "site") {
    const auto a = pki.issue("host0", {name0});
    const auto b = pki.issue("host1", {name1});
    c0 = collie::seal::Certificates::load(a.cert, a.key, pki.ca_file);
    c1 = collie::seal::Certificates::load(b.cert, b.key, pki.ca_file);
  }
  ScratchDir dir;
  TestPki pki;
  std::shared_ptr<const collie::seal::Certificates> c0, c1;
};

}  // namespace

TEST_CASE("certificates between hosts: ranks whose certificates name their hosts connect sealed",
          "[mesh][seal][certificates][multihost]") {
  auto& hosts = shared_hosts();
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  Certified certs;
  TwoHosts job(hosts);
  const bool from_files = GENERATE(false, true);
  if (from_files) {
    const auto b = certs.pki.issue("host1-files", {"IP:" + NetworkNamespaces::address(1)});
    job.make(certs.c0, nullptr, {b.cert, b.key, certs.pki.ca_file});
  } else {
    job.make(certs.c0, certs.c1);
  }
  CHECK(job.first_message() == "");
  // Both ways, every size, on the connection the certificates proved.
  job.run([&](int r) {
    auto& m = *job.meshes[static_cast<std::size_t>(r)];
    for (std::size_t n : {std::size_t{1}, std::size_t{70000}}) {
      if (r == 0) send(m, 1, n, pattern(n, 0, n));
      if (r == 1) expect(recv(m, 0, n, n) == pattern(n, 0, n), "a wrong result");
    }
  });
}

TEST_CASE("certificates between hosts: a wrong name, another authority, a relay or a host "
          "without one is refused, saying why",
          "[mesh][seal][certificates][multihost]") {
  auto& hosts = shared_hosts();
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  std::string error;
  SECTION("rank 0's certificate names another host") {
    Certified certs("IP:10.77.0.9");
    TwoHosts job(hosts);
    job.make(certs.c0, certs.c1);
    error = job.first_message();
    CHECK_THAT(error, ContainsSubstring("certificate proof fails") &&
                          ContainsSubstring("does not name " + NetworkNamespaces::address(0)));
  }
  SECTION("rank 1's certificate names another host") {
    Certified certs("IP:" + NetworkNamespaces::address(0), "DNS:elsewhere.example");
    TwoHosts job(hosts);
    job.make(certs.c0, certs.c1);
    error = job.first_message();
    CHECK_THAT(error, ContainsSubstring("certificate proof fails") &&
                          ContainsSubstring("does not name " + NetworkNamespaces::address(1)));
  }
  SECTION("rank 1's certificate is another authority's") {
    Certified certs;
    Certified other;
    TwoHosts job(hosts);
    job.make(certs.c0, other.c1);
    error = job.first_message();
    CHECK_THAT(error, ContainsSubstring("certificate proof fails") &&
                          ContainsSubstring("is not accepted"));
  }
  SECTION("rank 1 has none") {
    Certified certs;
    TwoHosts job(hosts);
    job.make(certs.c0, nullptr);
    error = job.first_message();
    CHECK_THAT(error, ContainsSubstring("refused") &&
                          ContainsSubstring("rank 1 has none (COLLIE_SEAL_CERT is not set there)") &&
                          ContainsSubstring("rank 0 proves itself with a certificate"));
  }
  SECTION("rank 0 has none") {
    Certified certs;
    TwoHosts job(hosts);
    job.make(nullptr, certs.c1);
    error = job.first_message();
    CHECK_THAT(error, ContainsSubstring("refused") &&
                          ContainsSubstring("rank 1 proves itself with a certificate") &&
                          ContainsSubstring("rank 0 has none"));
  }
  SECTION("a relay forwards every byte unchanged") {
    // The bytes are whole, but rank 1 reaches rank 0 at the relay's
    // address and rank 0 sees rank 1 come from it: neither certificate
    // names it.
    Certified certs;
    TwoHosts job(hosts);
    job.make(certs.c0, certs.c1);
    const auto target = port_of(*job.meshes[0]);
    auto relay = hosts.on_host(2, [&] {
      return std::make_unique<Relay>(NetworkNamespaces::address(2), NetworkNamespaces::address(0),
                                     target, Change::None, 0);
    });
    job.fixture.shared_client()->set(
        collie::keys::tcp_address("world", 0),
        NetworkNamespaces::address(2) + ":" + std::to_string(relay->port()));
    error = hosts.on_host(1, [&]() -> std::string {
      try {
        send(*job.meshes[1], 0, kFirst, pattern(100, 1, kFirst));
        return "";
      } catch (const collie::Error& e) {
        return e.what();
      }
    });
    CHECK_THAT(error, ContainsSubstring("certificate proof fails") &&
                          ContainsSubstring("does not name " + NetworkNamespaces::address(2)));
  }
}

TEST_CASE("certificates between hosts: the store and its clients prove themselves too",
          "[store][seal][certificates][multihost]") {
  auto& hosts = shared_hosts();
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  ScratchDir dir;
  TestPki site(dir.path(), "site");
  TestPki other(dir.path(), "other");
  const auto load = [](const TestPki::Issued& i, const TestPki& pki) {
    return collie::seal::Certificates::load(i.cert, i.key, pki.ca_file);
  };
  const auto store_host = "IP:" + NetworkNamespaces::address(0);
  const auto client_host = "IP:" + NetworkNamespaces::address(1);
  std::shared_ptr<const collie::seal::Certificates> store_certs, client_certs;
  bool through_relay = false;
  std::string expected;  // in the client's error; empty: it works
  SECTION("both name their hosts") {
    store_certs = load(site.issue("store", {store_host}), site);
    client_certs = load(site.issue("client", {client_host}), site);
  }
  SECTION("the client has none") {
    store_certs = load(site.issue("store", {store_host}), site);
    expected = "the store proves itself with a certificate and this client has none";
  }
  SECTION("the store has none") {
    client_certs = load(site.issue("client", {client_host}), site);
    expected = "the store has none (COLLIE_SEAL_CERT is not set there) and this client proves "
               "itself with a certificate";
  }
  SECTION("the client's is another authority's") {
    store_certs = load(site.issue("store", {store_host}), site);
    client_certs = load(other.issue("client", {client_host}), other);
    expected = "refused this client's certificate";
  }
  SECTION("the store's names another host") {
    store_certs = load(site.issue("store", {"IP:10.77.0.9"}), site);
    client_certs = load(site.issue("client", {client_host}), site);
    expected = "its certificate proof fails: its certificate (/CN=store) does not name " +
               NetworkNamespaces::address(0);
  }
  SECTION("a relay forwards every byte unchanged") {
    store_certs = load(site.issue("store", {store_host}), site);
    client_certs = load(site.issue("client", {client_host}), site);
    through_relay = true;
    expected = "refused this client's certificate";
  }
  collie::store::ServerOptions options;
  options.host = NetworkNamespaces::address(0);
  options.token = kToken;
  options.certificates = store_certs;
  auto server = hosts.on_host(
      0, [&] { return std::make_unique<collie::store::StoreServer>(options); });
  const auto port = server->port();
  std::unique_ptr<Relay> relay;
  if (through_relay) {
    relay = hosts.on_host(2, [&] {
      return std::make_unique<Relay>(NetworkNamespaces::address(2), NetworkNamespaces::address(0),
                                     port, Change::None, 0);
    });
  }
  const auto outcome = hosts.on_host(1, [&]() -> std::string {
    collie::store::ClientOptions o;
    o.token = kToken;
    o.timeout = 10s;
    o.connect_timeout = 5s;
    o.certificates = client_certs;
    try {
      collie::store::StoreClient client(
          relay ? NetworkNamespaces::address(2) : NetworkNamespaces::address(0),
          relay ? relay->port() : port, o);
      client.set("k", "a value");
      return client.get("k") == "a value" ? "" : "a wrong value";
    } catch (const collie::Error& e) {
      return e.what();
    }
  });
  if (expected.empty()) {
    CHECK(outcome == "");
  } else {
    CHECK_THAT(outcome, ContainsSubstring(expected));
  }
}
