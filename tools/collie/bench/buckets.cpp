// `collie bench buckets`: a data-parallel step's gradient buckets, as DDP
// issues them: async all_reduces of mixed sizes posted back to back, then
// waited. Each bucket is timed from the posting of the set to its own end,
// next to the same bucket posted alone, and the whole set next to the sum
// of the buckets alone: what several calls in flight (COLLIE_ASYNC_CALLS)
// save a small bucket queued behind a large one.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/process_group.hpp>

#include "commands.hpp"
#include "cpu_binding.hpp"
#include "job.hpp"
#include "size_label.hpp"

namespace collie::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BucketArgs {
  // DDP's order: the buckets of the last layers (large) come first.
  std::vector<std::string> sizes{"4M", "4K", "1M", "4K", "256K", "4K", "64K", "4K"};
  int iters = 20;
  int warmup = 3;
  int ranks = 4;
  std::string bind = "auto";
};

double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Rank r's element i of bucket b in iteration it: small integers, so that
// every sum is exact in float32.
float input(int rank, std::size_t b, std::size_t i, int it) {
  return static_cast<float>((rank + 1) * static_cast<int>(b + 1) + static_cast<int>(i % 7) + it % 3);
}

struct Timings {
  std::vector<std::vector<double>> alone, in_set;  // [bucket][iteration], us
  std::vector<double> set_total;                   // [iteration], us
  std::size_t wrong = 0;
};

Timings measure(ProcessGroup& pg, const std::vector<std::size_t>& counts, const BucketArgs& a) {
  const std::size_t n = counts.size();
  std::vector<std::vector<float>> buffers(n);
  for (std::size_t b = 0; b < n; ++b)
    buffers[b].resize(counts[b]);
  auto fill = [&](std::size_t b, int it) {
    for (std::size_t i = 0; i < counts[b]; ++i)
      buffers[b][i] = input(pg.rank(), b, i, it);
  };
  // Every element against the sum over ranks of input(), in closed form
  // (a loop over the ranks would cost count x ranks a bucket): every
  // partial sum is a whole number below 2^24 up to thousands of ranks, so
  // float32 holds it exactly in any order.
  const double ranks = pg.size();
  auto check = [&](std::size_t b, int it) {
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < counts[b]; ++i) {
      const double want = static_cast<double>(b + 1) * ranks * (ranks + 1) / 2 +
                          ranks * static_cast<double>(static_cast<int>(i % 7) + it % 3);
      wrong += static_cast<double>(buffers[b][i]) != want ? 1 : 0;
    }
    return wrong;
  };
  // Waited smallest first, so that a larger one waited before it cannot
  // delay a bucket's time.
  std::vector<std::size_t> by_size(n);
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](std::size_t x, std::size_t y) { return counts[x] < counts[y]; });
  // For tests of the check: COLLIE_BENCH_SPOIL_RANK=R makes rank R change
  // one element of each set's first bucket before it is checked.
  const char* spoil = std::getenv("COLLIE_BENCH_SPOIL_RANK");
  const bool spoils = spoil != nullptr && std::atoi(spoil) == pg.rank();
  Timings t;
  t.alone.assign(n, {});
  t.in_set.assign(n, {});
  for (int it = 0; it < a.warmup + a.iters; ++it) {
    const bool timed = it >= a.warmup;
    // Each bucket alone, then the set; the same inputs each time.
    for (std::size_t b = 0; b < n; ++b) {
      fill(b, it);
      pg.barrier();
      const auto start = Clock::now();
      pg.all_reduce_async(std::span(buffers[b])).wait();
      if (timed) t.alone[b].push_back(us_since(start));
      t.wrong += check(b, it);
    }
    for (std::size_t b = 0; b < n; ++b)
      fill(b, it);
    pg.barrier();
    const auto start = Clock::now();
    std::vector<Work> works;
    works.reserve(n);
    for (std::size_t b = 0; b < n; ++b)
      works.push_back(pg.all_reduce_async(std::span(buffers[b])));
    // A bucket's time: the first look that found it done (after each wait,
    // every bucket is looked at).
    std::vector<double> done(n, -1);
    for (const auto b : by_size) {
      if (done[b] >= 0) continue;
      works[b].wait();
      const double now = us_since(start);
      for (std::size_t o = 0; o < n; ++o) {
        if (done[o] < 0 && works[o].is_completed()) done[o] = now;
      }
    }
    for (std::size_t b = 0; b < n && timed; ++b)
      t.in_set[b].push_back(done[b]);
    if (timed) t.set_total.push_back(us_since(start));
    if (spoils && counts[0] > 0) buffers[0][0] += 1;
    for (std::size_t b = 0; b < n; ++b)
      t.wrong += check(b, it);
  }
  return t;
}

