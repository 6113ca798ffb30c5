// The output of `collie bench <collective>|all` (bench/output.hpp).
#include "output.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/memory.hpp>
#include <collie/version.hpp>

#include "job.hpp"
#include "plot.hpp"
#include "size_label.hpp"
#include "collective_check.hpp"
#include "json_out.hpp"

namespace collie::cli {

namespace cs = collectives;

void Printer::header(const ProcessGroup& pg, const std::string& how) {
  if (a.csv) {
    std::puts(
        "collective,algorithm,chosen,ranks,size_bytes,count,dtype,op,root,placement,time_us,"
        "algbw_gbps,busbw_gbps,wrong,device,host_time_us,rank0_median_us");
    std::fflush(stdout);
    return;
  }
  if (!table()) return;
  std::string algos;
  for (const auto& s : a.algos)
    algos += (algos.empty() ? "" : ",") + s;
  std::printf("# collie %s bench %s: %d ranks on %s (%s)\n", collie::version(), a.name.c_str(),
              pg.size(), host_name().c_str(), how.c_str());
  std::printf(
      "#  dtype %s, op %s, root %d, algorithm %s; sizes %s to %s, %s; %d iterations "
      "after %d warm-up%s; check %s\n",
      std::string(dtype_name(dtype)).c_str(), std::string(reduce_op_name(op)).c_str(), a.root,
      algos.c_str(), size_label(static_cast<double>(a.min_bytes)).c_str(),
      size_label(static_cast<double>(a.max_bytes)).c_str(),
      a.step_bytes > 0 ? fmt::format("step {} B", a.step_bytes).c_str()
                       : fmt::format("factor {:g}", a.factor).c_str(),
      a.iters, a.warmup, a.barrier_each ? ", each after a barrier" : "",
      a.check ? "on" : "off");
  std::printf("#  transport (rank 0's peers): %s\n", transport.c_str());
  std::printf("#  hosts: %s\n", hosts.c_str());
  if (a.device == "cuda") {
    std::printf(
        "#  buffers in CUDA device memory (%s), staged through pinned host memory; each row "
        "also runs on host buffers: 'staging' is the device time against it\n",
        cuda::status().c_str());
  }
  std::printf(
      "#  time: the mean over the iterations, the maximum across ranks; algbw = size / "
      "time; busbw = algbw x bus factor\n#\n");
  std::fflush(stdout);
}

void Printer::columns(Collective c, bool has_out_of_place, bool has_in_place) {
  if (!table()) return;
  const int w = static_cast<int>(algo_width);
  std::printf("# %s (bus factor %s)\n", std::string(cs::collective_name(c)).c_str(),
              std::string(bus_factor_text(c)).c_str());
  std::printf("# %10s %12s %8s %6s %5s  %-*s %-31s %-31s\n", "", "", "", "", "", w, "",
              has_out_of_place ? "    out-of-place" : "", has_in_place ? "    in-place" : "");
  const bool dev = a.device == "cuda";
  std::printf("# %10s %12s %8s %6s %5s  %-*s %8s %7s %7s %6s %8s %7s %7s %6s%s\n", "size",
              "count", "type", "redop", "root", w, "algo", "time", "algbw", "busbw", "#wrong",
              "time", "algbw", "busbw", "#wrong", dev ? "  host time  staging" : "");
  std::printf("# %10s %12s %8s %6s %5s  %-*s %8s %7s %7s %6s %8s %7s %7s %6s%s\n", "(B)",
              "(elements)", "", "", "", w, "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
              "(GB/s)", "", dev ? "       (us)      (%)" : "");
  std::fflush(stdout);
}

void Printer::row(const std::optional<Result>& out, const std::optional<Result>& in) {
  const Result& r = out ? *out : *in;
  const bool reduces = cs::reduces(r.collective);
  const int root = cs::has_root(r.collective) ? a.root : -1;
  if (a.csv) {
    for (const auto* x : {out ? &*out : nullptr, in ? &*in : nullptr}) {
      if (x == nullptr) continue;
      std::printf("%s,%s,%s,%d,%zu,%zu,%s,%s,%d,%s,%.3f,%.6f,%.6f,%zu,%s,%.3f,%.3f\n",
                  std::string(cs::collective_name(x->collective)).c_str(), x->algorithm.c_str(),
                  x->chosen.c_str(), ranks, x->bytes, x->count,
                  std::string(dtype_name(dtype)).c_str(),
                  reduces ? std::string(reduce_op_name(op)).c_str() : "none", root,
                  x->in_place ? "in-place" : "out-of-place", x->time_us, x->algbw, x->busbw,
                  x->wrong, a.device.c_str(), x->host_time_us, x->rank0_median_us);
    }
    std::fflush(stdout);
    return;
  }
  if (!table()) return;
  clear_progress();
  auto cell = [](const std::optional<Result>& x) {
    if (!x) return fmt::format("{:>8} {:>7} {:>7} {:>6}", "-", "-", "-", "-");
    return fmt::format("{:>8.2f} {:>7.3f} {:>7.3f} {:>6}", x->time_us, x->algbw, x->busbw,
                       x->wrong);
  };
  const std::string algo = r.algorithm == "auto" ? fmt::format("auto:{}", r.chosen) : r.chosen;
  // --device cuda: the first placement's time on host buffers, and what
  // staging adds to it.
  const std::string staging =
      a.device == "cuda" ? fmt::format("  {:>9.2f} {:>+8.1f}", r.host_time_us, staging_percent(r))
                         : "";
  std::printf("  %10zu %12zu %8s %6s %5d  %-*s %s %s%s\n", r.bytes, r.count,
              std::string(dtype_name(dtype)).c_str(),
              reduces ? std::string(reduce_op_name(op)).c_str() : "none", root,
              static_cast<int>(algo_width), algo.c_str(), cell(out).c_str(), cell(in).c_str(),
              staging.c_str());
  std::fflush(stdout);
}

void Printer::footer(const std::vector<Result>& results, std::size_t wrong, bool interrupted) {
  clear_progress();
  double sum = 0;
  std::size_t cells = 0;
  std::vector<std::pair<std::string, std::pair<double, std::size_t>>> per;
  for (const auto& r : results) {
    if (r.collective == Collective::Barrier) continue;
    sum += r.busbw;
    ++cells;
    const bool by_algorithm = several_algorithms(a);
    const std::string key = fmt::format(
        "{}{}{}", a.collectives.size() > 1 ? cs::collective_name(r.collective) : "",
        a.collectives.size() > 1 && by_algorithm ? " " : "", by_algorithm ? r.algorithm : "");
    auto it = std::find_if(per.begin(), per.end(), [&](const auto& p) { return p.first == key; });
    if (it == per.end()) {
      per.push_back({key, {0.0, 0}});
      it = per.end() - 1;
    }
    it->second.first += r.busbw;
    ++it->second.second;
  }
  const double avg = cells == 0 ? 0 : sum / static_cast<double>(cells);
  if (a.json) {
    print_json(results, wrong, interrupted, avg);
    return;
  }
  if (!table()) return;
  if (interrupted) std::printf("# Interrupted: the rows above are those measured so far\n");
  std::printf("# Out of bounds values : %zu %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %.4f GB/s\n", avg);
  if (per.size() > 1 || (per.size() == 1 && !per[0].first.empty())) {
    for (const auto& [key, v] : per)
      std::printf("#   %-40s %.4f GB/s\n", key.c_str(),
                  v.second == 0 ? 0.0 : v.first / static_cast<double>(v.second));
  }
  std::printf("#\n");
  std::fflush(stdout);
}

void Printer::print_json(const std::vector<Result>& results, std::size_t wrong, bool interrupted,
                double avg) {
  nlohmann::ordered_json doc = {{"collie", collie::version()},
                                {"benchmark", a.name},
                                {"host", host_name()},
                                {"ranks", ranks},
                                {"transport", transport},
                                {"hosts", hosts},
                                {"dtype", dtype_name(dtype)},
                                {"op", reduce_op_name(op)},
                                {"root", a.root},
                                {"iterations", a.iters},
                                {"warmup", a.warmup},
                                {"check", a.check},
                                {"barrier_each", a.barrier_each},
                                {"device", a.device},
                                {"time", a.barrier_each
                                             ? "mean over iterations (each timed alone, "
                                               "after a barrier), maximum across ranks"
                                             : "mean over iterations, maximum across ranks"},
                                {"rank0_median", "the median of rank 0's calls, each timed by itself"}};
  auto& rows = doc["results"] = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    rows.push_back({{"collective", cs::collective_name(r.collective)},
                    {"algorithm", r.algorithm},
                    {"chosen", r.chosen},
                    {"size_bytes", r.bytes},
                    {"count", r.count},
                    {"placement", r.in_place ? "in-place" : "out-of-place"},
                    {"time_us", rounded(r.time_us, 3)},
                    {"rank0_median_us", rounded(r.rank0_median_us, 3)},
                    {"algbw_gbps", rounded(r.algbw, 4)},
                    {"busbw_gbps", rounded(r.busbw, 4)},
                    {"wrong", r.wrong}});
    if (a.device == "cuda") {
      rows.back()["host_time_us"] = rounded(r.host_time_us, 3);
      rows.back()["staging_percent"] = rounded(staging_percent(r), 2);
    }
  }
  doc["wrong"] = wrong;
  doc["avg_busbw_gbps"] = rounded(avg, 4);
  doc["interrupted"] = interrupted;
  std::fputs(dump_records(doc).c_str(), stdout);
  std::fflush(stdout);
}


