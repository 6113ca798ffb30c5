// collie_fit_cost: fits the crowded-machine constants of Auto's cost model
// (collectives/cost.hpp: flow_bytes, work_per_segment, work_per_byte,
// work_per_warm_byte, work_per_cold_byte; the cache sizes and the window
// stay this project's machine's) to measured all_reduces, and shows what
// Auto picks against the fastest algorithm.
//
//   collie bench all_reduce --ranks 4 --csv
//     --algo auto,ring,halving_doubling,recursive_doubling,tree > run-1.csv   (repeat)
//   collie_fit_cost 4 2 run-*.csv         # 4 ranks, 2 per core: fit, then the table
//   collie_fit_cost 4 2 --check run-*.csv # the table with the model as built
//
// The in-place time of every launch is pooled per (size, algorithm) and the
// median taken. A fit tries a grid of the five constants and keeps the one
// whose worst pick (the picked algorithm's median over the fastest's) is
// least, then the geometric mean of the picks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <collie/collectives/cost.hpp>

namespace cs = collie::collectives;

namespace {

using Medians = std::map<std::size_t, std::map<std::string, double>>;  // size -> algo -> us

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ','))
    out.push_back(cell);
  return out;
}

Medians read_medians(const std::vector<std::string>& files) {
  std::map<std::size_t, std::map<std::string, std::vector<double>>> times;
  for (const auto& path : files) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::string line;
    std::getline(in, line);
    const auto header = split(line);
    const auto column = [&](const char* name) {
      const auto it = std::find(header.begin(), header.end(), name);
      if (it == header.end()) throw std::runtime_error(path + ": no column " + name);
      return static_cast<std::size_t>(it - header.begin());
    };
    const auto algo = column("algorithm"), size = column("size_bytes"),
               placement = column("placement"), time = column("time_us");
    while (std::getline(in, line)) {
      const auto row = split(line);
      if (row.size() < header.size() || row[placement] != "in-place" || row[algo] == "auto")
        continue;
      times[std::stoull(row[size])][row[algo]].push_back(std::stod(row[time]));
    }
  }
  Medians out;
  for (auto& [size, algos] : times)
    for (auto& [algo, v] : algos) {
      std::sort(v.begin(), v.end());
      const auto n = v.size();
      out[size][algo] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
  return out;
}

struct Score {
  double worst = 0, geo = 0;
};

Score score(const Medians& m, int ranks, const cs::CostModel& model, bool print) {
  Score s;
  double logs = 0;
  for (const auto& [size, algos] : m) {
    const auto pick = std::string(cs::algorithm_name(cs::auto_algorithm(
        cs::Collective::AllReduce, ranks, size / 4, 4, model.segment_bytes, model)));
    const auto fastest = std::min_element(algos.begin(), algos.end(), [](auto& a, auto& b) {
      return a.second < b.second;
    });
    const auto it = algos.find(pick);
    if (it == algos.end()) continue;  // not measured
    const double ratio = it->second / fastest->second;
    s.worst = std::max(s.worst, ratio);
    logs += std::log(ratio);
    if (print)
      std::printf("%10zu  fastest %-18s %10.1f us   Auto %-18s %10.1f us   %.2f%s\n", size,
                  fastest->first.c_str(), fastest->second, pick.c_str(), it->second, ratio,
                  ratio > 1.1 ? "  > 1.1" : "");
  }
  s.geo = std::exp(logs / static_cast<double>(std::max<std::size_t>(1, m.size())));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s RANKS RANKS_PER_CORE [--check] [--segment-bytes N] FILE.csv...\n"
                 "  FILE.csv: collie bench all_reduce --csv with several --algo, float32\n"
                 "  --segment-bytes: the COLLIE_SEGMENT_BYTES they ran with (default: the\n"
                 "  runtime's default)\n",
                 argv[0]);
    return 2;
  }
  try {
    const int ranks = std::atoi(argv[1]);
    cs::CostModel model;
    model.crowding = std::atof(argv[2]);
    bool check = false;
    std::vector<std::string> files;
    for (int i = 3; i < argc; ++i) {
      if (std::string(argv[i]) == "--check") {
        check = true;
      } else if (std::string(argv[i]) == "--segment-bytes") {
        const char* text = i + 1 < argc ? argv[++i] : "";
        char* end = nullptr;
        model.segment_bytes = std::strtoull(text, &end, 10);
        if (*text == '\0' || *end != '\0' || model.segment_bytes == 0)
          throw std::runtime_error(std::string("--segment-bytes '") + text +
                                   "': a whole number of bytes, at least 1 (the "
                                   "COLLIE_SEGMENT_BYTES the launches ran with)");
      } else
        files.push_back(argv[i]);
    }
    const auto medians = read_medians(files);
    if (!check && model.crowding > 1) {
      cs::CostModel best = model;
      Score best_score{1e9, 1e9};
      for (std::size_t kib : {64, 128, 256})
        for (double us : {2.0, 3.0, 5.0, 7.0, 10.0})
          for (double ns : {0.05, 0.1, 0.125, 0.15, 0.2})
            for (double warm : {0.0, 0.01, 0.03, 0.05})
              for (double cold : {0.0, 0.05, 0.1, 0.2}) {
                cs::CostModel m = model;
                m.flow_bytes = kib << 10;
                m.work_per_segment = us * 1e-6;
                m.work_per_byte = ns * 1e-9;
                m.work_per_warm_byte = warm * 1e-9;
                m.work_per_cold_byte = cold * 1e-9;
                const auto s = score(medians, ranks, m, false);
                if (s.worst < best_score.worst - 1e-9 ||
                    (s.worst < best_score.worst + 1e-9 && s.geo < best_score.geo)) {
                  best = m;
                  best_score = s;
                }
              }
      std::printf(
          "best fit: flow_bytes %zu KiB, work_per_segment %.3g us, work_per_byte %.3g ns, "
          "work_per_warm_byte %.3g ns, work_per_cold_byte %.3g ns\n",
          best.flow_bytes >> 10, best.work_per_segment * 1e6, best.work_per_byte * 1e9,
          best.work_per_warm_byte * 1e9, best.work_per_cold_byte * 1e9);
      model = best;
    }
    const auto s = score(medians, ranks, model, true);
    std::printf("%d ranks, %.3g per core, flow %zu KiB, work_per_segment %.3g us, work_per_byte "
                "%.3g ns, warm %.3g ns, cold %.3g ns: worst pick %.2fx the fastest, geometric "
                "mean %.3f\n",
                ranks, model.crowding, model.flow_bytes >> 10, model.work_per_segment * 1e6,
                model.work_per_byte * 1e9, model.work_per_warm_byte * 1e9,
                model.work_per_cold_byte * 1e9, s.worst, s.geo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie_fit_cost: %s\n", e.what());
    return 1;
  }
}