int run_rank(const BucketArgs& a, const std::vector<std::size_t>& counts) {
  auto pg = init();
  const auto t = measure(pg, counts, a);
  // Each figure by both methods: rank 0's median, and the mean over
  // iterations taken as the maximum across ranks.
  const std::size_t n = counts.size();
  std::vector<double> means;
  for (std::size_t b = 0; b < n; ++b) {
    means.push_back(mean(t.alone[b]));
    means.push_back(mean(t.in_set[b]));
  }
  means.push_back(mean(t.set_total));
  pg.all_reduce(std::span(means), ReduceOp::Max);
  std::vector<std::uint64_t> wrong{t.wrong};
  pg.all_reduce(std::span(wrong));
  if (pg.rank() == 0) {
    fmt::print("# collie bench buckets: {} ranks, {} async all_reduces (float32, sum) posted "
               "together, then waited; {} iterations after {} warm-up\n",
               pg.size(), n, a.iters, a.warmup);
    fmt::print("# each row: that bucket posted alone, and in the set (from the set's posting to "
               "its own end);\n# rank 0's median, and (in brackets) the mean taken as the "
               "maximum across ranks, us\n");
    fmt::print("{:>6} {:>10} {:>22} {:>22} {:>14}\n", "bucket", "size", "alone", "in the set",
               "set / alone");
    double alone_sum = 0, alone_sum_max = 0;
    for (std::size_t b = 0; b < n; ++b) {
      const double alone = median(t.alone[b]), in_set = median(t.in_set[b]);
      alone_sum += alone;
      alone_sum_max += means[2 * b];
      fmt::print("{:>6} {:>10} {:>10.1f} ({:>9.1f}) {:>10.1f} ({:>9.1f}) {:>6.2f} ({:>5.2f})\n", b,
                 size_label(counts[b] * sizeof(float)), alone, means[2 * b], in_set,
                 means[2 * b + 1], in_set / alone, means[2 * b + 1] / means[2 * b]);
    }
    const double total = median(t.set_total);
    fmt::print("{:>6} {:>10} {:>10.1f} ({:>9.1f}) {:>10.1f} ({:>9.1f}) {:>6.2f} ({:>5.2f})\n",
               "set", "", alone_sum, alone_sum_max, total, means.back(), total / alone_sum,
               means.back() / alone_sum_max);
    fmt::print("# wrong elements: {}\n", wrong[0]);
  }
  return wrong[0] == 0 ? 0 : 1;
}

}  // namespace

void add_bench_buckets_command(CLI::App& bench) {
  auto args = std::make_shared<BucketArgs>();
  auto* cmd = bench.add_subcommand(
      "buckets", "Time async all_reduces of mixed sizes posted together, as DDP's buckets");
  cmd->add_option("--sizes", args->sizes, "The buckets' sizes in bytes, in posting order (K, M)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--iters", args->iters, "Timed iterations")->capture_default_str();
  cmd->add_option("-w,--warmup", args->warmup, "Warm-up iterations")->capture_default_str();
  cmd->add_option("-g,--ranks", args->ranks,
                  "Ranks to start when run on its own (inside collie launch, srun or mpirun the "
                  "job decides)")
      ->capture_default_str();
  add_bind_option(*cmd, args->bind, "the ranks it starts itself");
  cmd->footer(
      "Each iteration posts every bucket alone (posted, then waited, after a barrier),\n"
      "then the whole set back to back and waits for them smallest first, so that a\n"
      "small bucket's time is its own end, not a larger one's. How many run at once is\n"
      "COLLIE_ASYNC_CALLS (default 2; 1: one at a time, as before). Every element of\n"
      "every result is checked against sums computed here; a wrong one makes it exit 1.");
  cmd->callback([args] {
    std::vector<std::size_t> counts;
    for (const auto& s : args->sizes) {
      const auto parsed = environment::size_in_bytes(s);
      if (!parsed) throw Error(fmt::format("--sizes: '{}' is not a size (bytes; K, M, G)", s));
      const auto bytes = *parsed;
      if (bytes < sizeof(float)) throw Error(fmt::format("--sizes: {} is under one float32", s));
      counts.push_back(bytes / sizeof(float));
    }
    if (counts.empty()) throw Error("--sizes: no bucket");
    if (inside_a_job()) {
      if (const int rc = run_rank(*args, counts); rc != 0) throw Exit{rc};
      return;
    }
    const Placement placement = place_ranks(parse_binding(args->bind), args->ranks);
    const int rc = run_standalone(args->ranks, placement, [&] { return run_rank(*args, counts); });
    if (rc != 0) throw Exit{rc};
  });
}

}  // namespace collie::cli
