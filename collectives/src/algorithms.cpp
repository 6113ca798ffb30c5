// Every collective and its algorithms by name, and make_schedule(), which
// runs the algorithm's row of the table (algorithm_table.hpp).
#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/hosts.hpp>
#include <collie/error.hpp>

namespace collie::collectives {

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::Gather:
      return "gather";
    case Collective::AllGather:
      return "all_gather";
    case Collective::Scatter:
      return "scatter";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::AllToAll:
      return "all_to_all";
    case Collective::Barrier:
      return "barrier";
  }
  return "unknown";
}

namespace {

std::string normalized(std::string_view name) {
  std::string out;
  for (char ch : name)
    if (ch != '_' && ch != '-')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

std::optional<Collective> parse_collective(std::string_view name) {
  for (auto c : kCollectives)
    if (normalized(name) == normalized(collective_name(c))) return c;
  return std::nullopt;
}

std::string_view algorithm_name(Algorithm a) {
  for (const auto& n : kAlgorithmNames)
    if (n.algorithm == a) return n.name;
  return "unknown";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (auto a : kAlgorithms)
    if (normalized(name) == normalized(algorithm_name(a))) return a;
  return std::nullopt;
}

const std::vector<Algorithm>& algorithms_for(Collective c) {
  static const auto lists = [] {
    std::array<std::vector<Algorithm>, std::size(kCollectives)> all;
    for (const auto& row : kAlgorithmTable)
      all[static_cast<std::size_t>(row.collective)].push_back(row.algorithm);
    return all;
  }();
  return lists.at(static_cast<std::size_t>(c));
}

namespace {

// The table's own checks: every collective has a row, no row is there
// twice, Auto has none, and every algorithm of a row has a name.
constexpr bool table_is_whole() {
  for (std::size_t c = 0; c < std::size(kCollectives); ++c) {
    if (static_cast<std::size_t>(kCollectives[c]) != c) return false;
    bool has_row = false;
    for (const auto& row : kAlgorithmTable) has_row = has_row || row.collective == kCollectives[c];
    if (!has_row) return false;
  }
  for (const auto& row : kAlgorithmTable) {
    // (Not row.make against null: under the sanitizers GCC will not
    // compare a function's address at compile time.)
    if (row.algorithm == Algorithm::Auto) return false;
    if (algorithm_row(row.collective, row.algorithm) != &row) return false;  // twice
    bool named = false;
    for (const auto& n : kAlgorithmNames) named = named || n.algorithm == row.algorithm;
    if (!named) return false;
  }
  return true;
}
static_assert(table_is_whole(), "algorithm_table.hpp: a collective without a row, a row twice, "
                                "or an algorithm without a name");

}  // namespace

bool implements(Collective c, Algorithm a) { return algorithm_row(c, a) != nullptr; }

std::string algorithm_list(Collective c) {
  std::vector<std::string_view> names;
  for (auto a : algorithms_for(c))
    names.push_back(algorithm_name(a));
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string no_algorithm_message(Collective c, std::string_view name, bool auto_too) {
  return fmt::format("{} has no algorithm '{}'; it has: {}{}", collective_name(c), name,
                     auto_too ? "auto, " : "", algorithm_list(c));
}

bool has_root(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}

bool reduces(Collective c) {
  return c == Collective::Reduce || c == Collective::AllReduce || c == Collective::ReduceScatter;
}

namespace {

// A tree (all_reduce, broadcast, reduce: every rank works on the whole
// buffer, no block is a rank's own) is made over the ranks in host order
// (ring_order()): rank order[v] plays rank v, so that a subtree's ranks
// share a host where they can and only its root sends across, however the
// ranks are numbered. Numbered by host already, or hosts unknown: the
// schedule itself. (Not the doublings: recursive doubling crosses as often
// either way, and halving-doubling's largest exchange, with the rank n/2
// away, stays within a host where ranks are numbered round robin.)
Schedule in_host_order(Schedule (*make)(const Shape&), const Shape& shape) {
  check_hosts(shape);
  if (!shape.hosts || shape.hosts->by_host()) return make(shape);
  const auto& order = shape.hosts->ring_order();
  const auto position = [&](int r) { return shape.hosts->position(r); };
  Shape virtual_shape = shape;
  virtual_shape.hosts = nullptr;
  virtual_shape.rank = position(shape.rank);
  if (shape.root >= 0 && shape.root < shape.world) virtual_shape.root = position(shape.root);
  Schedule s = make(virtual_shape);
  for (auto& step : s.steps) {
    for (auto& t : step.sends) t.peer = order[static_cast<std::size_t>(t.peer)];
    for (auto& t : step.recvs) t.peer = order[static_cast<std::size_t>(t.peer)];
  }
  return s;
}

}  // namespace

Schedule make_schedule(Collective c, Algorithm a, const Shape& shape) {
  if (shape.world < 1) throw Error(fmt::format("a world of {} ranks", shape.world));
  if (shape.rank < 0 || shape.rank >= shape.world)
    throw Error(fmt::format("rank {} is outside a world of {} (ranks 0 to {})", shape.rank,
                            shape.world, shape.world - 1));
  if (has_root(c) && (shape.root < 0 || shape.root >= shape.world))
    throw Error(fmt::format("{}: root {} is outside a world of {} (ranks 0 to {})",
                            collective_name(c), shape.root, shape.world, shape.world - 1));
  if (const auto* row = algorithm_row(c, a))
    return row->host_order ? in_host_order(row->make, shape) : row->make(shape);
  throw Error(no_algorithm_message(c, algorithm_name(a), false));
}

Layout layout(Collective c, const Shape& shape) {
  const auto n = static_cast<std::size_t>(shape.world);
  const auto k = shape.count;
  const auto r = static_cast<std::size_t>(shape.rank);
  switch (c) {
    case Collective::Broadcast:
    case Collective::Reduce:
    case Collective::AllReduce:
      return {Range{0, k}, Range{0, k}, k};
    case Collective::ReduceScatter:
      return {Range{0, n * k}, Range{r * k, k}, n * k};
    case Collective::AllGather:
    case Collective::Gather:
      return {Range{n * k, k}, Range{0, n * k}, (n + 1) * k};
    case Collective::Scatter:
      return {Range{0, n * k}, Range{n * k, k}, (n + 1) * k};
    case Collective::AllToAll:
      return {Range{0, n * k}, Range{n * k, n * k}, 2 * n * k};
    case Collective::Barrier:
      return {Range{0, 1}, Range{0, 1}, 1};
  }
  return {};
}

Extents extents(Collective c, int world, std::size_t count, int rank, int root) {
  if (c == Collective::Barrier) return {};
  const auto l = layout(c, Shape{rank, world, count, root, 1});
  Extents e{l.input.count, l.output.count};
  // A rooted collective's gathered or scattered side is the root's alone.
  if (rank != root) {
    if (c == Collective::Reduce || c == Collective::Gather) e.output.reset();
    if (c == Collective::Scatter) e.input.reset();
  }
  return e;
}

std::size_t count_of_buffers(Collective c, int world, std::size_t input, std::size_t output,
                             int rank, int root) {
  if (c == Collective::Barrier) return 1;
  const auto name = collective_name(c);
  const auto n = static_cast<std::size_t>(world);
  // How many elements each side holds per element of the count (1 or n),
  // as the root sees them; the count is read off the side of fewer.
  const auto unit = extents(c, world, 1, root, root);
  const std::size_t in_unit = unit.input.value_or(0), out_unit = unit.output.value_or(0);
  const bool from_input = in_unit <= out_unit;
  const std::size_t given = from_input ? input : output;
  const std::size_t per = std::min(in_unit, out_unit);
  if (in_unit == out_unit && per > 1 && given % per != 0) {
    throw Error(fmt::format(
        "rank {}: {}: input of {} and output of {} elements: both must hold {} equal blocks",
        rank, name, input, output, n));
  }
  const std::size_t count = given / per;
  const auto want = extents(c, world, count, rank, root);
  const auto wrong = [](const std::optional<std::size_t>& w, std::size_t has) {
    return w && *w != has;
  };
  if (!wrong(want.input, input) && !wrong(want.output, output)) return count;
  if (in_unit == out_unit) {
    if (per > 1)
      throw Error(fmt::format(
          "rank {}: {}: input of {} and output of {} elements: both must hold {} equal blocks",
          rank, name, input, output, n));
    throw Error(fmt::format(
        "rank {}: {}: the output has {} elements, the input {}: they must be equal", rank, name,
        output, input));
  }
  const std::size_t blocks = from_input ? output : input;
  throw Error(fmt::format(
      "rank {}: {}: a buffer of {} elements for {} ranks of {}: it must hold {} x {} = {}", rank,
      name, blocks, n, count, n, count, n * count));
}

bool elementwise(Collective c) {
  if (c == Collective::Barrier) return false;
  const auto l = layout(c, Shape{0, 2, 1, 0, 1});
  return l.input == l.output;
}

SymbolicBuffers initial_state(Collective c, int world, std::size_t count, int root) {
  const auto n = static_cast<std::size_t>(world);
  SymbolicBuffers state(n);
  for (int r = 0; r < world; ++r) {
    const Shape shape{r, world, count, root, 1};
    const auto l = layout(c, shape);
    auto& b = state[static_cast<std::size_t>(r)];
    b.assign(l.buffer_count, Contribution{});
    switch (c) {
      case Collective::Broadcast:
        if (r == root) std::fill(b.begin(), b.end(), Contribution{r});
        break;
      case Collective::Scatter:
        if (r == root)
          for (std::size_t i = 0; i < n * count; ++i)
            b[i] = Contribution{static_cast<int>(i / count)};
        break;
      case Collective::AllToAll:
        for (std::size_t i = 0; i < n * count; ++i)
          b[i] = Contribution{r * world + static_cast<int>(i / count)};
        break;
      default:
        for (std::size_t i = 0; i < l.input.count; ++i)
          b[l.input.offset + i] = Contribution{r};
    }
  }
  return state;
}

void check_final_state(Collective c, int world, std::size_t count, int root,
                       const SymbolicBuffers& state) {
  Contribution everyone(static_cast<std::size_t>(world));
  std::iota(everyone.begin(), everyone.end(), 0);
  for (int r = 0; r < world; ++r) {
    const Shape shape{r, world, count, root, 1};
    const auto l = layout(c, shape);
    const auto& b = state.at(static_cast<std::size_t>(r));
    auto expect = [&](std::size_t i, const Contribution& want) {
      if (b.at(i) != want)
        throw Error(fmt::format("{}: rank {} element {} holds {{{}}}, expected {{{}}}",
                                collective_name(c), r, i, fmt::join(b.at(i), ","),
                                fmt::join(want, ",")));
    };
    const bool is_root = r == root;
    switch (c) {
      case Collective::Broadcast:
        for (std::size_t i = 0; i < count; ++i)
          expect(i, Contribution{root});
        break;
      case Collective::Reduce:
        if (is_root)
          for (std::size_t i = 0; i < count; ++i)
            expect(i, everyone);
        break;
      case Collective::AllReduce:
        for (std::size_t i = 0; i < count; ++i)
          expect(i, everyone);
        break;
      case Collective::ReduceScatter:
        for (std::size_t i = 0; i < count; ++i)
          expect(l.output.offset + i, everyone);
        break;
      case Collective::Gather:
        if (!is_root) break;
        [[fallthrough]];
      case Collective::AllGather:
        for (std::size_t i = 0; i < l.output.count; ++i)
          expect(l.output.offset + i, Contribution{static_cast<int>(i / count)});
        break;
      case Collective::Scatter:
        for (std::size_t i = 0; i < count; ++i)
          expect(l.output.offset + i, Contribution{r});
        break;
      case Collective::AllToAll:
        for (std::size_t i = 0; i < l.output.count; ++i)
          expect(l.output.offset + i, Contribution{static_cast<int>(i / count) * world + r});
        break;
      case Collective::Barrier: {
        Contribution heard = b.at(0);
        heard.erase(std::unique(heard.begin(), heard.end()), heard.end());
        if (heard != everyone)
          throw Error(
              fmt::format("barrier: rank {} has heard from {{{}}} only", r, fmt::join(heard, ",")));
        break;
      }
    }
  }
}

}  // namespace collie::collectives
