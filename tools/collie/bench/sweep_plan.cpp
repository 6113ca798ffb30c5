// What a bench run sweeps (sweep_plan.hpp): the options read and checked,
// each collective's algorithms and sizes.
#include "sweep_plan.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include <collie/collectives/algorithms.hpp>
#include <collie/error.hpp>
#include <collie/memory.hpp>

namespace collie::cli {

namespace {

namespace cs = collectives;

std::vector<Algorithm> algorithms(const Args& a, Collective c) {
  std::vector<Algorithm> out;
  for (const auto& name : a.algos) {
    if (name == "all") {
      for (Algorithm x : cs::algorithms_for(c))
        if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
      continue;
    }
    const auto parsed = cs::parse_algorithm(name);
    if (!parsed && name != "auto") {
      throw Error(fmt::format("--algo: unknown algorithm '{}' (auto, all, or one of {})", name,
                              cs::algorithm_list(c)));
    }
    const Algorithm x = parsed.value_or(Algorithm::Auto);
    if (x != Algorithm::Auto && !cs::implements(c, x)) {
      if (a.collectives.size() > 1) continue;  // `all`: each collective takes what it has
      throw Error(fmt::format("--algo: {}", cs::no_algorithm_message(c, name, true)));
    }
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  if (out.empty()) out.push_back(Algorithm::Auto);
  return out;
}

// "a, b, c": the names of every item of `items`.
template <class Items, class Name>
std::string names_of(const Items& items, Name name) {
  std::string out;
  for (const auto& x : items)
    out += (out.empty() ? "" : ", ") + std::string(name(x));
  return out;
}

}  // namespace

std::vector<std::size_t> sizes_for(const Args& a, Collective c, std::size_t esize, int n) {
  if (c == Collective::Barrier) return {0};
  const std::size_t unit = esize * (blocked(c) ? static_cast<std::size_t>(n) : 1);
  std::vector<std::size_t> out;
  for (double s = static_cast<double>(a.min_bytes);
       s <= static_cast<double>(a.max_bytes) * 1.0000001;
       s = a.step_bytes > 0 ? s + static_cast<double>(a.step_bytes) : s * a.factor) {
    auto bytes = static_cast<std::size_t>(s) / unit * unit;
    bytes = std::max(bytes, unit);
    if (out.empty() || out.back() != bytes) out.push_back(bytes);
    if (a.step_bytes == 0 && a.factor <= 1) break;
  }
  return out;
}

Plan make_plan(const Args& a) {
  Plan plan;
  const auto t = parse_dtype(a.dtype);
  if (!t) {
    throw Error(
        fmt::format("-d: unknown dtype '{}'; collie has {} (and NCCL's names: float, "
                    "half, double, ...)",
                    a.dtype, names_of(kDataTypes, dtype_name)));
  }
  plan.dtype = *t;
  const auto o = parse_reduce_op(a.op);
  if (!o) {
    throw Error(
        fmt::format("-o: unknown reduce op '{}' ({})", a.op, names_of(kReduceOps, reduce_op_name)));
  }
  plan.op = *o;
  if (std::any_of(a.collectives.begin(), a.collectives.end(), cs::reduces))
    check_supported(plan.dtype, plan.op);
  if (a.min_bytes > a.max_bytes)
    throw Error(fmt::format("-b {} is larger than -e {}", a.min_bytes, a.max_bytes));
  if (a.min_bytes == 0) throw Error("-b: the smallest size must be at least 1 byte");
  if (!(a.factor >= 1) && a.step_bytes == 0) throw Error("-f: the step factor must be at least 1");
  if (a.iters < 1) throw Error("-n: at least one iteration");
  if (a.warmup < 0) throw Error("-w: warm-up iterations cannot be negative");
  if (a.json && a.csv) throw Error("--json and --csv: choose one");
  if (!a.baselines.empty() && a.plot.empty()) throw Error("--baseline goes with --plot");
  if (a.device != "host" && a.device != "cuda")
    throw Error(fmt::format("--device: '{}' is not host or cuda", a.device));
  if (a.device == "cuda" && !cuda::built_in()) throw Error("--device cuda: " + cuda::status());
  for (Collective c : a.collectives)
    plan.runs.emplace_back(c, algorithms(a, c));
  return plan;
}

std::size_t algo_column_width(const Plan& plan) {
  std::size_t width = 4;
  for (const auto& [c, algos] : plan.runs) {
    for (Algorithm x : algos) {
      if (x != Algorithm::Auto) {
        width = std::max(width, cs::algorithm_name(x).size());
        continue;
      }
      for (Algorithm y : cs::algorithms_for(c))  // auto:NAME
        width = std::max(width, 5 + cs::algorithm_name(y).size());
    }
  }
  return width;
}

}  // namespace collie::cli
