#include "support/collective_check.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

namespace collie::test {

namespace {

constexpr DataType kDtypes[] = {DataType::Int8,     DataType::UInt8,    DataType::Int32,
                                DataType::Int64,    DataType::Float16,  DataType::BFloat16,
                                DataType::Float32,  DataType::Float64};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min,
                             ReduceOp::Max, ReduceOp::Avg,     ReduceOp::BitwiseAnd,
                             ReduceOp::BitwiseOr, ReduceOp::BitwiseXor};

bool is_float(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}
bool is_signed(DataType t) {
  return t != DataType::UInt8;
}

// The value rank `r` contributes at element i, as a double (exact in every dtype).
double value(const CollectiveCase& c, int r, std::size_t i) {
  const auto k = static_cast<long long>(i);
  switch (c.op) {
    case ReduceOp::Product:  // stays small: 1 or 2 (or 0.5, -1)
      if (is_float(c.dtype)) return (r + k) % 3 == 0 ? 2.0 : ((r + k) % 3 == 1 ? 0.5 : 1.0);
      if (is_signed(c.dtype) && (r + k) % 5 == 0) return -1;
      return (r * 3 + k) % 4 == 0 ? 2 : 1;
    case ReduceOp::BitwiseAnd:
    case ReduceOp::BitwiseOr:
    case ReduceOp::BitwiseXor:
      return static_cast<double>((r * 37 + k * 11 + 5) & 0x7f);
    default: {
      double v = static_cast<double>((r * 7 + k * 3) % 23);
      if (is_signed(c.dtype)) v -= 11;
      if (is_float(c.dtype)) v += 0.25 * static_cast<double>(k % 4);
      return v;
    }
  }
}

// The reference reduction of `values` (in rank order), as the dtype holds it.
double combine(const CollectiveCase& c, const std::vector<double>& values) {
  if (!is_float(c.dtype)) {
    // Integers: in 64 bits (exact for these small values, wrapping as the
    // dtype would for product), then narrowed modulo 2^bits.
    std::int64_t acc = static_cast<std::int64_t>(values[0]);
    for (std::size_t i = 1; i < values.size(); ++i) {
      const auto v = static_cast<std::int64_t>(values[i]);
      switch (c.op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc += v;
          break;
        case ReduceOp::Product:
          acc = static_cast<std::int64_t>(static_cast<std::uint64_t>(acc) *
                                          static_cast<std::uint64_t>(v));
          break;
        case ReduceOp::Min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::Max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::BitwiseAnd:
          acc &= v;
          break;
        case ReduceOp::BitwiseOr:
          acc |= v;
          break;
        case ReduceOp::BitwiseXor:
          acc ^= v;
          break;
      }
    }
    auto narrow = [&](std::int64_t x) -> double {
      switch (c.dtype) {
        case DataType::Int8:
          return static_cast<std::int8_t>(x);
        case DataType::UInt8:
          return static_cast<std::uint8_t>(x);
        case DataType::Int32:
          return static_cast<std::int32_t>(x);
        default:
          return static_cast<double>(x);
      }
    };
    if (c.op == ReduceOp::Avg) {
      const auto sum = static_cast<std::int64_t>(narrow(acc));
      return narrow(sum / static_cast<std::int64_t>(values.size()));
    }
    return narrow(acc);
  }
  double acc = values[0];
  for (std::size_t i = 1; i < values.size(); ++i) {
    switch (c.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += values[i];
        break;
      case ReduceOp::Product:
        acc *= values[i];
        break;
      case ReduceOp::Min:
        acc = std::min(acc, values[i]);
        break;
      default:
        acc = std::max(acc, values[i]);
        break;
    }
  }
  if (c.op == ReduceOp::Avg) acc /= static_cast<double>(values.size());
  return acc;
}

// How far a float result may be from the reference. The inputs are chosen so
// that float16, float32 and float64 sums, products, minima and maxima are
// exact; bfloat16 (8 significant bits) rounds partial sums, once per rank;
// averages round their division (float16 divides each contribution before
// summing, see reduce.hpp).
double tolerance(const CollectiveCase& c, double want, int world) {
  if (!is_float(c.dtype)) return 0;
  const double scale = std::max(1.0, std::fabs(want));
  if (c.dtype == DataType::BFloat16) return scale * 4e-3 * world;
  if (c.op != ReduceOp::Avg) return 0;
  switch (c.dtype) {
    case DataType::Float16:
      return scale * 1e-3 * world + 1e-3 * world;
    case DataType::Float32:
      return scale * 1e-6;
    default:
      return scale * 1e-14;
  }
}

template <class T>
T to(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <class T>
double from(T v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

template <class T>
std::size_t run_typed(ProcessGroup& pg, const CollectiveCase& c, std::string& first) {
  const int n = pg.size();
  const int me = pg.rank();
  const auto N = static_cast<std::size_t>(n);
  const std::size_t k = c.count;
  CollectiveOptions o;
  o.algorithm = c.algorithm;
  auto fill = [&](std::vector<T>& v, int r) {
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = to<T>(value(c, r, i));
  };
  // Inputs, outputs and the reference for this rank.
  std::vector<T> input, output;
  std::vector<double> want;  // empty: nothing to check on this rank
  std::vector<T> untouched;  // an input that must come back as it was
  const bool root = me == c.root;
  switch (c.collective) {
    case Collective::Broadcast:
      output.resize(k);
      if (root) fill(output, me);
      else std::fill(output.begin(), output.end(), to<T>(99));
      for (std::size_t i = 0; i < k; ++i) want.push_back(from(to<T>(value(c, c.root, i))));
      break;
    case Collective::AllReduce:
    case Collective::Reduce: {
      input.resize(k);
      fill(input, me);
      output.assign(c.in_place ? 0 : k, to<T>(99));
      if (c.collective == Collective::AllReduce || root) {
        for (std::size_t i = 0; i < k; ++i) {
          std::vector<double> vs;
          for (int r = 0; r < n; ++r) vs.push_back(value(c, r, i));
          want.push_back(combine(c, vs));
        }
      } else if (c.in_place) {
        untouched = input;
      }
      break;
    }
    case Collective::ReduceScatter:
      input.resize(N * k);
      fill(input, me);
      untouched = input;
      output.assign(k, to<T>(99));
      for (std::size_t i = 0; i < k; ++i) {
        std::vector<double> vs;
        for (int r = 0; r < n; ++r) vs.push_back(value(c, r, static_cast<std::size_t>(me) * k + i));
        want.push_back(combine(c, vs));
      }
      break;
    case Collective::AllGather:
    case Collective::Gather:
      input.resize(k);
      fill(input, me);
      untouched = input;
      output.assign(c.collective == Collective::Gather && !root ? 0 : N * k, to<T>(99));
      if (c.collective == Collective::AllGather || root)
        for (std::size_t i = 0; i < N * k; ++i)
          want.push_back(from(to<T>(value(c, static_cast<int>(i / k), i % k))));
      break;
    case Collective::Scatter:
      input.resize(root ? N * k : 0);
      fill(input, me);
      untouched = input;
      output.assign(k, to<T>(99));
      for (std::size_t i = 0; i < k; ++i)
        want.push_back(from(to<T>(value(c, c.root, static_cast<std::size_t>(me) * k + i))));
      break;
    case Collective::AllToAll:
      input.resize(N * k);
      fill(input, me);
      untouched = input;
      output.assign(N * k, to<T>(99));
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t i = 0; i < k; ++i)
          want.push_back(from(to<T>(value(c, static_cast<int>(j), static_cast<std::size_t>(me) * k + i))));
      break;
    case Collective::Barrier:
      break;
  }
  std::span<T> in(input), out(output);
  std::span<const T> cin(input);
  Work w;
  switch (c.collective) {
    case Collective::Broadcast:
      if (c.async) w = pg.broadcast_async(out, c.root, o);
      else pg.broadcast(out, c.root, o);
      break;
    case Collective::AllReduce:
      if (c.in_place && c.async) w = pg.all_reduce_async(in, c.op, o);
      else if (c.in_place) pg.all_reduce(in, c.op, o);
      else pg.all_reduce(cin, out, c.op, o);
      break;
    case Collective::Reduce:
      if (c.in_place && c.async) w = pg.reduce_async(in, c.root, c.op, o);
      else if (c.in_place) pg.reduce(in, c.root, c.op, o);
      else pg.reduce(cin, out, c.root, c.op, o);
      break;
    case Collective::ReduceScatter:
      if (c.async) w = pg.reduce_scatter_async(cin, out, c.op, o);
      else pg.reduce_scatter(cin, out, c.op, o);
      break;
    case Collective::AllGather:
      if (c.async) w = pg.all_gather_async(cin, out, o);
      else pg.all_gather(cin, out, o);
      break;
    case Collective::Gather:
      if (c.async) w = pg.gather_async(cin, out, c.root, o);
      else pg.gather(cin, out, c.root, o);
      break;
    case Collective::Scatter:
      if (c.async) w = pg.scatter_async(cin, out, c.root, o);
      else pg.scatter(cin, out, c.root, o);
      break;
    case Collective::AllToAll:
      if (c.async) w = pg.all_to_all_async(cin, out, o);
      else pg.all_to_all(cin, out, o);
      break;
    case Collective::Barrier:
      if (c.async) w = pg.barrier_async(o);
      else pg.barrier(o);
      break;
  }
  w.wait();
  const bool result_in_input =
      c.in_place && (c.collective == Collective::AllReduce || c.collective == Collective::Reduce);
  const auto& got = result_in_input ? input : output;
  std::size_t wrong = 0;
  auto bad = [&](std::string what) {
    if (wrong++ == 0) first = std::move(what);
  };
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = from(got[i]);
    if (!(std::fabs(g - want[i]) <= tolerance(c, want[i], n)))
      bad(fmt::format("rank {}: element {} is {}, expected {}", me, i, g, want[i]));
  }
  if (!untouched.empty() && std::memcmp(untouched.data(), input.data(), input.size() * sizeof(T)) != 0)
    bad(fmt::format("rank {}: the input changed", me));
  return wrong;
}

}  // namespace

