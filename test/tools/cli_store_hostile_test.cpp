// `collie store serve` with its default limits against a hostile client that
// knows the token (the worst case: a broken or malicious rank): garbage,
// forged handshakes, connection floods, parked waits, huge values, replies
// never read, idle connections. The store must stay alive, serve a
// well-behaved client within a second after each attack, and stay under
// 256 MiB of memory (its peak resident set, VmHWM).
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <random>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>

#include "auth.hpp"
#include "protocol.hpp"
#include "support/catch.hpp"
#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using namespace collie::store;
using collie::test::Subprocess;
using Clock = std::chrono::steady_clock;

namespace {

using collie::test::kCollie;
const std::string kToken = "hostile-test-secret";

// A check the helpers below make, also on the parkers' and guessers'
// threads, where Catch's assertions must not be made (Catch2 3's are not
// thread-safe: one aborted the run on Debian 13): throws, and the future's
// get() rethrows it on the test's thread.
void must(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(fmt::format("{} failed: {}", what, std::strerror(errno)));
}

// A blocking TCP connection to 127.0.0.1:port from `source`, as a file descriptor.
int connect_to(std::uint16_t port, const char* source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  must(fd >= 0, "socket()");
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  must(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) == 0, "bind()");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  must(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0, "connect()");
  return fd;
}

bool send_all(int fd, std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

bool recv_all(int fd, std::span<std::uint8_t> out) {
  while (!out.empty()) {
    const auto n = ::recv(fd, out.data(), out.size(), 0);
    if (n <= 0) return false;
    out = out.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

// Handshake with `token`; returns the server's answer to the proof, or -1.
int authenticate(int fd, const std::string& token) {
  wire::ClientHello hello;
  hello.has_token = true;
  hello.nonce = auth::random_nonce();
  hello.sealing = collie::seal::sealing_field(false, collie::seal::Mode::Off);  // in the clear
  const auto sent = wire::encode(hello);
  if (!send_all(fd, sent)) return -1;
  std::array<std::uint8_t, wire::kServerHelloBytes> reply{};
  if (!recv_all(fd, reply)) return -1;
  const auto proof = auth::handshake_keys(token, sent, reply, nullptr).connector_proof;
  if (!send_all(fd, proof)) return -1;
  std::uint8_t status = 0xff;
  if (!recv_all(fd, std::span(&status, 1))) return -1;
  return status;
}

// A connection past the handshake, made non-blocking for the floods.
int hostile(std::uint16_t port) {
  const int fd = connect_to(port);
  must(authenticate(fd, kToken) == 0, "the handshake with the right token");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// Sends as much of `bytes` as the server takes, until it stops taking any
// for `patience` (its back-pressure): the client never reads.
std::size_t flood(int fd, std::span<const std::uint8_t> bytes,
                  std::chrono::milliseconds patience = std::chrono::seconds(1)) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(patience.count())) <= 0) break;
    const auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

// Waits for one reply frame on a non-blocking connection; its status byte
// (wire::ReplyStatus), or -1 if none came within `limit`.
int reply_status(int fd, std::chrono::milliseconds limit) {
  std::vector<std::uint8_t> got;
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (got.size() >= 5 && got.size() >= 4 + wire::get_u32(got.data())) return got[4];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    std::uint8_t chunk[4096];
    const auto n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return -1;
    got.insert(got.end(), chunk, chunk + n);
  }
  return -1;
}

// Sends `bytes` while reading (and dropping) the replies, until the reply
// to request `last` comes: the server has then handled everything sent.
// False if it did not come within `limit`.
bool send_until_answered(int fd, std::span<const std::uint8_t> bytes, std::uint32_t last,
                         std::chrono::milliseconds limit) {
  std::vector<std::uint8_t> in;
  std::size_t sent = 0;
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    // Complete replies received so far.
    std::size_t at = 0;
    while (in.size() - at >= 9 && in.size() - at >= 4 + wire::get_u32(in.data() + at)) {
      if (wire::get_u32(in.data() + at + 5) == last) return true;
      at += 4 + wire::get_u32(in.data() + at);
    }
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(at));
    pollfd p{fd, static_cast<short>(POLLIN | (sent < bytes.size() ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (p.revents & POLLIN) {
      std::uint8_t chunk[65536];
      const auto n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n == 0) return false;
      if (n > 0) in.insert(in.end(), chunk, chunk + n);
    }
    if ((p.revents & POLLOUT) && sent < bytes.size()) {
      const auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
  }
  return false;
}

std::vector<std::uint8_t> request(wire::Op op, std::uint32_t id, std::string_view key,
                                  std::optional<std::string_view> value = {}) {
  wire::Request r;
  r.op = op;
  r.id = id;
  if (op != wire::Op::Ping) r.keys = {key};
  if (value) r.values = {*value};
  return wire::encode(r);
}

std::size_t status_kib(pid_t pid, const std::string& field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
  }
  return 0;
}

}  // namespace

