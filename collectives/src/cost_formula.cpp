// The cost model in closed form, for the algorithms whose replay grows as
// the square of the world (cost.hpp, formula_seconds()).
//
// The replay's step clock (cost.cpp) prices a message as its sender's link
// (delta + beta b), the latency (alpha), and its receiver's link (delta, and
// gamma b where it reduces): a hop. Between hosts the host's link carries
// the bytes (host_beta b for each message of the host's ranks that crosses
// in the step) and host_alpha is the latency. Where every rank steps
// together (the two_level phases), a phase of k steps costs k hops. Along a
// ring or a chain a step waits for the previous rank's step, and the longest
// path through them goes hop by hop around the ring: 2 (n - 1) hops of the
// ring's average for all_reduce, or along the chain and then, for each
// further piece, once more over its slowest link.
#include <algorithm>
#include <cmath>

#include <collie/collectives/cost.hpp>
#include <collie/collectives/hosts.hpp>
#include <collie/error.hpp>

#include <fmt/format.h>

namespace collie::collectives {

namespace {

struct Formula {
  const CostModel& m;
  // For the crowded bound: one rank's CPU seconds, on average.
  double work = 0;
  // CPU seconds per byte moved that misses the cache (crowded TCP on one
  // host, cost.hpp): a ring comes back to each byte after the whole buffer.
  double cache_miss = 0;

  // One step in which a rank sends `messages` messages of `b` bytes and
  // receives as many, `shared` of its host's ranks crossing to another
  // host with as many each (0: within the host).
  double hop(double messages, double b, bool reduce, double shared = 0) const {
    const double reduced = reduce ? messages * m.gamma * b : 0;
    if (shared <= 0)
      return messages * (m.delta + m.beta * b) + m.alpha + m.delta + reduced;
    // The host's link carries every crossing message of the step; while
    // it does, the latency of each passes.
    const double link = shared * messages * m.host_beta * b;
    const double one = messages * m.host_beta * b + m.host_alpha;
    return messages * m.delta + std::max(link, one) + m.delta + reduced;
  }

  // What a message adds where it waits behind the one before it on the
  // receiving link (no latency: it overlaps), within a host or across.
  double stay(double b, bool reduce, bool across) const {
    return (across ? m.host_beta : m.beta) * b + m.delta + (reduce ? m.gamma * b : 0);
  }