std::string describe(const CollectiveCase& c) {
  return fmt::format("{} {} {} {} count {} root {} {}{}", collectives::collective_name(c.collective),
                     collectives::algorithm_name(c.algorithm), dtype_name(c.dtype),
                     reduce_op_name(c.op), c.count, c.root, c.in_place ? "in-place" : "out-of-place",
                     c.async ? " async" : "");
}

std::size_t run_and_check(ProcessGroup& pg, const CollectiveCase& c, std::string& first) {
  switch (c.dtype) {
    case DataType::Int8:
      return run_typed<std::int8_t>(pg, c, first);
    case DataType::UInt8:
      return run_typed<std::uint8_t>(pg, c, first);
    case DataType::Int32:
      return run_typed<std::int32_t>(pg, c, first);
    case DataType::Int64:
      return run_typed<std::int64_t>(pg, c, first);
    case DataType::Float16:
      return run_typed<float16>(pg, c, first);
    case DataType::BFloat16:
      return run_typed<bfloat16>(pg, c, first);
    case DataType::Float32:
      return run_typed<float>(pg, c, first);
    case DataType::Float64:
      return run_typed<double>(pg, c, first);
  }
  return 0;
}

std::vector<CollectiveCase> matrix(int world, bool full) {
  std::vector<CollectiveCase> cases;
  const std::size_t big = 1009;  // a prime: uneven chunks; several segments of 1 KiB
  for (auto coll : collectives::kCollectives) {
    for (auto algo : collectives::algorithms_for(coll)) {
      CollectiveCase base;
      base.collective = coll;
      base.algorithm = algo;
      base.root = world - 1;
      // Every dtype, and every op it supports.
      for (auto t : kDtypes) {
        if (!full && t != DataType::Float32 && t != DataType::Int32) continue;
        for (auto op : kOps) {
          if (!collectives::reduces(coll) && op != ReduceOp::Sum) continue;
          if (!supports(t, op)) continue;
          if (!full && op != ReduceOp::Sum && !(op == ReduceOp::Avg && t == DataType::Float32))
            continue;
          auto c = base;
          c.dtype = t;
          c.op = op;
          c.count = coll == Collective::Barrier ? 1 : big;
          cases.push_back(c);
        }
      }
      if (coll == Collective::Barrier) continue;
      // Edge counts; in-place; async; every root.
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(world - 1)}) {
        auto c = base;
        c.count = count;
        cases.push_back(c);
      }
      auto inplace = base;
      inplace.count = 17;
      inplace.in_place = true;
      if (coll == Collective::AllReduce || coll == Collective::Reduce) cases.push_back(inplace);
      auto async = base;
      async.count = 33;
      async.async = true;
      async.in_place = coll == Collective::AllReduce || coll == Collective::Reduce;
      cases.push_back(async);
      if (collectives::has_root(coll)) {
        for (int root = 0; root < world; ++root) {
          auto c = base;
          c.root = root;
          c.count = static_cast<std::size_t>(world) + 2;
          c.in_place = coll == Collective::Reduce;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

}  // namespace collie::test
