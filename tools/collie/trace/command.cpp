// `collie trace merge DIR -o trace.json`: the per-rank traces that
// COLLIE_TRACE=DIR writes, on one timeline (chrome://tracing, Perfetto).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <collie/error.hpp>

#include "commands.hpp"

namespace collie::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct MergeArgs {
  std::string dir;
  std::string output = "trace.json";
};

struct RankTrace {
  int rank = 0;
  fs::path path;
  json events;
  long long unix_us = 0;
  bool truncated = false;
};

// The rank of "collie-trace-rank<R>.json", or -1 for another name.
int rank_of(const std::string& file) {
  const std::string prefix = "collie-trace-rank", suffix = ".json";
  if (file.size() <= prefix.size() + suffix.size() || file.rfind(prefix, 0) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const char* first = file.data() + prefix.size();
  const char* last = file.data() + file.size() - suffix.size();
  int rank = -1;
  const auto [end, ec] = std::from_chars(first, last, rank);
  return ec == std::errc() && end == last ? rank : -1;
}

RankTrace read_rank(const fs::path& path, int rank) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("trace merge: cannot open {}: {}", path.string(), std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  RankTrace t;
  t.rank = rank;
  t.path = path;
  std::string body = text.str();
  t.events = json::parse(body, nullptr, false);
  if (t.events.is_discarded()) {
    // A rank that died before closing its array: the trace-event format
    // allows a missing "]"; so do we (after the last complete event).
    const auto last = body.rfind("}");
    if (last != std::string::npos) {
      t.events = json::parse(body.substr(0, last + 1) + "\n]", nullptr, false);
      t.truncated = !t.events.is_discarded();
    }
  }
  if (t.events.is_discarded() || !t.events.is_array())
    throw Error(fmt::format("trace merge: {} is not a trace-event JSON array (was it written by "
                            "COLLIE_TRACE?)",
                            path.string()));
  bool found = false;
  for (const auto& e : t.events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name" && e.contains("args") &&
        e["args"].contains("collie_unix_us")) {
      t.unix_us = e["args"]["collie_unix_us"].get<long long>();
      found = true;
    }
  }
  if (!found)
    throw Error(fmt::format("trace merge: {} has no collie clock (process_name metadata with "
                            "collie_unix_us): not a collie trace",
                            path.string()));
  return t;
}

void merge_main(const MergeArgs& a) {
  const fs::path dir(a.dir);
  if (!fs::is_directory(dir))
    throw Error(fmt::format("trace merge: {} is not a directory (give the COLLIE_TRACE directory)",
                            a.dir));
  std::vector<RankTrace> ranks;
  std::vector<std::string> others;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto file = entry.path().filename().string();
    const int rank = entry.is_regular_file() ? rank_of(file) : -1;
    if (rank >= 0)
      ranks.push_back(read_rank(entry.path(), rank));
    else
      others.push_back(file);
  }
  if (ranks.empty())
    throw Error(fmt::format("trace merge: no collie-trace-rank<R>.json in {}{}", a.dir,
                            others.empty() ? " (it is empty)"
                                           : fmt::format(" (it holds: {})", fmt::join(others, ", "))));
  std::sort(ranks.begin(), ranks.end(),
            [](const RankTrace& x, const RankTrace& y) { return x.rank < y.rank; });
  long long origin = ranks.front().unix_us;
  for (const auto& r : ranks) origin = std::min(origin, r.unix_us);
  json merged = json::array();
  std::size_t events = 0;
  for (auto& r : ranks) {
    // Each rank's ts 0 is its own start; on the merged timeline, its wall
    // clock minus the earliest rank's.
    const double shift = static_cast<double>(r.unix_us - origin);
    for (auto& e : r.events) {
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + shift;
      if (e.value("ph", "") != "M") ++events;
      merged.push_back(std::move(e));
    }
    if (r.truncated)
      std::fprintf(stderr, "collie trace merge: %s was cut short (rank %d did not finish); merged "
                           "its complete events\n",
                   r.path.string().c_str(), r.rank);
  }
  json doc;
  doc["traceEvents"] = std::move(merged);
  doc["displayTimeUnit"] = "ns";
  doc["otherData"] = {{"generator", "collie trace merge"},
                      {"ranks", ranks.size()},
                      {"collie_unix_us_at_zero", origin}};
  std::ofstream out(a.output, std::ios::binary);
  out << doc.dump() << "\n";
  out.close();
  if (!out) throw Error(fmt::format("trace merge: cannot write {}", a.output));
  std::printf("merged %zu rank%s, %zu events, into %s\n", ranks.size(), ranks.size() == 1 ? "" : "s",
              events, a.output.c_str());
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto* trace = app.add_subcommand(
      "trace", "Work with the traces that COLLIE_TRACE=DIR makes every rank write.");
  trace->require_subcommand(1);
  auto args = std::make_shared<MergeArgs>();
  auto* merge = trace->add_subcommand(
      "merge",
      "Merge DIR/collie-trace-rank<R>.json into one Chrome trace-event file: one process per "
      "rank, lined up by wall clock; open it in chrome://tracing or ui.perfetto.dev.");
  merge->add_option("dir", args->dir, "The COLLIE_TRACE directory")->required();
  merge->add_option("-o,--output", args->output, "The merged trace")->capture_default_str();
  merge->callback([args] { merge_main(*args); });
}

}  // namespace collie::cli
