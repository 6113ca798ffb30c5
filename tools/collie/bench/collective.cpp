// `collie bench <collective>|all`: nccl-tests for collie. Sweeps message
// sizes, times every collective (out-of-place and in-place where both
// exist), checks every result against a reference computed independently
// (tools/check), and prints one row per size as it is measured.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>
#include <collie/version.hpp>

#include "collective.hpp"
#include "sweep_plan.hpp"
#include "job.hpp"
#include "output.hpp"
#include "plot.hpp"
#include "size_label.hpp"
#include "collective_check.hpp"
#include "commands.hpp"
#include "json_out.hpp"

namespace collie::cli {

namespace {

using Clock = std::chrono::steady_clock;
namespace cs = collectives;

// ---- Ctrl-C: every rank stops after the row it is measuring ----

std::atomic<bool> g_interrupted{false};

// SIGINT (Ctrl-C): the row under way is finished, then every rank stops.
// SIGTERM (collie launch stopping the job): a rank blocked in a collective
// stops at once (interrupt.hpp).
void on_signal(int number) {
  g_interrupted.store(true, std::memory_order_relaxed);
  if (number == SIGTERM) collie::interrupt_waits(number);
}

void catch_interrupts() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends the process at once
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// ---- measuring ----

struct Bench {
  const Args& a;
  ProcessGroup& pg;
  DataType dtype;
  ReduceOp op;
  Printer& printer;
  std::vector<Result> results;
  std::size_t wrong_total = 0;
  bool interrupted = false;
  std::string first_wrong;
  // For tests of -c: COLLIE_BENCH_SPOIL_RANK=R makes rank R change one
  // element of every result it checks.
  int spoil_rank_ = [] {
    const char* text = std::getenv("COLLIE_BENCH_SPOIL_RANK");
    return text == nullptr ? -1 : std::atoi(text);
  }();

  // --device cuda: this rank's device memory.
  check::DeviceMemory* device_memory = nullptr;
  // The timed calls of the cell being measured, each by itself (us).
  std::vector<double> call_us = {};

  // The middle value (the mean of the middle two of an even count), as
  // Python's statistics.median; 0 for none. Reorders `v`.
  static double median(std::vector<double>& v) {
    if (v.empty()) return 0;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    if (v.size() % 2 == 1) return *mid;
    return (*mid + *std::max_element(v.begin(), mid)) / 2;
  }

  // Times one cell; every rank calls it with the same arguments. With
  // --device cuda, the cell runs on host buffers first, then on device
  // buffers (the result), so that the two are measured side by side.
  Result measure(Collective c, Algorithm algo, std::size_t bytes, bool in_place) {
    auto r = measure_on(c, algo, bytes, in_place, false);
    if (device_memory != nullptr) {
      const auto host = r;
      r = measure_on(c, algo, bytes, in_place, true);
      r.host_time_us = host.time_us;
      r.wrong += host.wrong;
    }
    ++printer.rows_done;
    return r;
  }

