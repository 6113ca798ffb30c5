// One rank of the multi-process point-to-point tests (p2p_launch_test.cpp).
// `collie launch -n N -- collie_p2p_worker SCENARIO` runs it; each rank
// checks what it received element by element against values it computes
// itself, prints "rank R: SCENARIO ok" and exits 0, or prints what was wrong
// to stderr and exits 1.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <netdb.h>
#include <poll.h>
#include <span>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/collie.hpp>

namespace {

using Clock = std::chrono::steady_clock;

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The value of element i sent by rank `from`, as the receiver expects it.
template <class T>
T value(std::size_t i, int from) {
  if constexpr (std::is_same_v<T, collie::float16> || std::is_same_v<T, collie::bfloat16>) {
    return T(static_cast<float>(static_cast<int>(i % 1000) - 500) * 0.5f +
             static_cast<float>(from));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(static_cast<double>(i) * 0.25 - 1e3 + from);
  } else {
    return static_cast<T>(i * 2654435761u + static_cast<std::size_t>(from) * 97);
  }
}

template <class T>
bool same(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;  // bit for bit, NaN or not
}

template <class T>
std::vector<T> filled(std::size_t n, int from) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = value<T>(i, from);
  return v;
}

template <class T>
void check(const std::vector<T>& v, int from, const std::string& what) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!same(v[i], value<T>(i, from))) {
      throw std::runtime_error(fmt::format("{}: element {} of {} differs", what, i, v.size()));
    }
  }
}

// Every dtype up to just over 1 MiB; 64 MiB once (`big`): the transport
// moves bytes, and 8 x 64 MiB filled and checked under ThreadSanitizer was
// the suite's longest test.
template <class T>
void pingpong_one(collie::ProcessGroup& pg, const char* name, bool big = false) {
  std::vector<std::size_t> counts = {0, 1, 2, 3, 17, 4099, (std::size_t{1} << 20) / sizeof(T) + 1};
  if (big) counts.push_back((std::size_t{64} << 20) / sizeof(T));
  int tag = 0;
  for (std::size_t n : counts) {
    const std::string what = fmt::format("{} x {}", n, name);
    if (pg.rank() == 0) {
      auto out = filled<T>(n, 0);
      pg.send(std::span(out), 1, tag);
      std::vector<T> back(n);
      pg.recv(std::span(back), 1, tag);
      check(back, 1, what + " (reply)");
    } else {
      std::vector<T> in(n);
      pg.recv(std::span(in), 0, tag);
      check(in, 0, what);
      auto out = filled<T>(n, 1);
      pg.send(std::span(out), 0, tag);
    }
    ++tag;
  }
}

void pingpong(collie::ProcessGroup& pg) {
  expect(pg.size() == 2, "pingpong needs 2 ranks");
  pingpong_one<std::int8_t>(pg, "int8");
  pingpong_one<std::uint8_t>(pg, "uint8");
  pingpong_one<std::int32_t>(pg, "int32");
  pingpong_one<std::int64_t>(pg, "int64");
  pingpong_one<collie::float16>(pg, "float16");
  pingpong_one<collie::bfloat16>(pg, "bfloat16");
  pingpong_one<float>(pg, "float32");
  pingpong_one<double>(pg, "float64", true);
}

// Rank 0 sends 64 tags x 4 messages interleaved; rank 1 receives tags in a
// scrambled order, each tag's messages in order.
void tags(collie::ProcessGroup& pg) {
  constexpr int kTags = 64;
  constexpr int kEach = 4;
  if (pg.rank() == 0) {
    std::vector<std::vector<std::int32_t>> keep;
    std::vector<collie::Work> works;
    for (int k = 0; k < kEach; ++k) {
      for (int t = 0; t < kTags; ++t) {
        keep.push_back(filled<std::int32_t>(static_cast<std::size_t>(t * 50 + k), t * 10 + k));
        works.push_back(pg.isend(std::span(keep.back()), 1, t));
      }
    }
    for (auto& w : works)
      w.wait();
  } else {
    for (int i = 0; i < kTags; ++i) {
      const int t = (i * 37) % kTags;  // 37 is coprime with 64: a permutation
      for (int k = 0; k < kEach; ++k) {
        std::vector<std::int32_t> in(static_cast<std::size_t>(t * 50 + k));
        pg.recv(std::span(in), 0, t);
        check(in, t * 10 + k, fmt::format("tag {} message {}", t, k));
      }
    }
  }
}

// Both ranks send 64 MiB at once: blocking send then receive, then isend/irecv.
void bidirectional(collie::ProcessGroup& pg) {
  const std::size_t n = (std::size_t{64} << 20) / sizeof(float);
  const int peer = 1 - pg.rank();
  auto out = filled<float>(n, pg.rank());
  std::vector<float> in(n);
  pg.send(std::span(out), peer, 1);
  pg.recv(std::span(in), peer, 1);
  check(in, peer, "blocking exchange");
  std::fill(in.begin(), in.end(), 0.0f);
  auto s = pg.isend(std::span(out), peer, 2);
  auto r = pg.irecv(std::span(in), peer, 2);
  s.wait();
  r.wait();
  check(in, peer, "non-blocking exchange");
}