TEST_CASE(
    "a hostile client leaves collie store serve alive, serving within a second, under "
    "256 MiB",
    "[cli][security][volume]") {
  raise_open_file_limit();
  collie::test::ScratchDir dir;
  Subprocess server({kCollie, "store", "serve", "--host", "127.0.0.1", "--port", "0", "--port-file",
                     dir.file("port")},
                    {"COLLIE_STORE_TOKEN=" + kToken, "COLLIE_LOG_LEVEL=warn"});
  REQUIRE_THAT(server.read_line(30s).value_or(""), StartsWith("collie store listening"));
  const auto port = static_cast<std::uint16_t>(std::stoi([&] {
    std::ifstream in(dir.path() / "port");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }()));
  ClientOptions options;
  options.token = kToken;
  options.timeout = 30s;
  StoreClient good("127.0.0.1", port, options);
  good.set("job/config", "the well-behaved client's value");

  std::vector<std::string> report;
  auto still_serves = [&](const std::string& after) {
    INFO("after " << after);
    const auto start = Clock::now();
    good.set("job/after", after);
    CHECK(good.get("job/after") == after);
    CHECK(good.get("job/config") == "the well-behaved client's value");
    // A new connection too (from another address than the attacker's
    // guesses, which are slowed down).
    StoreClient fresh("127.0.0.1", port, options);
    CHECK(fresh.add("job/counter", 1) >= 1);
    const auto took = Clock::now() - start;
    CHECK(took < 1s);
    const auto rss = status_kib(server.pid(), "VmRSS");
    report.push_back(fmt::format("{}: served in {:.1f} ms, RSS {} MiB", after,
                                 std::chrono::duration<double, std::milli>(took).count(),
                                 rss / 1024));
  };
  std::vector<int> held;  // connections kept open to the end
  std::mutex held_mutex;

  // Garbage instead of a handshake, and garbage after one.
  std::mt19937 random(1);
  for (int i = 0; i < 100; ++i) {
    const int fd = connect_to(port);
    std::vector<std::uint8_t> junk(64 + 37 * static_cast<std::size_t>(i));
    for (auto& b : junk)
      b = static_cast<std::uint8_t>(random());
    send_all(fd, junk);
    ::close(fd);
  }
  for (int i = 0; i < 20; ++i) {
    const int fd = hostile(port);
    std::vector<std::uint8_t> junk(4096);
    for (auto& b : junk)
      b = static_cast<std::uint8_t>(random());
    flood(fd, junk);
    ::close(fd);
  }
  still_serves("garbage");

  // Forged handshakes: wrong tokens, all at once, from another address.
  {
    std::vector<std::future<int>> guesses;
    for (int i = 0; i < 40; ++i) {
      guesses.push_back(std::async(std::launch::async, [port, i] {
        const int fd = connect_to(port, "127.0.0.3");
        const int status = authenticate(fd, fmt::format("guess-{}", i));
        ::close(fd);
        return status;
      }));
    }
    for (auto& g : guesses) {
      const int status = g.get();
      CHECK((status == static_cast<int>(wire::AuthStatus::Failed) ||
             status == static_cast<int>(wire::AuthStatus::Throttled)));
    }
  }
  still_serves("forged handshakes");

  // A connection flood: silent connections and idle authenticated ones.
  for (int i = 0; i < 1000; ++i)
    held.push_back(connect_to(port, "127.0.0.4"));
  for (int i = 0; i < 200; ++i)
    held.push_back(hostile(port));
  still_serves("1,200 idle connections");

  // Parked waits: 20 connections, each with as many gets on missing 4 KiB
  // keys as it is allowed (the server refuses the rest when its memory is full).
  std::vector<int> parked;
  {
    // Catch's assertions are made in this thread only: each parker says
    // whether its gets were answered.
    std::vector<std::future<bool>> parkers;
    for (int c = 0; c < 20; ++c) {
      parkers.push_back(std::async(std::launch::async, [&parked, &held_mutex, port, c] {
        const int fd = hostile(port);
        std::vector<std::uint8_t> burst;
        for (std::uint32_t i = 1; i <= 4096; ++i) {
          const auto key = fmt::format("{:04}/{:06}/{}", c, i, std::string(4080, 'k'));
          auto r = request(wire::Op::Get, i, key);
          burst.insert(burst.end(), r.begin(), r.end());
        }
        // Then a ping: its answer says the server has handled every get.
        const auto ping = request(wire::Op::Ping, 5000, {});
        burst.insert(burst.end(), ping.begin(), ping.end());
        const bool answered = send_until_answered(fd, burst, 5000, 300s);
        std::lock_guard lock(held_mutex);
        parked.push_back(fd);
        return answered;
      }));
    }
    for (auto& p : parkers)
      CHECK(p.get());
  }
  still_serves("parked waits");
  // Gone: their waits free the memory they held (else nothing below would
  // fit). The store has seen them go once three values of 32 MiB fit at once.
  for (const int fd : parked)
    ::close(fd);
  {
    const std::string probe(32 << 20, 'p');
    // The server gives its memory back as the hostile clients' go: each
    // probe fits once there is room again.
    int fitted = 0;
    std::string other_refusal;  // any refusal but "the store is full"
    collie::test::eventually([&] {
      try {
        good.set(fmt::format("job/probe/{}", fitted), probe);
        ++fitted;
      } catch (const collie::RequestError& e) {
        if (std::string(e.what()).find("the store is full") == std::string::npos)
          other_refusal = e.what();
      }
      return fitted == 3 || !other_refusal.empty();
    }, 120s);
    REQUIRE(other_refusal.empty());
    REQUIRE(fitted == 3);
    for (int i = 0; i < 3; ++i)
      CHECK(good.delete_key(fmt::format("job/probe/{}", i)));
  }

  // Huge values: stored until the store is full, then frames of 32 MiB
  // left half-sent (their connections hold what the store reserved for them).
  {
    const std::string value(32 << 20, 'h');
    std::atomic<int> stored{0};
    std::vector<int> statuses;  // checked here, on the test's thread (Catch's is not shared)
    for (const bool whole : {true, false}) {
      std::vector<std::future<void>> senders;
      for (int c = 0; c < 6; ++c) {
        senders.push_back(std::async(std::launch::async, [&, c, whole] {
          const int fd = hostile(port);
          auto frame =
              request(wire::Op::Set, 1, fmt::format("huge/{}/{}", whole ? 1 : 0, c), value);
          const auto part = std::span<const std::uint8_t>(frame);
          // (Patiently: under a sanitizer on a busy host the server may
          // take seconds to read on; a half-sent frame here is the
          // test's doing, not the attack's.)
          flood(fd, whole ? part : part.first(part.size() / 2), 60s);
          // A whole one is answered: stored, or "the store is full".
          const int status = whole ? reply_status(fd, 120s) : 0;
          std::lock_guard lock(held_mutex);
          if (whole) {
            statuses.push_back(status);
            if (status == static_cast<int>(wire::ReplyStatus::Ok)) ++stored;
          }
          held.push_back(fd);
        }));
      }
      for (auto& s : senders)
        s.get();
    }
    CHECK(statuses.size() == 6);
    for (int status : statuses)
      CHECK(status >= 0);
    CHECK(stored >= 1);
    CHECK(stored <= 4);  // 128 MiB
  }
  still_serves("huge values");

  // Replies never read: gets of the largest values, many times over.
  {
    const auto keys = good.list_keys("huge/1/");
    REQUIRE_FALSE(keys.empty());
    for (int c = 0; c < 10; ++c) {
      const int fd = hostile(port);
      std::vector<std::uint8_t> burst;
      for (std::uint32_t i = 1; i <= 200; ++i) {
        auto r = request(wire::Op::Get, i, keys[i % keys.size()]);
        burst.insert(burst.end(), r.begin(), r.end());
      }
      flood(fd, burst);
      held.push_back(fd);
    }
  }
  still_serves("replies never read");

  const auto peak_kib = status_kib(server.pid(), "VmHWM");
  report.push_back(fmt::format("peak RSS {} MiB", peak_kib / 1024));
  for (const auto& line : report) {
    UNSCOPED_INFO(line);
    std::fprintf(stderr, "hostile client: %s\n", line.c_str());
  }
#if COLLIE_TEST_MEASURES_RSS
  CHECK(peak_kib < 256 * 1024);
#else
  WARN("peak RSS not checked: sanitizers multiply memory (it was " << peak_kib / 1024 << " MiB)");
#endif
  for (const int fd : held)
    ::close(fd);
  server.signal(SIGTERM);
  const auto end = server.wait(30s);
  REQUIRE(end);
  CHECK(end->exit_code == 0);
}