  // A rank's work for `steps` steps of `messages` sends and as many
  // receives of `b` bytes each (cost.hpp's crowded bound); `across`: they
  // cross to another host on `fraction` of the ranks.
  void count(double steps, double messages, double b, bool reduce, double across = 0) {
    const double segment = static_cast<double>(std::max<std::size_t>(1, m.segment_bytes));
    const double segments = std::max(1.0, std::ceil(b / segment));
    const double both = 2 * steps * messages;
    work += both * (segments * m.work_per_segment + b * m.work_per_byte) +
            both * across * segments * m.host_work_per_message + both * b * cache_miss +
            (reduce ? steps * messages * b * m.gamma : 0);
  }
};

// The links of a ring or chain in ring order: how many cross hosts.
int crossings(const Shape& shape, int first, int links) {
  if (!shape.hosts || shape.hosts->hosts() < 2) return 0;
  const auto& h = *shape.hosts;
  const auto& order = h.ring_order();
  const int n = shape.world;
  int x = 0;
  for (int i = 0; i < links; ++i) {
    const int a = order[static_cast<std::size_t>(wrap(first + i, n))];
    const int b = order[static_cast<std::size_t>(wrap(first + i + 1, n))];
    x += h.host_of(a) != h.host_of(b);
  }
  return x;
}

// Ring all_reduce, all_gather, reduce_scatter: `rounds` passes of n - 1
// steps each sending b bytes to the next rank (reducing in the first
// `reducing` passes), `chunks` of the n carrying any. Each chunk goes
// around the ring, so a pass costs n - 1 of its average hops, or, where its
// slowest link is the bottleneck, n - 1 times what a message waits there.
double ring(Formula& f, const Shape& shape, double b, double chunks, int rounds, int reducing) {
  const int n = shape.world;
  const int x = crossings(shape, 0, n);
  double seconds = 0;
  for (int k = 0; k < rounds; ++k) {
    const bool reduce = k < reducing;
    const double average = ((n - x) * f.hop(1, b, reduce) + x * f.hop(1, b, reduce, 1)) / n;
    seconds += (n - 1) * std::max(average, f.stay(b, reduce, x > 0));
    f.count((n - 1) * chunks / n, 1, b, reduce, static_cast<double>(x) / n);
  }
  return seconds;
}

// The pipelined chain of broadcast and reduce: `pieces` pieces along n - 1
// links from the root.
double chain(Formula& f, const Shape& shape, double bytes, bool reduce) {
  const int n = shape.world;
  const double pieces = std::max(1, shape.pieces);
  const double b = bytes / pieces;
  const int root = shape.hosts ? shape.hosts->position(shape.root) : shape.root;
  const int x = crossings(shape, root, n - 1);
  const double within = f.hop(1, b, reduce), across = f.hop(1, b, reduce, 1);
  f.count(pieces, 1, b, reduce, static_cast<double>(x) / n);
  return (n - 1 - x) * within + x * across + (pieces - 1) * (x > 0 ? across : within);
}

// two_level broadcast and reduce: the chain of hosts from the root's, each
// host's ranks a chain from its leader (two_level.hpp). The deepest rank
// is its host's place times a hop across plus its place on the host times
// one within; each further piece once more over the slowest link.
double two_level_chain(Formula& f, const Shape& shape, double bytes, bool reduce) {
  const double pieces = std::max(1, shape.pieces);
  const double b = bytes / pieces;
  const bool hosts = shape.hosts && shape.hosts->hosts() > 1;
  const double within = f.hop(1, b, reduce), across = hosts ? f.hop(1, b, reduce, 1) : within;
  const int count = shape.hosts ? shape.hosts->hosts() : shape.world;
  const int root_host = shape.hosts ? shape.hosts->host_of(shape.root) : shape.root;
  double deepest = 0;
  for (int h = 0; h < count; ++h) {
    const double ranks = shape.hosts ? static_cast<double>(shape.hosts->ranks_on(h).size()) : 1;
    deepest = std::max(deepest, wrap(h - root_host, count) * across + (ranks - 1) * within);
  }
  f.count(pieces, 1, b, reduce, hosts ? (count - 1.0) / shape.world : 0);
  return deepest + (pieces - 1) * (hosts ? across : within);
}

// two_level: L ranks on each of H hosts (the most on one), each phase's
// steps together.
double two_level(Formula& f, Collective c, const Shape& shape, double bytes) {
  const double hosts = shape.hosts ? shape.hosts->hosts() : shape.world;
  const double local = shape.hosts ? shape.hosts->most_per_host() : 1;
  // Hosts not known: every rank a host of its own, its links within.
  const double cross = shape.hosts && hosts > 1 ? 1 : 0;
  double seconds = 0;
  if (c == Collective::AllReduce) {
    // Within the host (each stripe of bytes / L to its owner, reduced; in
    // two parts where the stripe spans several segments), a ring of each
    // stripe's pieces across the hosts (every rank's at once), and back.
    // Stripes and pieces without elements are no messages: a rank sends
    // only to the owners of stripes that have any.
    const double elements = std::max<double>(1, static_cast<double>(shape.count));
    const double stripes = std::min(local, elements);
    const double stripe = bytes / stripes;
    const double parts = shape.pieces > local ? 2 : 1;
    const double pieces = std::min(hosts, std::max(1.0, elements / stripes));
    const double piece = stripe / pieces;
    const double owners = std::min(local, stripes);
    for (bool reduce : {true, false}) {
      seconds += std::min(local - 1, owners) * f.hop(parts, stripe / parts, reduce) +
                 (local - 1 - std::min(local - 1, owners)) * f.m.delta;
      f.count((local - 1) * owners / local, parts, stripe / parts, reduce);
      seconds += (hosts - 1) * f.hop(1, piece, reduce, owners * cross);
      f.count((hosts - 1) * owners / local * pieces / hosts, 1, piece, reduce, cross);
    }
    return seconds;
  }
  // all_gather: its block to its partner on each other host, then what it
  // holds (H blocks) to the others of its host; reduce_scatter the reverse.
  const bool reduce = c == Collective::ReduceScatter;
  seconds += (hosts - 1) * f.hop(1, bytes, reduce, local * cross);
  f.count(hosts - 1, 1, bytes, reduce, cross);
  seconds += (local - 1) * f.hop(hosts, bytes, reduce);
  f.count(local - 1, hosts, bytes, reduce);
  return seconds;
}

}  // namespace

bool replays_quickly(Collective c, Algorithm a, const Shape& shape) {
  const auto* row = algorithm_row(c, a);
  if (!row || !row->replays_slowly) return true;
  const auto n = static_cast<std::size_t>(std::max(shape.world, 1));
  return n * (n + static_cast<std::size_t>(std::max(shape.pieces, 1))) <= kReplaySteps;
}

bool has_closed_form(Collective c, Algorithm a) {
  const auto* row = algorithm_row(c, a);
  return row && row->closed_form != ClosedForm::None;
}

double formula_seconds(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
                       const CostModel& model) {
  check_hosts(shape);
  if (shape.world <= 1) return 0;
  Formula f{model};
  const bool one_host = !shape.hosts || shape.hosts->hosts() < 2;
  if (model.crowding > 1 && model.flow_bytes > 0 && one_host) {
    const double buffer = static_cast<double>(shape.count * element_bytes);
    f.cache_miss = buffer > model.cache_bytes / shape.world ? model.work_per_cold_byte
                   : buffer > model.core_cache_bytes / model.crowding ? model.work_per_warm_byte
                                                                      : 0;
  }
  const auto n = static_cast<double>(shape.world);
  const double count = static_cast<double>(shape.count * element_bytes);  // a rank's bytes
  const double elements = std::max<double>(1, static_cast<double>(shape.count));
  double seconds = 0;
  const auto* row = algorithm_row(c, a);
  const bool reduce = c == Collective::Reduce || c == Collective::ReduceScatter;
  switch (row ? row->closed_form : ClosedForm::None) {
    case ClosedForm::Ring:
      seconds = c == Collective::AllReduce
                    ? ring(f, shape, count / std::min(n, elements), std::min(n, elements), 2, 1)
                    : ring(f, shape, count, n, 1, reduce ? 1 : 0);
      break;
    case ClosedForm::Chain:
      seconds = chain(f, shape, count, reduce);
      break;
    case ClosedForm::TwoLevel:
      seconds = two_level(f, c, shape, count);
      break;
    case ClosedForm::TwoLevelChain:
      seconds = two_level_chain(f, shape, count, reduce);
      break;
    case ClosedForm::None:
      throw Error(fmt::format("the cost model has no closed form for {}'s {}: it replays it",
                              collective_name(c), algorithm_name(a)));
  }
  // The crowded bound (cost.hpp): the cores do every rank's work; across
  // hosts it adds to the links' time (and covers all_gather and
  // reduce_scatter too).
  const bool hosts = shape.hosts && shape.hosts->hosts() > 1;
  if (crowded_bound(model, c, hosts)) {
    const double cores = f.work * model.crowding;
    seconds = hosts ? seconds + cores : std::max(seconds, cores);
  }
  return seconds;
}

}  // namespace collie::collectives
