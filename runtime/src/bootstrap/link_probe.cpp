// The link between hosts, measured at init (link_probe.hpp).
#include "bootstrap/link_probe.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/keys.hpp>
#include <collie/log.hpp>

#include "group/job_store.hpp"
#include "group/group.hpp"
#include "group/tags.hpp"

namespace collie {

namespace {

using Clock = std::chrono::steady_clock;

// The probe's messages (tags.hpp: link_probe_tag).
enum Kind : unsigned { kPing = 0, kPong = 1, kSize = 2, kBulk = 3, kAck = 4 };

constexpr int kPings = 9;
constexpr std::size_t kFirstBytes = std::size_t{64} << 10;
constexpr std::size_t kMostBytes = std::size_t{16} << 20;
constexpr double kBusyTrip = 100e-6;  // seconds: a round trip longer than this, the machine is busy
constexpr double kLongEnough = 8e-3;  // seconds: a transfer this long (after one a quarter as long) ends the sweep

struct Probe {
  transport::Transport& t;
  int peer;
  std::chrono::milliseconds timeout;
  void send(unsigned kind, const void* data, std::size_t bytes) {
    t.wait(t.isend(peer, link_probe_tag(kind), data, bytes), timeout);
  }
  void recv(unsigned kind, void* data, std::size_t bytes) {
    t.wait(t.irecv(peer, link_probe_tag(kind), data, bytes), timeout);
  }
  void send_word(unsigned kind, std::uint64_t word) { send(kind, &word, sizeof word); }
  std::uint64_t recv_word(unsigned kind) {
    std::uint64_t word = 0;
    recv(kind, &word, sizeof word);
    return word;
  }
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What the prober found.
struct Measured {
  double gbits = 0;       // with `streams` connections
  double latency_us = 0;
  int streams = 1;
  double one_flow_gbits = 0;  // one connection alone, where more were measured
};

// The rate of two transfers of b1 < b2 bytes timed t1 and t2, bytes per
// second: their difference cancels the round trip and the start; a noisy
// pair (the larger no slower) falls back to the larger alone, and the
// difference never reads more than 1.5 times the larger's own rate (a
// pause in the smaller, or a bucket refilled during a pause before the
// larger, once read 105 Gbit/s on 0.4).
double rate_of(std::size_t b1, double t1, std::size_t b2, double t2) {
  const double alone = static_cast<double>(b2) / t2;
  return t2 > t1 ? std::min(static_cast<double>(b2 - b1) / (t2 - t1), 1.5 * alone) : alone;
}

// The prober's side. `choose_streams` (COLLIE_STREAMS=auto): one
// connection's rate, then 4's together (the transport's lanes,
// tcp/lanes.hpp), and where those paid 8's, each kept only where it beats
// the fewer by kStreamsPay.
constexpr double kStreamsPay = 1.2;
Measured probe(Probe& p, bool choose_streams) {
  std::array<double, kPings> trips{};
  for (auto& trip : trips) {
    const auto start = Clock::now();
    p.send_word(kPing, 0);
    p.recv_word(kPong);
    trip = seconds_since(start);
  }
  std::nth_element(trips.begin(), trips.begin() + kPings / 2, trips.end());
  const double latency = trips[kPings / 2] / 2;
  std::vector<std::byte> data(kMostBytes);
  // `bytes` to the echo and its acknowledgement: seconds.
  const auto transfer = [&](std::size_t bytes) {
    const auto start = Clock::now();
    p.send_word(kSize, bytes);
    p.send(kBulk, data.data(), bytes);
    p.recv_word(kAck);
    return seconds_since(start);
  };
  // Transfers from `first` bytes, 4 times more each, until the last two
  // are both past a shaper's burst (a token bucket lets its first bytes by
  // at once): the last kLongEnough, the one before at least a quarter as
  // long. Lanes move more at a time than one flow, so their sweep goes on
  // from where one flow's ended until it too is long enough.
  struct Pair {
    std::size_t b1, b2;
    double t1, t2;
  };
  const auto sweep = [&](std::size_t first) {
    std::vector<std::pair<std::size_t, double>> points;  // bytes, seconds
    for (std::size_t bytes = first; bytes <= kMostBytes; bytes *= 4) {
      points.emplace_back(bytes, transfer(bytes));
      if (points.size() >= 2 && points.back().second >= kLongEnough &&
          points[points.size() - 2].second >= kLongEnough / 4)
        break;
    }
    for (const auto& [b, t] : points)
      collie::log().debug("link probe: {} bytes in {:.3f} ms", b, t * 1e3);
    return Pair{points[points.size() - 2].first, points.back().first,
                points[points.size() - 2].second, points.back().second};
  };
  const auto [b1, b2, first_t1, first_t2] = sweep(kFirstBytes);
  double t1 = first_t1, t2 = first_t2;
  // On a busy machine (round trips of more than kBusyTrip) the last two
  // once more, each the faster of its two times: a pause only adds to a
  // transfer, and one in either moves the difference. (A 400 Mbit/s link
  // read 0.56 and 0.62 Gbit/s with tests running beside it, round trips of
  // 0.2-1 ms; beside six spinning processes 0.17-0.67 once, 0.34-0.41
  // timed twice.) A quiet machine is spared the time.
  const bool busy = 2 * latency > kBusyTrip;
  if (busy) {
    t1 = std::min(t1, transfer(b1));
    t2 = std::min(t2, transfer(b2));
  }
  Measured m{rate_of(b1, t1, b2, t2) * 8 / 1e9, latency * 1e6, 1, 0};
  if (choose_streams) {
    const double one = m.gbits;
    for (const int streams : {4, 8}) {
      if (streams == 8 && m.streams != 4) break;  // 8 only where 4 paid
      p.t.set_streams(streams);
      transfer(kFirstBytes * 4);  // opens the lanes (at the first large message)
      // (A 400 Mbit/s link once read 0.93 Gbit/s on 4 lanes timed at one
      // flow's sizes, short enough for the bucket's burst to count.)
      auto [l1, l2, s1, s2] = sweep(std::max(b1, kFirstBytes * 4));
      if (busy) {
        s1 = std::min(s1, transfer(l1));
        s2 = std::min(s2, transfer(l2));
      }
      const double gbits = rate_of(l1, s1, l2, s2) * 8 / 1e9;
      collie::log().debug("link probe: {} streams: {:.3g} Gbit/s", streams, gbits);
      if (gbits > kStreamsPay * m.gbits) {
        m.gbits = gbits;
        m.streams = streams;
      }
    }
    p.t.set_streams(m.streams);
    if (m.streams > 1) m.one_flow_gbits = one;
  }
  p.send_word(kSize, 0);
  return m;
}

// The echo's side.
void echo(Probe& p) {
  for (int i = 0; i < kPings; ++i) {
    p.recv_word(kPing);
    p.send_word(kPong, 0);
  }
  std::vector<std::byte> data;
  while (const std::uint64_t bytes = p.recv_word(kSize)) {
    if (bytes > kMostBytes)
      throw ProtocolError(fmt::format("the link probe's peer announced {} bytes", bytes));
    data.resize(bytes);
    p.recv(kBulk, data.data(), bytes);
    p.send_word(kAck, 0);
  }
}

}  // namespace

std::string describe(const HostLink& link) {
  const std::string streams =
      link.streams > 1
          ? fmt::format(", {} streams a pair{}", link.streams,
                        link.one_flow_gbits > 0
                            ? fmt::format(" (one: {:.3g} Gbit/s)", link.one_flow_gbits)
                            : std::string())
          : std::string();
  return fmt::format("{:.3g} Gbit/s, {:.0f} us{} ({})", link.gbits, link.latency_us, streams,
                     link.source);
}

HostLink agree_on_host_link(World& world) {
  const auto& config = world.config;
  HostLink link{config.host_link_gbits, config.host_link_latency_us,
                config.host_link_given ? "COLLIE_HOST_LINK" : "COLLIE_HOST_LINK's default", 1, 0};
  if (config.host_link_given || !world.hosts || world.hosts->hosts() < 2) return link;
  const int prober = world.hosts->ranks_on(0).front();
  const int peer = world.hosts->ranks_on(1).front();
  auto& store = world.job->store();
  const int self = config.rank;
  const auto start = Clock::now();
  if (self == prober || self == peer) {
    Probe p{*world.transport, self == prober ? peer : prober, config.timeout};
    if (self == peer) {
      echo(p);
    } else {
      std::string text;
      try {
        const auto m = probe(p, config.transport.streams == 0);
        text = fmt::format("{} {} {} {} {} {} {}", m.gbits, m.latency_us, prober, peer,
                           seconds_since(start) * 1e3, m.streams, m.one_flow_gbits);
      } catch (const std::exception& e) {
        // Said to everyone, so that no rank waits its timeout for a result.
        store.set(keys::kHostLink, fmt::format("failed {}", e.what()));
        throw;
      }
      store.set(keys::kHostLink, text);
    }
  }
  std::string text;
  // A wait that timed out or lost the store says so in its type, as
  // init's other waits do, and names whom it waited for.
  const auto context = [&](const std::exception& e) {
    return fmt::format(
        "rank {}: waiting for rank {}'s measure of the link between hosts (with rank {}; '{}' in "
        "the store): {}; has rank {} exited? (COLLIE_HOST_LINK=GBITS,LATENCY_US skips it)",
        self, prober, peer, keys::kHostLink, e.what(), prober);
  };
  try {
    text = store.get(keys::kHostLink);
  } catch (const TimeoutError& e) {
    throw TimeoutError(context(e));
  } catch (const ConnectionError& e) {
    throw ConnectionError(context(e));
  }
  if (text.starts_with("failed ")) {
    throw Error(fmt::format(
        "rank {}: rank {} could not measure the link between hosts with rank {}: {} "
        "(COLLIE_HOST_LINK=GBITS,LATENCY_US skips the measure)",
        self, prober, peer, text.substr(7)));
  }
  std::istringstream in(text);
  double gbits = 0, latency = 0;
  int a = -1, b = -1;
  double ms = 0, one_flow = 0;
  int streams = 0;
  if (!(in >> gbits >> latency >> a >> b >> ms >> streams >> one_flow) || gbits <= 0 ||
      latency < 0 || streams < 1)
    throw Error(fmt::format(
        "rank {}: the store's '{}' holds '{}', not the link's \"<gbit/s> <latency us> <prober> "
        "<echo> <ms> <streams> <one flow's gbit/s>\": is another program using this store?",
        self, keys::kHostLink, text));
  link = {gbits, latency,
          fmt::format("measured between rank {} and rank {} in {:.0f} ms", a, b, ms), streams,
          one_flow};
  if (self == prober) collie::log().info("the link between hosts: {}", describe(link));
  return link;
}

}  // namespace collie
