// What the transport tests in one process share: a cluster of n
// transports of one group (TCP, or shared memory between all of them),
// each with its own store client, driven by a thread per rank; bytes that
// say who sent them; blocking send and receive.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "support/catch.hpp"

#include <collie/crypto.hpp>
#include <collie/transport/shm.hpp>
#include <collie/transport/tcp.hpp>

#include "support/store_fixture.hpp"
#include "support/thread_ranks.hpp"

namespace collie::test {

using namespace std::chrono_literals;
using Mesh = collie::transport::TcpTransport;
using MeshOptions = collie::transport::TransportOptions;
using Transport = collie::transport::Transport;
using collie::transport::RequestPtr;

// The backends every contract test runs on.
#define BACKENDS GENERATE(as<std::string>{}, "tcp", "shm")

// n transports of one group (TCP, or shared memory between all of them),
// each with its own store client.
struct Cluster {
  explicit Cluster(int n, const std::function<void(MeshOptions&)>& tweak = {},
                   const std::string& backend = "tcp") {
    const auto id = collie::crypto::random_u64();
    std::vector<int> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    for (int r = 0; r < n; ++r) {
      MeshOptions o;
      o.rank = r;
      o.world_size = n;
      o.group_id = id;
      o.timeout = 30s;
      if (tweak) tweak(o);
      if (backend == "shm")
        meshes.push_back(
            std::make_shared<collie::transport::ShmTransport>(fixture.shared_client(), o, all));
      else
        meshes.push_back(std::make_shared<Mesh>(fixture.shared_client(), o));
    }
  }
  Cluster(int n, const std::string& backend) : Cluster(n, {}, backend) {}
  Transport& operator[](int r) { return *meshes[static_cast<std::size_t>(r)]; }
  // The TCP backend's own face (for the TCP-only tests).
  Mesh& tcp(int r) { return dynamic_cast<Mesh&>(*meshes[static_cast<std::size_t>(r)]); }
  int size() const { return static_cast<int>(meshes.size()); }

  // Runs body(rank) on one thread per rank; rethrows the first error here,
  // on the test's thread, where Catch may report it.
  void run(const std::function<void(int)>& body) {
    std::vector<std::future<void>> done;
    for (int r = 0; r < size(); ++r)
      done.push_back(std::async(std::launch::async, body, r));
    for (auto& f : done)
      f.get();
  }

  collie::test::StoreFixture fixture;
  std::vector<std::shared_ptr<Transport>> meshes;
};

// Bytes that depend on who sent them, the tag and the position. Byte i
// depends on i mod 251 alone: the first 251 are computed, the rest copied
// from them (a byte loop under ThreadSanitizer instruments every byte;
// memcpy is checked once per call).
inline std::vector<std::uint8_t> pattern(std::size_t n, int from, std::uint64_t tag) {
  std::vector<std::uint8_t> v(n);
  const std::size_t period = std::min<std::size_t>(n, 251);
  for (std::size_t i = 0; i < period; ++i)
    v[i] =
        static_cast<std::uint8_t>((i * 131 + static_cast<std::size_t>(from) * 7 + tag * 13) % 251);
  for (std::size_t done = period; done < n;) {
    const std::size_t more = std::min(done - done % period, n - done);
    std::memcpy(v.data() + done, v.data(), more);
    done += more;
  }
  return v;
}

inline void send(Transport& m, int peer, std::uint64_t tag, const std::vector<std::uint8_t>& v) {
  m.wait(m.isend(peer, tag, v.data(), v.size()));
}

// The port a mesh listens on.
inline std::uint16_t port_of(const Mesh& m) {
  const std::string address = m.address();
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

inline std::vector<std::uint8_t> recv(Transport& m, int peer, std::uint64_t tag, std::size_t n) {
  std::vector<std::uint8_t> v(n, 0xEE);
  m.wait(m.irecv(peer, tag, v.data(), v.size()));
  return v;
}

// Ranks 0 and 1 of `c` send each other a message of every size in turn (0
// first, 1 answering), each checked whole (tag: the size).
inline void ping_pong(Cluster& c, const std::vector<std::size_t>& sizes) {
  c.run([&](int r) {
    auto& m = c[r];
    for (std::size_t n : sizes) {
      if (r == 0) {
        send(m, 1, n, pattern(n, 0, n));
        expect(recv(m, 1, n, n) == pattern(n, 1, n), "reply differs at size " + std::to_string(n));
      } else if (r == 1) {
        expect(recv(m, 0, n, n) == pattern(n, 0, n),
               "message differs at size " + std::to_string(n));
        send(m, 0, n, pattern(n, 1, n));
      }
    }
  });
}

}  // namespace collie::test
