// The mesh with its connections sealed (COLLIE_SEAL=on, so that loopback
// seals too): messages of every size intact; a relay between two ranks
// that records what crosses (none of a message's bytes) or changes an
// established connection's bytes (each change ends in a ProtocolError that
// names the peer, no wrong result, no hang); sides that seal differently
// refused with both settings named.
#include <atomic>
#include <thread>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/seal.hpp>
#include <collie/transport/keys.hpp>
#include <collie/transport/tcp.hpp>

#include "support/relay.hpp"
#include "support/thread_ranks.hpp"
#include "support/transport_cluster.hpp"
#include "tcp/wire.hpp"

using namespace collie::test;
using collie::test::expect;

namespace {

void sealed_on(MeshOptions& o) {
  o.settings.seal = "on";
  o.token = "secret";
}


constexpr std::uint64_t kFirst = 1u << 30;
// The connector's bytes before any change: its hello and the first
// message's record (through()).
constexpr std::size_t kPastFirst = collie::transport::tcp::wire::kHelloBytes + 24;

// Points rank 1 at the relay in place of rank 0, and has it connect (rank
// 0, connecting at once, would win: the lower rank's connection is kept),
// with a first message that rank 0 receives whole.
void through(Cluster& c, const Relay& relay) {
  c.fixture.shared_client()->set(collie::keys::tcp_address("world", 0),
                                 "127.0.0.1:" + std::to_string(relay.port()));
  send(c[1], 0, kFirst, pattern(1, 1, kFirst));
  expect(recv(c[0], 1, kFirst, 1) == pattern(1, 1, kFirst), "the first message");
}

bool contains(const std::vector<std::uint8_t>& haystack, const std::vector<std::uint8_t>& needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

}  // namespace

TEST_CASE("sealed mesh: every size intact both ways, and the wire holds none of it", "[mesh][seal]") {
  Cluster c(2, sealed_on);
  Relay relay(port_of(c.tcp(0)), Change::None, kPastFirst);
  through(c, relay);
  const std::vector<std::size_t> sizes = {1, 31, 33, 4096, 65535, 65536, 65537, (1 << 20) + 5,
                                          (3 << 20) + 17};
  c.run([&](int r) {
    for (std::size_t n : sizes) {
      if (r == 1) {
        send(c[1], 0, n, pattern(n, 1, n));
        expect(recv(c[1], 0, n, n) == pattern(n, 0, n), "reply differs at size " + std::to_string(n));
      } else {
        expect(recv(c[0], 1, n, n) == pattern(n, 1, n),
               "message differs at size " + std::to_string(n));
        send(c[0], 1, n, pattern(n, 0, n));
      }
    }
  });
  const auto wire = relay.captured();
  std::size_t payload = 0;
  for (auto n : sizes)
    payload += 2 * n;
  CHECK(wire.size() > payload);  // everything went through the relay
  // 48 bytes of either side's pattern, anywhere: none.
  for (int from : {0, 1})
    for (std::uint64_t tag : {std::uint64_t{4096}, std::uint64_t{(1 << 20) + 5}}) {
      const auto p = pattern(48, from, tag);
      CHECK_FALSE(contains(wire, p));
    }
}

TEST_CASE("sealed mesh: a changed byte stream fails the pair by name, never a wrong result",
          "[mesh][seal]") {
  const auto change = GENERATE(Change::Flip, Change::Drop, Change::Duplicate, Change::Reorder);
  INFO("change " << static_cast<int>(change));
  Cluster c(2, [](MeshOptions& o) {
    sealed_on(o);
    o.timeout = 20s;
  });
  Relay relay(port_of(c.tcp(0)), change, kPastFirst);
  through(c, relay);
  constexpr int kMessages = 8;
  std::string error;
  std::atomic<int> good{0};
  c.run([&](int r) {
    if (r == 1) {
      for (int i = 0; i < kMessages; ++i) {
        try {
          send(c[1], 0, static_cast<std::uint64_t>(i), pattern(1000, 1, static_cast<std::uint64_t>(i)));
        } catch (const collie::Error&) {
          return;  // rank 0 gave up on the pair
        }
      }
      return;
    }
    for (int i = 0; i < kMessages; ++i) {
      try {
        const auto got = recv(c[0], 1, static_cast<std::uint64_t>(i), 1000);
        expect(got == pattern(1000, 1, static_cast<std::uint64_t>(i)), "a wrong result");
        ++good;
      } catch (const collie::ProtocolError& e) {
        error = e.what();
        return;
      }
    }
  });
  // The change lands in the first record: nothing of it was received.
  CHECK(good == 0);
  CHECK_THAT(error, ContainsSubstring("rank 1") &&
                        (ContainsSubstring("fails its authentication") ||
                         ContainsSubstring("broke the sealed protocol")));
}

TEST_CASE("sealed mesh: a changed record of a large message leaves none of its bytes in the "
          "receive's buffer",
          "[mesh][seal]") {
  // Records wholly within a posted receive's payload are opened straight
  // into its buffer; the flip lands in one of them (past 256 KiB of the 1
  // MiB message).
  Cluster c(2, [](MeshOptions& o) {
    sealed_on(o);
    o.timeout = 20s;
  });
  Relay relay(port_of(c.tcp(0)), Change::Flip, kPastFirst + (256 << 10));
  through(c, relay);
  constexpr std::size_t kBytes = 1 << 20;
  const auto sent = pattern(kBytes, 1, 7);
  std::vector<std::uint8_t> buffer(kBytes, 0xEE);
  std::string error;
  c.run([&](int r) {
    if (r == 1) {
      recv(c[1], 0, 6, 1);  // rank 0's receive is posted
      try {
        send(c[1], 0, 7, sent);
      } catch (const collie::Error&) {
      }
      return;
    }
    auto request = c[0].irecv(1, 7, buffer.data(), buffer.size());
    send(c[0], 1, 6, {1});
    try {
      c[0].wait(request);
    } catch (const collie::ProtocolError& e) {
      error = e.what();
    }
  });
  CHECK_THAT(error, ContainsSubstring("rank 1") && ContainsSubstring("fails its authentication"));
  // Each byte is what was sent (records before the changed one), the
  // buffer's own (records after it), or the changed record's wipe.
  std::size_t foreign = 0, sent_bytes = 0;
  for (std::size_t i = 0; i < kBytes; ++i) {
    if (buffer[i] == sent[i]) {
      ++sent_bytes;
    } else if (buffer[i] != 0 && buffer[i] != 0xEE) {
      ++foreign;
    }
  }
  CHECK(foreign == 0);
  // The changed record began at most one record before the changed chunk:
  // what came before it was opened straight into the buffer.
  CHECK(sent_bytes >= (256u << 10) - collie::seal::kMaxRecordBytes - 1024);
}

TEST_CASE("sealed mesh: ranks that seal differently are refused, both settings named",
          "[mesh][seal]") {
  collie::test::StoreFixture fixture;
  MeshOptions a;
  a.world_size = 2;
  a.group_id = collie::crypto::random_u64();
  a.token = "secret";
  a.timeout = 10s;
  a.settings.seal = "on";
  MeshOptions b = a;
  b.rank = 1;
  b.settings.seal = "auto";  // loopback: clear
  Mesh m0(fixture.shared_client(), a);
  Mesh m1(fixture.shared_client(), b);
  const auto out = pattern(4, 1, 0);
  std::string error;
  try {
    m1.wait(m1.isend(0, 0, out.data(), out.size()));
  } catch (const collie::Error& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("refused") && ContainsSubstring("COLLIE_SEAL=on") &&
                        ContainsSubstring("COLLIE_SEAL=auto") &&
                        ContainsSubstring("set COLLIE_SEAL alike"));
}
