// The mesh with its connections sealed (COLLIE_SEAL=on, so that loopback
// seals too): messages of every size intact; a relay between two ranks
// that records what crosses (none of a message's bytes) or changes an
// established connection's bytes (each change ends in a ProtocolError that
// names the peer, no wrong result, no hang); sides that seal differently
// refused with both settings named.
#include <arpa/inet.h>
#include <atomic>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/seal.hpp>
#include <collie/transport/keys.hpp>
#include <collie/transport/tcp.hpp>

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

// What a relay does to the bytes from the connector to the acceptor, past
// the handshake (the first `from` of them).
enum class Change { None, Flip, Drop, Duplicate, Reorder };

// A man in the middle on loopback: accepts one connection on a port of its
// own, connects to `target`, and copies bytes both ways, recording them and
// changing the connector's bytes after the handshake as told: the first
// chunk read that begins `at` bytes or more past the first message.
class Relay {
 public:
  Relay(std::uint16_t target, Change change, std::size_t at = 0) : change_(change), at_(at) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 4) == 0);
    socklen_t length = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &length);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, target] { run(target); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  std::uint16_t port() const { return port_; }
  std::vector<std::uint8_t> captured() {
    std::lock_guard lock(mu_);
    return captured_;
  }

 private:
  // Past the hello and the first message's record (through()).
  static constexpr std::size_t kFrom = collie::transport::tcp::wire::kHelloBytes + 24;

  void run(std::uint16_t target) {
    pollfd l{listener_, POLLIN, 0};
    while (!stop_ && ::poll(&l, 1, 50) == 0) {
    }
    if (stop_) return;
    const int in = ::accept(listener_, nullptr, nullptr);
    const int out = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target);
    if (in < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(in);
      ::close(out);
      return;
    }
    std::size_t forward = 0;  // connector's bytes seen
    bool changed = false;
    while (!stop_) {
      pollfd fds[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      std::uint8_t buffer[65536];
      bool over = false;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
        if (n <= 0) {
          over = true;
          break;
        }
        std::vector<std::uint8_t> bytes(buffer, buffer + n);
        {
          std::lock_guard lock(mu_);
          captured_.insert(captured_.end(), bytes.begin(), bytes.end());
        }
        if (i == 0) {
          const std::size_t start = forward;
          forward += bytes.size();
          // The first chunk wholly past the handshake and the first record.
          if (!changed && change_ != Change::None && start >= kFrom + at_ &&
              bytes.size() >= 200) {
            const std::size_t at = 0;
            changed = true;
            if (change_ == Change::Flip) {
              bytes[at + 10] ^= 0x40;
            } else if (change_ == Change::Drop) {
              bytes.erase(bytes.begin() + static_cast<long>(at),
                          bytes.begin() + static_cast<long>(at + 100));
            } else if (change_ == Change::Duplicate) {
              bytes.insert(bytes.begin() + static_cast<long>(at + 100),
                           bytes.begin() + static_cast<long>(at),
                           bytes.begin() + static_cast<long>(at + 100));
            } else if (change_ == Change::Reorder) {
              std::rotate(bytes.begin() + static_cast<long>(at),
                          bytes.begin() + static_cast<long>(at + 50),
                          bytes.begin() + static_cast<long>(at + 100));
            }
          }
        }
        const int to = i == 0 ? out : in;
        std::size_t sent = 0;
        while (sent < bytes.size()) {
          const ssize_t w = ::send(to, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
          if (w <= 0) break;
          sent += static_cast<std::size_t>(w);
        }
      }
      if (over) break;
    }
    ::close(in);
    ::close(out);
  }

  Change change_;
  std::size_t at_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::uint8_t> captured_;
};

constexpr std::uint64_t kFirst = 1u << 30;

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
  Relay relay(port_of(c.tcp(0)), Change::None);
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
  Relay relay(port_of(c.tcp(0)), change);
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
  Relay relay(port_of(c.tcp(0)), Change::Flip, 256 << 10);
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
