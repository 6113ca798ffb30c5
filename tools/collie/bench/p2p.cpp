// `collie bench p2p`: one-way latency (ping-pong) and bandwidth between two
// ranks, next to the same measurements over raw TCP sockets between the same
// two processes, so the transport's overhead is read off directly.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <span>
#include <string>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/error.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>
#include <collie/store/server.hpp>
#include <collie/version.hpp>

#include "job.hpp"
#include "commands.hpp"
#include "json_out.hpp"
#include "keys.hpp"

namespace collie::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct P2pArgs {
  std::size_t latency_bytes = 8;
  int latency_iters = 20000;
  int latency_warmup = 2000;
  std::size_t bandwidth_bytes = std::size_t{64} << 20;
  int bandwidth_iters = 20;
  int bandwidth_warmup = 2;
  bool baseline = true;
  bool json = false;
  std::string device = "host";  // or "cuda": collie's rows also on device buffers
};

struct Latency {
  std::string name;
  double median_us = 0;
  double mean_us = 0;
  double p99_us = 0;
};

struct Bandwidth {
  std::string name;
  double gb_per_s = 0;
};

Latency summarize(std::string name, std::vector<double>& round_trips_us) {
  std::sort(round_trips_us.begin(), round_trips_us.end());
  Latency l;
  l.name = std::move(name);
  const auto n = round_trips_us.size();
  double sum = 0;
  for (double v : round_trips_us)
    sum += v;
  l.median_us = round_trips_us[n / 2] / 2;
  l.mean_us = sum / static_cast<double>(n) / 2;
  l.p99_us = round_trips_us[std::min(n - 1, n * 99 / 100)] / 2;
  return l;
}

double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// ---- collie ----

// `bytes` bytes of `fill`, in host memory or (`device`) CUDA device memory.
class Buffer {
 public:
  Buffer(std::size_t bytes, std::uint8_t fill, bool device) : host_(bytes, fill), span_(host_) {
    if (!device) return;
    on_device_ = cuda::DeviceBuffer(bytes);
    on_device_.upload(host_.data(), bytes);
    span_ = std::span(static_cast<std::uint8_t*>(on_device_.data()), bytes);
  }
  std::span<std::uint8_t> span() const { return span_; }

 private:
  std::vector<std::uint8_t> host_;
  cuda::DeviceBuffer on_device_;
  std::span<std::uint8_t> span_;
};

// `device`: the buffers in CUDA device memory (staged by collie).
Latency collie_latency(ProcessGroup& pg, const P2pArgs& a, bool device) {
  const Buffer memory(a.latency_bytes, 1, device);
  const auto buffer = memory.span();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(a.latency_iters));
  for (int i = 0; i < a.latency_warmup + a.latency_iters; ++i) {
    const auto start = Clock::now();
    if (pg.rank() == 0) {
      pg.send(std::span(buffer), 1);
      pg.recv(std::span(buffer), 1);
    } else {
      pg.recv(std::span(buffer), 0);
      pg.send(std::span(buffer), 0);
    }
    if (i >= a.latency_warmup) samples.push_back(since_us(start));
  }
  return summarize(device ? "collie, cuda buffers" : "collie send/recv", samples);
}

Bandwidth collie_bandwidth(ProcessGroup& pg, const P2pArgs& a, bool device) {
  const Buffer memory(a.bandwidth_bytes, 2, device);
  const auto buffer = memory.span();
  std::uint8_t ack = 0;
  Clock::time_point start;
  for (int i = 0; i < a.bandwidth_warmup + a.bandwidth_iters; ++i) {
    if (i == a.bandwidth_warmup) {
      if (pg.rank() == 0)
        pg.recv(&ack, 1, 1, 1);  // both ranks start together
      else
        pg.send(&ack, 1, 0, 1);
      start = Clock::now();
    }
    if (pg.rank() == 0)
      pg.send(std::span(buffer), 1);
    else
      pg.recv(std::span(buffer), 0);
  }
  if (pg.rank() == 0)
    pg.recv(&ack, 1, 1, 1);  // the last byte has arrived
  else
    pg.send(&ack, 1, 0, 1);
  const double seconds = since_us(start) / 1e6;
  return {device ? "collie, cuda buffers" : "collie send/recv",
          static_cast<double>(a.bandwidth_bytes) * a.bandwidth_iters / seconds / 1e9};
}

// ---- raw TCP between the same two processes ----

void send_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(fmt::format("raw TCP baseline: send failed: {}", std::strerror(errno)));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void recv_all(int fd, void* data, std::size_t n, bool busy) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, busy ? MSG_DONTWAIT : 0);
    if (r < 0 && (errno == EINTR || (busy && (errno == EAGAIN || errno == EWOULDBLOCK)))) continue;
    if (r <= 0) throw Error("raw TCP baseline: the peer closed the connection");
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