  Result measure_on(Collective c, Algorithm algo, std::size_t bytes, bool in_place,
                    bool on_device) {
    const std::size_t esize = dtype_size(dtype);
    const auto n = static_cast<std::size_t>(pg.size());
    check::CollectiveCase k;
    k.collective = c;
    k.algorithm = algo;
    k.dtype = dtype;
    k.op = op;
    k.root = a.root;
    k.in_place = in_place && check::has_out_of_place_form(c);  // broadcast: its one buffer
    k.count = c == Collective::Barrier ? 1 : bytes / esize / (blocked(c) ? n : 1);
    k.input_on_device = k.output_on_device = on_device;
    check::PreparedCase prepared(pg, k, on_device ? device_memory : nullptr);
    Result r;
    r.collective = c;
    r.algorithm = algo == Algorithm::Auto ? "auto" : std::string(cs::algorithm_name(algo));
    r.chosen = algo == Algorithm::Auto && !on_device && pg.uses_board(c, dtype, k.count)
                   ? std::string("board")
                   : std::string(cs::algorithm_name(
                         algo == Algorithm::Auto ? pg.choose_algorithm(c, dtype, k.count, a.root)
                                                 : algo));
    r.bytes = bytes;
    r.count = bytes / esize;
    r.in_place = in_place;
    for (int i = 0; i < a.warmup; ++i)
      prepared.run();
    pg.barrier();
    // Back to back, a rank that finishes early (a rooted collective's
    // sender) runs ahead into the next iteration; with --barrier-each every
    // iteration starts together and only the collective itself is timed.
    // Each call is timed by itself too (back to back, one ends where the
    // next begins, so they add up to the whole loop), for rank 0's median.
    call_us.assign(static_cast<std::size_t>(std::max(a.iters, 0)), 0.0);
    auto start = Clock::now();
    for (int i = 0; i < a.iters; ++i) {
      if (a.barrier_each) {
        pg.barrier();
        start = Clock::now();
      }
      prepared.run();
      const auto end = Clock::now();
      call_us[static_cast<std::size_t>(i)] =
          std::chrono::duration<double, std::micro>(end - start).count();
      start = end;
      printer.progress([&] {
        return fmt::format("{} {} {}", cs::collective_name(c),
                           size_label(static_cast<double>(bytes)), r.chosen);
      });
    }
    const double mine =
        std::accumulate(call_us.begin(), call_us.end(), 0.0) / std::max(a.iters, 1);
    r.rank0_median_us = median(call_us);
    std::size_t wrong = 0;
    if (a.check != 0 && c != Collective::Barrier) {
      prepared.refill();
      prepared.run();
      if (spoil_rank_ == pg.rank()) prepared.spoil();
      std::string first;
      wrong = prepared.check(first);
      if (wrong > 0 && first_wrong.empty()) first_wrong = first;
    }
    // The slowest rank's time, the wrong elements of all ranks, and whether
    // any rank was interrupted.
    std::vector<double> maxima{mine, g_interrupted.load() ? 1.0 : 0.0};
    std::vector<double> sums{static_cast<double>(wrong)};
    pg.all_reduce(std::span(maxima), ReduceOp::Max);
    pg.all_reduce(std::span(sums), ReduceOp::Sum);
    r.time_us = maxima[0];
    if (maxima[1] != 0) interrupted = true;
    r.wrong = static_cast<std::size_t>(sums[0]);
    r.algbw = r.time_us > 0 ? static_cast<double>(bytes) / r.time_us / 1e3 : 0;
    r.busbw = r.algbw * bus_factor(c, pg.size());
    return r;
  }