// Every rank sends its own data to every other rank.
void all_to_all(collie::ProcessGroup& pg) {
  const int n = pg.size();
  const int me = pg.rank();
  std::vector<std::vector<std::int64_t>> in(static_cast<std::size_t>(n));
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(n));
  std::vector<collie::Work> works;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    in[static_cast<std::size_t>(p)].resize(static_cast<std::size_t>(1000 + 100 * me));
    works.push_back(pg.irecv(std::span(in[static_cast<std::size_t>(p)]), p, 0));
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    out[static_cast<std::size_t>(p)] =
        filled<std::int64_t>(static_cast<std::size_t>(1000 + 100 * p), me * 1000 + p);
    works.push_back(pg.isend(std::span(out[static_cast<std::size_t>(p)]), p, 0));
  }
  for (auto& w : works)
    w.wait();
  for (int p = 0; p < n; ++p) {
    if (p != me)
      check(in[static_cast<std::size_t>(p)], p * 1000 + me, fmt::format("from rank {}", p));
  }
}

// Rank 1 dies half-way through sending 64 MiB; rank 0 reports what it sees.
void victim(collie::ProcessGroup& pg) {
  const std::size_t n = std::size_t{64} << 20;
  std::vector<std::uint8_t> buffer(n, 7);
  if (pg.rank() == 0) {
    auto r = pg.irecv(std::span(buffer), 1, 0);
    std::printf("receiving\n");
    std::fflush(stdout);
    const auto start = Clock::now();
    try {
      r.wait(std::chrono::seconds(60));
    } catch (const collie::ConnectionError& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      std::printf("ConnectionError after %lld ms: %s\n", static_cast<long long>(ms.count()),
                  e.what());
      std::fflush(stdout);
      return;
    }
    throw std::runtime_error("the receive completed although the sender died");
  }
  // Hand the kernel the first few MiB, then die without closing anything
  // (the Work is kept: destroying it would wait for the send).
  auto sending = pg.isend(std::span(buffer), 0, 0);
  std::printf("sending\n");
  std::fflush(stdout);
  std::raise(SIGKILL);
}

// Rank 1 plays a stranger at rank 0's port (junk bytes), then the two ranks
// show they are unharmed.
void stranger(collie::ProcessGroup& pg) {
  if (pg.rank() == 1) {
    const std::string address = pg.store().get("world/addr/0");
    const auto where = collie::split_host_port(address);
    expect(where.has_value(), "rank 0's address " + address);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    expect(
        getaddrinfo(where->host.c_str(), std::to_string(where->port).c_str(), &hints, &found) == 0,
        "resolve " + address);
    const int fd = socket(found->ai_family, SOCK_STREAM, 0);
    expect(connect(fd, found->ai_addr, found->ai_addrlen) == 0, "connect to " + address);
    freeaddrinfo(found);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    expect(send(fd, junk, sizeof(junk), MSG_NOSIGNAL) > 0, "send junk");
    // Rank 0 sends its challenge, then closes on the junk.
    char sink[256];
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    bool closed = false;
    while (!closed && Clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) closed = recv(fd, sink, sizeof(sink), 0) <= 0;
    }
    close(fd);
    expect(closed, "rank 0 did not close the stranger's connection");
  }
  std::vector<double> v(1000);
  if (pg.rank() == 1) {
    v = filled<double>(v.size(), 1);
    pg.send(std::span(v), 0, 3);
  } else {
    pg.recv(std::span(v), 1, 3);
    check(v, 1, "after the stranger");
  }
}

// For a stranger outside the job (the test): each rank says where it
// listens (rank 0 also the group's id and the store's port), waits until the
// file $COLLIE_TEST_GO_FILE exists (the stranger has tried its forgeries),
// then the ranks exchange messages to show they are unharmed.
void forged(collie::ProcessGroup& pg) {
  const std::string address = pg.store().get(fmt::format("world/addr/{}", pg.rank()));
  if (pg.rank() == 0) {
    const char* port = std::getenv("MASTER_PORT");
    std::printf("group %s store %s\n", pg.store().get("world/id").c_str(), port ? port : "?");
  }
  std::printf("listening %d %s\n", pg.rank(), address.c_str());
  std::fflush(stdout);
  const char* go = std::getenv("COLLIE_TEST_GO_FILE");
  expect(go != nullptr, "COLLIE_TEST_GO_FILE is set");
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  auto pause = std::chrono::milliseconds(1);
  while (access(go, F_OK) != 0) {
    expect(Clock::now() < deadline, "the go file appeared within 120 s");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  all_to_all(pg);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(
        stderr,
        "usage: collie_p2p_worker pingpong|tags|bidirectional|all_to_all|victim|stranger|forged\n");
    return 2;
  }
  const std::string scenario = argv[1];
  const std::vector<std::pair<std::string, std::function<void(collie::ProcessGroup&)>>> scenarios =
      {{"pingpong", pingpong},     {"tags", tags},     {"bidirectional", bidirectional},
       {"all_to_all", all_to_all}, {"victim", victim}, {"stranger", stranger},
       {"forged", forged}};
  const auto it = std::find_if(scenarios.begin(), scenarios.end(),
                               [&](const auto& s) { return s.first == scenario; });
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  try {
    auto pg = collie::init();
    it->second(pg);
    std::printf("rank %d: %s ok\n", pg.rank(), scenario.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
}