// Rank 0 listens on the host its transport advertises and publishes
// host:port; rank 1 connects. Rank 0 waits for it no longer than the job's timeout.
int raw_connection(ProcessGroup& pg) {
  auto resolve = [](const HostPort& where, int flags) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(where.port);
    if (const int rc = getaddrinfo(where.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      throw Error(fmt::format("raw TCP baseline: cannot resolve {}: {}",
                              join_host_port(where.host, where.port), gai_strerror(rc)));
    }
    return std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>(found, freeaddrinfo);
  };
  int fd = -1;
  if (pg.rank() == 0) {
    const HostPort own{pg.advertised_host(), 0};
    const auto found = resolve(own, AI_PASSIVE | AI_NUMERICHOST);
    const int listener = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::bind(listener, found->ai_addr, found->ai_addrlen) != 0 || ::listen(listener, 1) != 0) {
      const int e = errno;
      ::close(listener);
      throw Error(
          fmt::format("raw TCP baseline: cannot listen on {}: {}", own.host, std::strerror(e)));
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(listener, reinterpret_cast<sockaddr*>(&ss), &len);
    char port[NI_MAXSERV] = {};
    getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, nullptr, 0, port, sizeof(port),
                NI_NUMERICSERV);
    pg.store().set(keys::kBenchRawAddress,
                   join_host_port(own.host, static_cast<std::uint16_t>(std::atoi(port))));
    pollfd ready{listener, POLLIN, 0};
    const auto ms = static_cast<int>(std::min<long long>(pg.config().timeout.count(), 1 << 30));
    if (::poll(&ready, 1, ms) == 1) fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(listener);
    if (fd < 0) throw Error("raw TCP baseline: rank 1 did not connect within the job's timeout");
  } else {
    const std::string text = pg.store().get(keys::kBenchRawAddress);
    const auto where = split_host_port(text);
    if (!where) throw Error(fmt::format("raw TCP baseline: rank 0 published '{}'", text));
    const auto found = resolve(*where, 0);
    fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
      const int e = errno;
      ::close(fd);
      throw Error(fmt::format("raw TCP baseline: cannot connect to rank 0 at {}: {}", text,
                              std::strerror(e)));
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

Latency raw_latency(int fd, int rank, const P2pArgs& a, bool busy) {
  std::vector<std::uint8_t> buffer(std::max<std::size_t>(a.latency_bytes, 1), 1);
  const std::size_t n = a.latency_bytes;
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(a.latency_iters));
  for (int i = 0; i < a.latency_warmup + a.latency_iters; ++i) {
    const auto start = Clock::now();
    if (rank == 0) {
      send_all(fd, buffer.data(), n);
      recv_all(fd, buffer.data(), n, busy);
    } else {
      recv_all(fd, buffer.data(), n, busy);
      send_all(fd, buffer.data(), n);
    }
    if (i >= a.latency_warmup) samples.push_back(since_us(start));
  }
  return summarize(busy ? "raw TCP, busy polling" : "raw TCP, blocking", samples);
}

Bandwidth raw_bandwidth(int fd, int rank, const P2pArgs& a) {
  std::vector<std::uint8_t> buffer(a.bandwidth_bytes, 2);
  std::uint8_t ack = 0;
  Clock::time_point start;
  for (int i = 0; i < a.bandwidth_warmup + a.bandwidth_iters; ++i) {
    if (i == a.bandwidth_warmup) {
      if (rank == 0)
        recv_all(fd, &ack, 1, false);
      else
        send_all(fd, &ack, 1);
      start = Clock::now();
    }
    if (rank == 0)
      send_all(fd, buffer.data(), buffer.size());
    else
      recv_all(fd, buffer.data(), buffer.size(), false);
  }
  if (rank == 0)
    recv_all(fd, &ack, 1, false);
  else
    send_all(fd, &ack, 1);
  const double seconds = since_us(start) / 1e6;
  return {"raw TCP", static_cast<double>(a.bandwidth_bytes) * a.bandwidth_iters / seconds / 1e9};
}

void print(const ProcessGroup& pg, const P2pArgs& a, const std::vector<Latency>& latencies,
           const std::vector<Bandwidth>& bandwidths) {
  const std::string host = host_name();
  if (a.json) {
    nlohmann::ordered_json doc = {{"collie", collie::version()},
                                  {"host", host},
                                  {"ranks", pg.size()},
                                  {"transport", pg.describe_transport()},
                                  {"latency_bytes", a.latency_bytes},
                                  {"latency_iters", a.latency_iters},
                                  {"bandwidth_bytes", a.bandwidth_bytes},
                                  {"bandwidth_iters", a.bandwidth_iters}};
    auto& lat = doc["latency_one_way_us"] = nlohmann::ordered_json::array();
    for (const auto& l : latencies) {
      lat.push_back({{"name", l.name},
                     {"median", rounded(l.median_us, 3)},
                     {"mean", rounded(l.mean_us, 3)},
                     {"p99", rounded(l.p99_us, 3)}});
    }
    auto& bw = doc["bandwidth_gb_per_s"] = nlohmann::ordered_json::array();
    for (const auto& b : bandwidths)
      bw.push_back({{"name", b.name}, {"gb_per_s", rounded(b.gb_per_s, 3)}});
    std::fputs(dump_records(doc).c_str(), stdout);
    return;
  }
  std::printf("# collie %s bench p2p: ranks 0 and 1 of %d on %s, transport %s\n", collie::version(),
              pg.size(), host.c_str(), pg.describe_transport().c_str());
  std::printf(
      "# latency: %zu B ping-pong, %d iterations after %d warm-up; one-way = round trip / 2\n",
      a.latency_bytes, a.latency_iters, a.latency_warmup);
  std::printf("%-26s %12s %12s %12s\n", "#", "median(us)", "mean(us)", "p99(us)");
  for (const auto& l : latencies)
    std::printf("%-26s %12.2f %12.2f %12.2f\n", l.name.c_str(), l.median_us, l.mean_us, l.p99_us);
  std::printf("# bandwidth: %zu B messages rank 0 -> rank 1, %d iterations after %d warm-up\n",
              a.bandwidth_bytes, a.bandwidth_iters, a.bandwidth_warmup);
  std::printf("%-26s %12s\n", "#", "GB/s");
  for (const auto& b : bandwidths)
    std::printf("%-26s %12.3f\n", b.name.c_str(), b.gb_per_s);
  std::fflush(stdout);
}

