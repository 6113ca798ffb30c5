// `collie explain <collective>`: runs the real schedules symbolically and
// shows them step by step (text, json, html), with their cost.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/dtype.hpp>
#include <collie/error.hpp>
#include <collie/job_config.hpp>

#include "commands.hpp"
#include "explain.hpp"

namespace collie::cli {

namespace {

namespace cs = collectives;

struct ExplainArgs {
  std::string collective;
  std::string algo = "auto";
  int ranks = 4;
  bool ranks_given = false;
  int hosts = 0;           // 0: not given (no hosts: each rank on its own)
  int ranks_per_host = 0;  // 0: --ranks / --hosts
  std::string placement = "by-host";
  double host_gbits = 10;
  double host_latency_us = 30;
  double host_burst_kib = 0;
  std::size_t count = 0;  // 0 with count_given false: the default for the collective
  bool count_given = false;
  int root = 0;
  std::string format = "text";
  std::string output;
  bool compare = false;
  std::string dtype = "float32";
  std::size_t segment_bytes = JobConfig{}.segment_bytes;
  std::string color = "auto";
  bool full = false;
  int cores = 0;  // 0: every rank has a core of its own
  std::string transport = "tcp";
};

std::string collective_list() {
  std::string out;
  for (auto c : cs::kCollectives)
    out += (out.empty() ? "" : ", ") + std::string(cs::collective_name(c));
  return out;
}

explain::Request resolve(const ExplainArgs& a) {
  explain::Request r;
  const auto c = cs::parse_collective(a.collective);
  if (!c)
    throw Error(fmt::format("explain: unknown collective '{}'; collie has: {}", a.collective,
                            collective_list()));
  r.collective = *c;
  int ranks = a.ranks;
  if (a.hosts > 0 || a.ranks_per_host > 0) {
    if (a.hosts < 1)
      throw Error("explain: --ranks-per-host needs --hosts (how many hosts)");
    int per_host = a.ranks_per_host;
    if (per_host == 0) {
      if (ranks % a.hosts != 0)
        throw Error(fmt::format("explain: --hosts {}: --ranks {} does not divide among them; give "
                                "--ranks-per-host",
                                a.hosts, ranks));
      per_host = ranks / a.hosts;
    }
    if (per_host < 1) throw Error("explain: --ranks-per-host must be at least 1");
    if (a.ranks_given && ranks != a.hosts * per_host)
      throw Error(fmt::format("explain: --ranks {} is not --hosts {} x --ranks-per-host {}", ranks,
                              a.hosts, per_host));
    ranks = a.hosts * per_host;
    r.hosts = std::make_shared<const cs::Hosts>(
        cs::uniform_hosts(a.hosts, per_host, a.placement == "round-robin"));
  }
  const int limit = a.compare ? 1024 : explain::kMaxRanks;
  if (ranks < 1 || ranks > limit)
    throw Error(fmt::format("explain: --ranks {}: explain shows 1 to {} ranks{}", ranks,
                            explain::kMaxRanks,
                            a.compare ? "" : " (--compare alone costs up to 1024)"));
  if (cs::has_root(r.collective)) {
    if (a.root < 0 || a.root >= ranks)
      throw Error(fmt::format("explain: {}: root {} is not a rank of {} (ranks 0 to {})",
                              cs::collective_name(r.collective), a.root, ranks, ranks - 1));
  } else if (a.root != 0) {
    throw Error(fmt::format("explain: {} has no root; --root is for {}",
                            cs::collective_name(r.collective),
                            "broadcast, reduce, gather, scatter"));
  }
  const auto dtype = parse_dtype(a.dtype);
  if (!dtype) {
    std::string names;
    for (auto t : kDataTypes)
      names += (names.empty() ? "" : ", ") + std::string(dtype_name(t));
    throw Error(fmt::format("explain: unknown dtype '{}'; collie has: {}", a.dtype, names));
  }
  r.dtype = std::string(dtype_name(*dtype));
  r.element_bytes = dtype_size(*dtype);
  if (a.segment_bytes < 1024)
    throw Error(fmt::format("explain: --segment-bytes {}: at least 1024, as COLLIE_SEGMENT_BYTES",
                            a.segment_bytes));
  r.segment_bytes = a.segment_bytes;
  if (a.cores < 0)
    throw Error(
        fmt::format("explain: --cores {}: a number of cores, or 0 for one per rank", a.cores));
  const double crowding = a.cores > 0 ? static_cast<double>(ranks) / a.cores : 1.0;
  r.shared_memory = a.transport == "shm";
  if (r.shared_memory) r.model = cs::shared_memory_cost_model(crowding);
  r.model.crowding = crowding;
  r.model.segment_bytes = a.segment_bytes;
  if (!(a.host_gbits > 0) || !(a.host_latency_us >= 0))
    throw Error("explain: --host-gbits must be positive and --host-latency-us not negative");
  r.model.host_beta = 8 / (a.host_gbits * 1e9);
  r.model.host_alpha = a.host_latency_us * 1e-6;
  if (!(a.host_burst_kib >= 0)) throw Error("explain: --host-burst-kib must not be negative");
  r.model.host_burst_bytes = a.host_burst_kib * 1024;
  r.model = cs::priced_as_called(r.collective, r.model);  // as Auto prices it
  // Default count: one element per rank's chunk of a buffer collective, one
  // per block of a blocked one.
  std::size_t count = a.count;
  if (!a.count_given) {
    const bool buffer = r.collective == cs::Collective::AllReduce ||
                        r.collective == cs::Collective::Reduce ||
                        r.collective == cs::Collective::Broadcast;
    count = buffer ? static_cast<std::size_t>(ranks) : 1;
  }
  if (r.collective == cs::Collective::Barrier) count = 1;
  if (const auto rules = environment::get(environment::kAlgo))
    r.rules = cs::parse_selection(*rules, "explain: COLLIE_ALGO");
  if (a.algo == "auto") {
    r.automatic = true;
    const auto* rule = cs::rule_for(r.rules, r.collective, count * r.element_bytes, ranks);
    r.by_rule = rule && rule->algorithm != cs::Algorithm::Auto;
    r.algorithm = r.by_rule ? rule->algorithm
                            : cs::auto_algorithm(r.collective, ranks, count, r.element_bytes,
                                                 r.segment_bytes, r.model, r.hosts);
  } else {
    const auto algo = cs::parse_algorithm(a.algo);
    if (!algo || *algo == cs::Algorithm::Auto || !cs::implements(r.collective, *algo))
      throw Error(fmt::format("explain: {}", cs::no_algorithm_message(r.collective, a.algo, true)));
    r.algorithm = *algo;
  }
  r.shape = cs::Shape{0, ranks, count, cs::has_root(r.collective) ? a.root : 0,
                      cs::pieces_for(count * r.element_bytes, r.segment_bytes), r.hosts};
  return r;
}

void explain_main(const ExplainArgs& a) {
  if (a.format != "text" && a.format != "json" && a.format != "html")
    throw Error(fmt::format("explain: --format {}: text, json or html", a.format));
  const auto r = resolve(a);
  std::string out;
  if (a.compare && a.format == "text") {
    out = explain::compare_text(r);
  } else if (a.compare && a.format == "json" && r.shape.world > explain::kMaxRanks) {
    out = explain::compare_json(r).dump(2) + "\n";
  } else {
    if (r.shape.world > explain::kMaxRanks)
      throw Error(fmt::format("explain: --ranks {}: the {} format shows at most {} ranks",
                              r.shape.world, a.format, explain::kMaxRanks));
    const bool summarised_text = a.format == "text" && r.shape.world > 8 && !a.full;
    const auto run = explain::run(r, !summarised_text);
    if (a.format == "text") {
      const bool tty = a.output.empty() && isatty(STDOUT_FILENO) != 0;
      const bool color = a.color == "always" || (a.color == "auto" && tty);
      out = explain::to_text(r, run, color, a.full);
    } else {
      const auto doc = explain::to_json(r, run, a.compare);
      out = a.format == "json" ? doc.dump(2) + "\n" : explain::to_html(doc);
    }
  }
  if (a.output.empty()) {
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  std::ofstream file(a.output, std::ios::binary);
  file << out;
  file.close();
  if (!file) throw Error(fmt::format("explain: cannot write {}", a.output));
}

}  // namespace

void add_explain_command(CLI::App& app) {
  auto args = std::make_shared<ExplainArgs>();
  auto* cmd = app.add_subcommand(
      "explain",
      "Show a collective's algorithm step by step: the real schedules, run on symbols instead "
      "of numbers, with their cost.");
  cmd->add_option("collective", args->collective,
                  "broadcast, reduce, all_reduce, gather, all_gather, scatter, reduce_scatter, "
                  "all_to_all or barrier")
      ->required();
  cmd->add_option("-a,--algo", args->algo,
                  "The algorithm (ring, tree, recursive_doubling, ...: the error lists a "
                  "collective's), or auto: what the runtime's cost model picks for this size")
      ->capture_default_str();
  cmd->add_option_function<int>(
         "-n,--ranks",
         [args](int n) {
           args->ranks = n;
           args->ranks_given = true;
         },
         "World size (1 to 64; with --compare up to 1024; default 4, or --hosts x "
         "--ranks-per-host)");
  cmd->add_option("--hosts", args->hosts,
                  "The ranks are on this many hosts: rings and trees go by host, two_level works within "
                  "each host, then across (as the runtime, which learns its hosts at init)");
  cmd->add_option("--ranks-per-host", args->ranks_per_host,
                  "Ranks on each host (default: --ranks / --hosts)");
  cmd->add_option("--placement", args->placement,
                  "How ranks are numbered over the hosts: by-host (0, 1, ... on host 0) or "
                  "round-robin (rank r on host r % hosts)")
      ->check(CLI::IsMember({"by-host", "round-robin"}))
      ->capture_default_str();
  cmd->add_option("--host-gbits", args->host_gbits,
                  "With --hosts: each host's link, Gbit/s, for the cost and Auto's pick (the "
                  "runtime's COLLIE_HOST_LINK)")
      ->capture_default_str();
  cmd->add_option("--host-latency-us", args->host_latency_us,
                  "With --hosts: one message's latency between hosts, microseconds")
      ->capture_default_str();
  cmd->add_option("--host-burst-kib", args->host_burst_kib,
                  "With --hosts: the bytes (KiB) a host's link lets by at once before it "
                  "keeps to its rate (a shaper's token bucket, as the runtime measures it; 0: "
                  "none)")
      ->capture_default_str();
  cmd->add_option_function<std::size_t>(
         "-c,--count",
         [args](std::size_t c) {
           args->count = c;
           args->count_given = true;
         },
         "Elements per rank as the collective's caller counts them (K, M suffixes); default: "
         "the world size for broadcast, reduce and all_reduce (one element per chunk), 1 per "
         "block for the others")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("-r,--root", args->root, "Root of broadcast, reduce, gather, scatter")
      ->capture_default_str();
  cmd->add_option("-d,--dtype", args->dtype, "Element type, for the bytes in the cost")
      ->capture_default_str();
  cmd->add_option("--segment-bytes", args->segment_bytes,
                  "The segment size to explain with (the runtime's COLLIE_SEGMENT_BYTES; this "
                  "option's default is the runtime's default): how many pieces the chain "
                  "algorithms pipeline")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--cores", args->cores,
                  "Cores of the one machine all --ranks run on, as the runtime counts them "
                  "(0: a core per rank). Fewer cores than ranks: all_reduce's cost, and "
                  "Auto's pick, use docs/algorithms.md's crowded machine (a bound of CPU "
                  "work and cache misses; over TCP the executor's overlap of steps)");
  cmd->add_option("--transport", args->transport,
                  "What carries the messages, for the cost and Auto's pick: tcp, or shm (every "
                  "rank on one host, through shared memory: the runtime's model when every rank "
                  "of the group shares its host)")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  cmd->add_option("-f,--format", args->format,
                  "text (for the terminal), json (schedule and every step's state, for other "
                  "tools) or html (one self-contained animated page)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Write to this file instead of stdout");
  cmd->add_flag("--compare", args->compare,
                "Compare the cost of every algorithm of the collective at this size (text: the "
                "table alone; json and html: added to the document)");
  cmd->add_option("--color", args->color, "auto (when stdout is a terminal), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  cmd->add_flag("--full", args->full,
                "Show every rank and every step, however many (text; by default more than 8 "
                "ranks show ranks 0, 1, the root and the last, and more than 40 steps the first "
                "20 and the last 10)");
  cmd->footer(
      "Examples:\n"
      "  collie explain all_reduce --algo ring --ranks 4\n"
      "  collie explain broadcast --algo tree --ranks 5 --root 2\n"
      "  collie explain all_reduce --ranks 8 --count 16M --compare\n"
      "  collie explain all_reduce --algo two_level --hosts 4 --ranks-per-host 2\n"
      "  collie explain all_gather --ranks 6 --format html -o all_gather.html\n"
      "Symbols: rank 0's input is a, rank 1's b, ...; a2 is element 2 of rank 0's input; a2+b2 "
      "the two combined by the reduce op. The cost is the alpha-beta model of\n"
      "docs/algorithms.md, run on the schedules themselves; Auto picks with the same model.");
  cmd->callback([args] { explain_main(*args); });
}

}  // namespace collie::cli
