// `collie bench kernels`: the reduce kernels' speed, in GB/s of memory
// traffic (each element read twice and written once), next to memcpy's
// (read once, written once) on the same buffers. A kernel near memcpy's
// figure runs at memory bandwidth: the network, not the arithmetic, limits
// a reduction.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <collie/dtype.hpp>
#include <collie/reduce.hpp>

#include "commands.hpp"
#include "json_out.hpp"

namespace collie::cli {

namespace {

struct ReduceArgs {
  std::size_t bytes = std::size_t{32} << 20;
  int iters = 10;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

template <class F>
double best_seconds(int iters, F f) {
  double best = 1e9;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void run(const ReduceArgs& a) {
  const std::size_t bytes = std::max<std::size_t>(a.bytes, 64);
  std::vector<std::byte> acc(bytes), in(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {  // small values: no overflow, no denormals
    acc[i] = static_cast<std::byte>((i * 7) & 0x1f);
    in[i] = static_cast<std::byte>((i * 13) & 0x1f);
  }
  const double copy = best_seconds(a.iters, [&] { std::memcpy(acc.data(), in.data(), bytes); });
  const double copy_gbs = 2.0 * static_cast<double>(bytes) / copy / 1e9;
  struct Row {
    std::string dtype, op;
    double gbs;
  };
  std::vector<Row> rows;
  for (auto t : kDataTypes) {
    for (auto op :
         {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::BitwiseXor}) {
      if (!supports(t, op)) continue;
      const std::size_t count = bytes / dtype_size(t);
      const double s = best_seconds(a.iters, [&] { reduce(t, op, acc.data(), in.data(), count); });
      rows.push_back({std::string(dtype_name(t)), std::string(reduce_op_name(op)),
                      3.0 * static_cast<double>(count * dtype_size(t)) / s / 1e9});
    }
  }
  if (a.json) {
    nlohmann::ordered_json doc = {{"bytes", bytes}, {"memcpy_gb_per_s", rounded(copy_gbs, 2)}};
    auto& kernels = doc["kernels"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      kernels.push_back({{"dtype", r.dtype}, {"op", r.op}, {"gb_per_s", rounded(r.gbs, 2)}});
    std::fputs(dump_records(doc).c_str(), stdout);
    return;
  }
  std::printf("# collie bench kernels: %zu bytes per buffer, best of %d runs\n", bytes, a.iters);
  std::printf("# memory traffic: reduce reads 2 and writes 1 byte per byte, memcpy 1 and 1\n");
  std::printf("%-10s %-6s %10s %12s\n", "dtype", "op", "GB/s", "of memcpy");
  std::printf("%-10s %-6s %10.2f %11.0f%%\n", "memcpy", "-", copy_gbs, 100.0);
  for (const auto& r : rows)
    std::printf("%-10s %-6s %10.2f %11.0f%%\n", r.dtype.c_str(), r.op.c_str(), r.gbs,
                100.0 * r.gbs / copy_gbs);
}

}  // namespace

void add_bench_kernels_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "kernels", "Speed of the reduce kernels (every dtype, several ops) against memcpy");
  auto args = std::make_shared<ReduceArgs>();
  cmd->add_option("--bytes", args->bytes, "Bytes per buffer (larger than the caches)")
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "Runs of each kernel; the best counts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "Print the results as JSON instead of a table");
  cmd->callback([args] { run(*args); });
}

}  // namespace collie::cli