// One rank's part; returns the exit code.
int run_rank(const P2pArgs& a) {
  try {
    auto pg = init();
    if (pg.size() < 2)
      throw Error("collie bench p2p needs at least 2 ranks (ranks 0 and 1 take part)");
    // (Here, in the rank: CUDA must not be started before a fork.)
    if (a.device == "cuda" && cuda::device_count() == 0) {
      if (pg.rank() != 0) return 1;  // rank 0 says why
      throw Error("--device cuda: " + cuda::status());
    }
    std::vector<Latency> latencies;
    std::vector<Bandwidth> bandwidths;
    if (pg.rank() <= 1) {
      latencies.push_back(collie_latency(pg, a, false));
      if (a.device == "cuda") latencies.push_back(collie_latency(pg, a, true));
      bandwidths.push_back(collie_bandwidth(pg, a, false));
      if (a.device == "cuda") bandwidths.push_back(collie_bandwidth(pg, a, true));
      if (a.baseline) {
        const int fd = raw_connection(pg);
        latencies.push_back(raw_latency(fd, pg.rank(), a, false));
        latencies.push_back(raw_latency(fd, pg.rank(), a, true));
        bandwidths.push_back(raw_bandwidth(fd, pg.rank(), a));
        ::close(fd);
      }
    }
    if (pg.rank() == 0) print(pg, a, latencies, bandwidths);
    pg.store().barrier(keys::kBenchDone, static_cast<std::uint32_t>(pg.size()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie bench p2p: %s\n", e.what());
    return 1;
  }
}

}  // namespace

void add_bench_p2p_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "p2p", "One-way latency and bandwidth between two ranks, next to raw TCP");
  auto args = std::make_shared<P2pArgs>();
  cmd->add_option("--latency-bytes", args->latency_bytes, "Message size of the ping-pong")
      ->capture_default_str();
  cmd->add_option("--latency-iters", args->latency_iters, "Timed round trips")
      ->capture_default_str();
  cmd->add_option("--latency-warmup", args->latency_warmup, "Untimed round trips first")
      ->capture_default_str();
  cmd->add_option("--bandwidth-bytes", args->bandwidth_bytes, "Message size of the bandwidth test")
      ->capture_default_str();
  cmd->add_option("--bandwidth-iters", args->bandwidth_iters, "Timed messages")
      ->capture_default_str();
  cmd->add_option("--bandwidth-warmup", args->bandwidth_warmup, "Untimed messages first")
      ->capture_default_str();
  cmd->add_flag("!--no-baseline", args->baseline, "Skip the raw TCP measurements");
  cmd->add_flag("--json", args->json, "Print the results as JSON");
  cmd->add_option("--device", args->device,
                  "host, or cuda: also measure collie on CUDA device buffers (staged through "
                  "pinned host memory), next to host buffers")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  cmd->footer(
      "Ranks 0 and 1 take part; others wait. Inside a job (collie launch, srun, mpirun)\n"
      "it uses the job's ranks; on its own it forks a second rank and hosts the store on\n"
      "a free loopback port.\n"
      "latency: rank 0 sends, rank 1 sends back; one-way = round trip / 2, over the\n"
      "  timed round trips (median, mean, 99th percentile).\n"
      "bandwidth: rank 0 sends --bandwidth-iters messages back to back, rank 1 receives\n"
      "  them into one buffer and answers with one byte; GB/s = 1e9 bytes per second.\n"
      "raw TCP: the same two processes over one plain socket (TCP_NODELAY), blocking\n"
      "  reads, and for latency also non-blocking reads in a busy loop.");
  cmd->callback([args] {
    if (args->device == "cuda" && !cuda::built_in())
      throw Error("--device cuda: " + cuda::status());
    const int rc = inside_a_job()
                       ? run_rank(*args)
                       : run_standalone(2, place_ranks(Binding::Auto, 2),
                                        [&] { return run_rank(*args); });
    if (rc != 0) throw Exit{rc};
  });
}

}  // namespace collie::cli