void write_plot(const Args& a, int ranks, DataType dtype, const std::vector<Result>& results) {
  std::vector<PlotSeries> series;
  for (const auto& r : results) {
    if (r.collective == Collective::Barrier) continue;
    // Out-of-place where a collective has it, else in-place.
    if (r.in_place == check::has_out_of_place_form(r.collective)) continue;
    std::string label =
        a.collectives.size() > 1 ? std::string(cs::collective_name(r.collective)) : "";
    if (a.collectives.size() == 1 || several_algorithms(a))
      label += (label.empty() ? "" : " ") + std::string("collie ") + r.algorithm;
    auto it =
        std::find_if(series.begin(), series.end(), [&](const auto& s) { return s.label == label; });
    if (it == series.end()) {
      series.push_back({label, {}, false});
      it = series.end() - 1;
    }
    it->points.push_back({static_cast<double>(r.bytes), r.busbw});
  }
  for (const auto& spec : a.baselines) {
    const auto eq = spec.find('=');
    const std::string label = eq == std::string::npos ? "" : spec.substr(0, eq);
    const std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
    for (auto& s : read_baseline(path, label))
      series.push_back(std::move(s));
  }
  const std::string title =
      fmt::format("collie {}: {} ranks, {}, bus bandwidth", a.name, ranks, dtype_name(dtype));
  std::ofstream out(a.plot);
  out << svg_plot(title, series);
  if (!out) throw Error(fmt::format("--plot: cannot write {}", a.plot));
}

}  // namespace collie::cli