  void run(Collective c, const std::vector<Algorithm>& algos) {
    const bool has_in = check::has_in_place_form(c);
    const bool has_out = check::has_out_of_place_form(c);
    if (pg.rank() == 0) printer.columns(c, has_out, has_in);
    for (std::size_t bytes : sizes_for(a, c, dtype_size(dtype), pg.size())) {
      for (Algorithm algo : algos) {
        std::optional<Result> out, in;
        if (has_out) out = measure(c, algo, bytes, false);
        if (has_in && !interrupted) in = measure(c, algo, bytes, true);
        for (const auto* x : {&out, &in}) {
          if (!*x) continue;
          results.push_back(**x);
          wrong_total += (*x)->wrong;
        }
        if (pg.rank() == 0) printer.row(out, in);
        if (interrupted) return;
      }
    }
  }
};

// Before the first row the ranks pass a token around their ring for
// kSettle: the kernel starts a forked rank on its parent's processor, and
// ranks that wake each other can stay on one until traffic has run a
// while. Without this the first rows timed that (2 ranks over TCP, 8 B to
// 1 KiB: 17-19 us a call in 2-3 launches of 10, against 7-10; with it, none;
// docs/PERFORMANCE.md). Point-to-point messages, which traces do not show;
// rank 0's clock says when to stop, in the token.
constexpr auto kSettle = std::chrono::milliseconds(50);
constexpr int kSettleTag = 0x5e771e;
void settle(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  if (n < 2) return;
  const auto until = Clock::now() + kSettle;
  for (std::int32_t go = 1; go != 0;) {
    if (r == 0) {
      go = Clock::now() < until ? 1 : 0;
      pg.send(&go, sizeof go, 1, kSettleTag);
      pg.recv(&go, sizeof go, n - 1, kSettleTag);
    } else {
      pg.recv(&go, sizeof go, r - 1, kSettleTag);
      pg.send(&go, sizeof go, (r + 1) % n, kSettleTag);
    }
  }
}

int run_rank(const Args& a, const Plan& plan, const std::string& how) {
  catch_interrupts();
  try {
    auto pg = init();
    // (Here, in the rank: CUDA must not be started before a fork.)
    const int gpus = a.device == "cuda" ? cuda::device_count() : 0;
    if (a.device == "cuda" && gpus == 0) {
      if (pg.rank() != 0) return 1;  // rank 0 says why
      throw Error("--device cuda: " + cuda::status());
    }
    if (a.root < 0 || a.root >= pg.size())
      throw Error(
          fmt::format("-r: root {} is not a rank of this job (0 to {})", a.root, pg.size() - 1));
    Printer printer{a, pg.size(), plan.dtype, plan.op, pg.describe_transport(),
                    pg.describe_hosts()};
    printer.tty_progress = a.progress && pg.rank() == 0 && isatty(STDERR_FILENO) != 0;
    printer.algo_width = algo_column_width(plan);
    for (const auto& [c, algos] : plan.runs) {
      const std::size_t forms =
          (check::has_out_of_place_form(c) ? 1 : 0) + (check::has_in_place_form(c) ? 1 : 0);
      printer.rows_total +=
          sizes_for(a, c, dtype_size(plan.dtype), pg.size()).size() * algos.size() * forms;
    }
    if (pg.rank() == 0) printer.header(pg, how);
    settle(pg);
    Bench bench{a, pg, plan.dtype, plan.op, printer, {}, 0, false, {}};
    std::unique_ptr<check::DeviceMemory> memory;
    if (a.device == "cuda") {
      // nccl-tests' habit: rank i of a node on its GPU i (modulo the GPUs).
      memory = check::cuda_memory(pg.config().local_rank % gpus);
      bench.device_memory = memory.get();
    }
    for (const auto& [c, algos] : plan.runs) {
      bench.run(c, algos);
      if (bench.interrupted) break;
    }
    if (pg.rank() == 0) {
      printer.footer(bench.results, bench.wrong_total, bench.interrupted);
      if (!a.plot.empty()) write_plot(a, pg.size(), plan.dtype, bench.results);
    }
    if (!bench.first_wrong.empty())
      std::fprintf(stderr, "collie bench: wrong result: %s\n", bench.first_wrong.c_str());
    pg.barrier();
    if (bench.interrupted) return 130;
    if (bench.wrong_total > 0) {
      if (pg.rank() == 0)
        std::fprintf(stderr, "collie bench: %zu wrong elements (see #wrong)\n", bench.wrong_total);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie bench %s: %s\n", a.name.c_str(), e.what());
    return 1;
  }
}

void add_one(CLI::App& bench, const std::string& name, const std::string& description,
             std::vector<Collective> collectives) {
  auto* cmd = bench.add_subcommand(name, description);
  auto args = std::make_shared<Args>();
  args->collectives = std::move(collectives);
  args->name = name;
  cmd->add_option("-b,--minbytes", args->min_bytes, "Smallest size (bytes; K, M, G suffixes)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", args->max_bytes, "Largest size")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("64M");
  cmd->add_option("-f,--stepfactor", args->factor,
                  "Multiply the size by this from one row to the next")
      ->capture_default_str();
  cmd->add_option("-i,--stepbytes", args->step_bytes, "Add this many bytes instead of -f")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("-n,--iters", args->iters, "Timed iterations per row")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", args->warmup, "Untimed iterations before them")
      ->capture_default_str();
  cmd->add_flag("--barrier-each", args->barrier_each,
                "Enter a barrier before every timed iteration and time the collective alone, "
                "as OSU's benchmarks do (ranks of a rooted collective cannot run ahead)");
  cmd->add_option("-c,--check", args->check, "Check every result (1) or not (0)")
      ->capture_default_str();
  cmd->add_option("-o,--op", args->op, "Reduce op: sum, prod, min, max, avg, band, bor, bxor")
      ->capture_default_str();
  cmd->add_option("-d,--datatype", args->dtype,
                  "bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, "
                  "bfloat16, float32, float64 (or float, half, double, short...)")
      ->capture_default_str();
  cmd->add_option("-r,--root", args->root, "Root rank (broadcast, reduce, gather, scatter)")
      ->capture_default_str();
  cmd->add_option("--algo", args->algos,
                  "auto, all, or algorithm names (comma-separated) to compare side by side")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-g,--ranks", args->ranks,
                  "Ranks to start when run on its own (inside collie launch, srun or mpirun the "
                  "job decides)")
      ->capture_default_str();
  add_bind_option(*cmd, args->bind, "the ranks it starts itself");
  cmd->add_option("--device", args->device,
                  "Where the buffers are: host, or cuda (device memory, staged through pinned "
                  "host memory; each row also runs on host buffers and reports what staging "
                  "costs)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON document at the end instead of the table");
  cmd->add_flag("--csv", args->csv, "Print CSV rows (one per size, algorithm and placement)");
  cmd->add_flag("--progress", args->progress,
                "Show a progress bar on stderr when it is a terminal");
  cmd->add_option("--plot", args->plot, "Write bus bandwidth against size as an SVG file");
  cmd->add_option("--baseline", args->baselines,
                  "[LABEL=]FILE: another system's results to draw with --plot (CSV with size and "
                  "busbw columns, or nccl-tests output)");
  cmd->footer(
      "Each row is one size: out-of-place and in-place (all_reduce, reduce; broadcast is\n"
      "in-place only), as nccl-tests prints them.\n"
      "  size   bytes of the larger buffer (all_gather, gather: the output of n blocks;\n"
      "         reduce_scatter, scatter, all_to_all: the input of n blocks), rounded to\n"
      "         whole elements per rank; count = size / element size.\n"
      "  time   the mean over the -n timed iterations on each rank (after -w warm-up and a\n"
      "         barrier), taken as the maximum across ranks: the collective is done when\n"
      "         the slowest rank is done. Before the first row the ranks pass a token\n"
      "         around for 50 ms, so that the kernel has placed them.\n"
      "         Back to back, the ranks of a rooted collective (broadcast, reduce,\n"
      "         gather, scatter) may run ahead of the root;\n"
      "         --barrier-each times each iteration alone, after a barrier. --csv and\n"
      "         --json also give rank0_median_us: the median of rank 0's calls, each\n"
      "         timed by itself, as MPI's benchmarks (OSU's, IMB) time them.\n"
      "  algbw  size / time (GB/s = 1e9 bytes per second).\n"
      "  busbw  algbw x nccl-tests' bus factor: all_reduce 2(n-1)/n; all_gather,\n"
      "         reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast, reduce 1.\n"
      "  #wrong elements that differ from a reference computed independently (after the\n"
      "         timed iterations the inputs are refilled and the collective runs once more);\n"
      "         any wrong element makes the command exit 1.\n"
      "Inside collie launch -n N, srun or mpirun it uses the job's ranks (no MASTER_ADDR or\n"
      "MASTER_PORT needed under srun or a one-node mpirun: docs/slurm.md); on its own it\n"
      "starts --ranks processes on this machine and hosts the store on a free loopback\n"
      "port. Ctrl-C stops after the row being measured, prints the rows so far and exits\n"
      "130; SIGTERM stops a rank at once, even one stuck in a collective. --algo auto names\n"
      "the algorithm it picked: auto:ring, or auto:board for a small all_reduce or barrier\n"
      "that the ranks of one host carry on their group's board, with no message.");
  cmd->callback([args] {
    const Plan plan = make_plan(*args);  // once, before any rank starts
    if (inside_a_job()) {
      const int rc = run_rank(*args, plan, "inside a job");
      if (rc != 0) throw Exit{rc};
      return;
    }
    if (args->root < 0 || args->root >= args->ranks) {
      throw Error(fmt::format("-r: root {} is not a rank of the {} started (0 to {})", args->root,
                              args->ranks, args->ranks - 1));
    }
    const Placement placement = place_ranks(parse_binding(args->bind), args->ranks);
    const std::string how = fmt::format("{} processes started by collie bench{}", args->ranks,
                                        placement.describe());
    const int rc =
        run_standalone(args->ranks, placement, [&] { return run_rank(*args, plan, how); });
    if (rc != 0) throw Exit{rc};
  });
}

}  // namespace

void add_bench_collective_commands(CLI::App& bench) {
  for (Collective c : cs::kCollectives) {
    add_one(
        bench, std::string(cs::collective_name(c)),
        fmt::format("Time {} over a sweep of sizes, as nccl-tests does", cs::collective_name(c)),
        {c});
  }
  add_one(bench, "all", "Every collective, one after the other",
          std::vector<Collective>(std::begin(cs::kCollectives), std::end(cs::kCollectives)));
}

}  // namespace collie::cli
