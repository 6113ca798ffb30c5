// A job's settings from InitOptions and the environment: torchrun's,
// Slurm's and Open MPI's variables, and collie's own (job_config.hpp).
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>
#include <collie/store/client_options.hpp>
#include <collie/job_config.hpp>

namespace collie {

namespace {

// One family of launcher variables, tried in this order.
struct Source {
  const char* name;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};
constexpr Source kSources[] = {
    {"torchrun / collie launch", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
};

int parse_int(const std::string& text, const std::string& what) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw Error(fmt::format("collie::init: {}='{}' is not an integer", what, text));
  }
  return value;
}

std::uint16_t parse_port(const std::string& text, const std::string& what) {
  const int port = parse_int(text, what);
  if (port < 1 || port > 65535) {
    throw Error(fmt::format("collie::init: {}={} is not a port number (1-65535)", what, port));
  }
  return static_cast<std::uint16_t>(port);
}

}  // namespace

std::string first_host_of_nodelist(std::string_view nodelist) {
  // The first top-level entry: commas inside brackets do not separate hosts.
  int depth = 0;
  std::size_t end = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (depth < 0) break;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const auto entry = nodelist.substr(0, end);
  if (entry.empty() || depth != 0) {
    throw Error(fmt::format("collie::init: cannot read SLURM_JOB_NODELIST='{}'", nodelist));
  }
  // Every bracket becomes the first value of its first range ("07-09" -> "07").
  std::string host;
  for (std::size_t i = 0; i < entry.size(); ++i) {
    if (entry[i] != '[') {
      host.push_back(entry[i]);
      continue;
    }
    const auto close = entry.find(']', i);
    const auto inside = entry.substr(i + 1, close - i - 1);
    const auto first = inside.substr(0, inside.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string_view::npos) {
      throw Error(fmt::format("collie::init: cannot read SLURM_JOB_NODELIST='{}'", nodelist));
    }
    host += first;
    i = close;
  }
  return host;
}

namespace {

// "262144", "256K", "256KiB", "1M", "1MiB"
// COLLIE_PORT_RANGE: "LOW-HIGH" (default 20000-29999, below Linux's
// ephemeral ports).
std::pair<int, int> parse_port_range(const std::optional<std::string>& text) {
  if (!text) return {20000, 29999};
  // A whole number, all of `part`; -1 if it is not one.
  const auto number = [](std::string_view part) {
    int value = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    return ec == std::errc() && end == part.data() + part.size() ? value : -1;
  };
  const std::string_view range = *text;
  const auto dash = range.find('-');
  const int low = dash == std::string_view::npos ? -1 : number(range.substr(0, dash));
  const int high = dash == std::string_view::npos ? -1 : number(range.substr(dash + 1));
  if (low < 1 || high > 65535 || low > high)
    throw Error(fmt::format(
        "collie::init: COLLIE_PORT_RANGE='{}' is not a range of ports like 20000-29999", *text));
  return {low, high};
}

// A port in [low, high] from a job's id: FNV-1a of the text, so every rank
// of the job computes the same one.
int derived_port(const std::string& id, int low, int high) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return low + static_cast<int>(h % static_cast<std::uint64_t>(high - low + 1));
}

std::size_t parse_bytes(const std::string& text, const char* name) {
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  std::size_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") scale = 1024;
  if (unit == "M" || unit == "MiB") scale = std::size_t{1} << 20;
  if (used == 0 || scale == 0) {
    throw Error(
        fmt::format("collie::init: {}='{}' is not a size (bytes, or with K or M)", name, text));
  }
  return static_cast<std::size_t>(value) * scale;
}

}  // namespace

JobConfig resolve_job_config(const InitOptions& options, const EnvironmentLookup& lookup) {
  JobConfig config;
  const std::string& url = options.init_method;
  if (options.store) {
    config.method = JobConfig::Method::Given;
    config.given_store = options.store;
    config.given_store_name = options.store_name;
    config.master_addr =
        !options.route_to.empty() ? options.route_to : lookup("MASTER_ADDR").value_or("");
    if (!options.store_served_at.empty()) {
      const auto at = split_host_port(options.store_served_at);
      if (!at) {
        throw Error(fmt::format("collie::init: store_served_at '{}' is not HOST:PORT",
                                options.store_served_at));
      }
      config.given_served = true;
      config.given_key_prefix = options.store_key_prefix;
      config.master_addr = at->host;
      config.master_port = at->port;
      config.store_hosted_by_launcher = true;
    }
  } else if (url == "env://" || url.empty()) {
    config.method = JobConfig::Method::Env;
  } else if (url.starts_with("tcp://")) {
    config.method = JobConfig::Method::Tcp;
    const auto address = split_host_port(std::string_view(url).substr(6));
    if (!address || address->port == 0) {
      throw Error(
          fmt::format("collie::init: '{}' is not tcp://HOST:PORT (or tcp://[IPV6]:PORT) "
                      "with a port in 1-65535",
                      url));
    }
    config.master_addr = address->host;
    config.master_port = address->port;
  } else if (url.starts_with("file://")) {
    config.method = JobConfig::Method::File;
    config.file_path = url.substr(7);
    if (!config.file_path.starts_with('/')) {
      throw Error(
          fmt::format("collie::init: '{}' needs an absolute path: file:///path/to/file", url));
    }
  } else {
    throw Error(
        fmt::format("collie::init: unknown init method '{}'; use env://, "
                    "tcp://HOST:PORT or file:///PATH",
                    url));
  }

  // Rank and world size: explicit options win, then the first launcher
  // family that sets a rank, which must also set its world size.
  const Source* source = nullptr;
  for (const auto& s : kSources) {
    if (lookup(s.rank)) {
      source = &s;
      break;
    }
  }
  if (source != nullptr) {
    const auto world = lookup(source->world_size);
    if (!world && !options.world_size) {
      throw Error(fmt::format("collie::init: {} is set but {} is not; set both ({})", source->rank,
                              source->world_size, source->name));
    }
    config.rank = parse_int(*lookup(source->rank), source->rank);
    if (world) config.world_size = parse_int(*world, source->world_size);
    if (auto local = lookup(source->local_rank)) {
      config.local_rank = parse_int(*local, source->local_rank);
    }
    config.rank_source = fmt::format("{} ({}, {})", source->name, source->rank, source->world_size);
  }
  if (options.rank) {
    config.rank = *options.rank;
    config.rank_source = "the options";
  }
  if (options.world_size) config.world_size = *options.world_size;
  if (source == nullptr && !options.rank) {
    throw Error(
        "collie::init: this process does not know its rank: set RANK and WORLD_SIZE (as "
        "torchrun and collie launch do), run it under srun (SLURM_PROCID) or mpirun "
        "(OMPI_COMM_WORLD_RANK), or pass rank and world_size in the options");
  }
  if (source == nullptr && !options.world_size) {
    throw Error("collie::init: the rank is given but not the world size; pass world_size too");
  }
  if (config.world_size < 1) {
    throw Error(fmt::format("collie::init: the world size is {}; it must be at least 1",
                            config.world_size));
  }
  if (config.rank < 0 || config.rank >= config.world_size) {
    throw Error(fmt::format("collie::init: rank {} is not in [0, {}) (from {})", config.rank,
                            config.world_size, config.rank_source));
  }
  if (config.local_rank < 0) {
    throw Error(fmt::format("collie::init: the local rank is {}; it must not be negative",
                            config.local_rank));
  }

  if (config.method == JobConfig::Method::Env) {
    auto addr = lookup("MASTER_ADDR");
    auto port = lookup("MASTER_PORT");
    const std::string_view scheduler = source != nullptr ? source->name : "";
    // Under srun or mpirun, without MASTER_ADDR: rank 0's node (loopback
    // when every rank is on one node), and a port from the job's id.
    if (!addr && scheduler == "Slurm") {
      const auto nodes = lookup("SLURM_STEP_NUM_NODES").value_or(
          lookup("SLURM_NNODES").value_or(lookup("SLURM_JOB_NUM_NODES").value_or("")));
      const auto nodelist =
          lookup("SLURM_STEP_NODELIST").value_or(lookup("SLURM_JOB_NODELIST").value_or(""));
      if (nodes == "1")
        addr = "127.0.0.1";
      else if (!nodelist.empty())
        addr = first_host_of_nodelist(nodelist);
    }
    if (!addr && scheduler == "Open MPI") {
      const auto local = lookup("OMPI_COMM_WORLD_LOCAL_SIZE");
      if (local && *local == std::to_string(config.world_size)) addr = "127.0.0.1";
    }
    if (!port && (scheduler == "Slurm" || scheduler == "Open MPI")) {
      std::optional<std::string> id;
      if (scheduler == "Slurm") {
        if (auto job = lookup("SLURM_JOB_ID").value_or(lookup("SLURM_JOBID").value_or(""));
            !job.empty())
          id = "slurm " + job + " " + lookup("SLURM_STEP_ID").value_or("0");
      } else {
        if (auto job = lookup("OMPI_MCA_ess_base_jobid").value_or(
                lookup("PMIX_NAMESPACE").value_or(lookup("PMIX_ID").value_or("")));
            !job.empty())
          id = "ompi " + job;
      }
      if (id) {
        const auto [low, high] = parse_port_range(lookup("COLLIE_PORT_RANGE"));
        const auto p = derived_port(*id, low, high);
        config.port_source = fmt::format(
            "derived from the {} job's id ({}) in COLLIE_PORT_RANGE {}-{}; set MASTER_PORT to "
            "choose another",
            scheduler, id->substr(id->find(' ') + 1), low, high);
        port = std::to_string(p);
      }
    }
    if (!addr || !port) {
      const bool multi_node_mpi = !addr && scheduler == "Open MPI";
      throw Error(fmt::format(
          "collie::init: env:// needs the store's address: set {}{}{} (torchrun and collie launch "
          "set both), or use tcp://HOST:PORT{}",
          addr ? "" : "MASTER_ADDR", !addr && !port ? " and " : "", port ? "" : "MASTER_PORT",
          multi_node_mpi ? "; mpirun across nodes: pass rank 0's node, e.g. mpirun -x "
                           "MASTER_ADDR=node01"
                         : ""));
    }
    config.master_addr = *addr;
    config.master_port = parse_port(*port, "MASTER_PORT");
  }

  if (options.timeout) {
    config.timeout = *options.timeout;
  } else if (auto text = lookup("COLLIE_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(text->c_str(), &end);
    if (end != text->c_str() + text->size() || !(seconds > 0) || !std::isfinite(seconds)) {
      throw Error(fmt::format(
          "collie::init: COLLIE_TIMEOUT='{}' is not a positive number of seconds", *text));
    }
    config.timeout =
        std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
  }
  if (config.timeout <= std::chrono::milliseconds::zero()) {
    throw Error("collie::init: the timeout must be positive");
  }
  if (options.stall_time) {
    config.stall_time = *options.stall_time;
  } else if (auto text = lookup("COLLIE_STALL_TIME")) {
    char* end = nullptr;
    const double seconds = std::strtod(text->c_str(), &end);
    if (end != text->c_str() + text->size() || !(seconds >= 0) || !std::isfinite(seconds)) {
      throw Error(fmt::format(
          "collie::init: COLLIE_STALL_TIME='{}' is not a number of seconds (0: no stall reports)",
          *text));
    }
    config.stall_time =
        std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
  }
  if (config.stall_time < std::chrono::milliseconds::zero()) {
    throw Error("collie::init: the stall time must not be negative");
  }
  config.socket_ifname =
      options.socket_ifname.value_or(lookup("COLLIE_SOCKET_IFNAME").value_or(""));
  config.token = options.token ? *options.token : store::token_from_environment(lookup);
  config.store_hosted_by_launcher =
      config.given_served || lookup("COLLIE_STORE_HOSTED").value_or("0") == "1";
  if (auto restarts = lookup("COLLIE_RESTART_COUNT")) {
    config.restart_count = parse_int(*restarts, "COLLIE_RESTART_COUNT");
  }
  if (options.algorithms) {
    config.algorithms = parse_algorithm_overrides(*options.algorithms, "InitOptions::algorithms");
  } else if (auto algo = lookup("COLLIE_ALGO")) {
    config.algorithms = parse_algorithm_overrides(*algo, "COLLIE_ALGO");
  }
  // A size in bytes: InitOptions' value, else the variable's, within range.
  auto bytes_setting = [&](const std::optional<std::size_t>& given, const char* variable,
                           std::size_t& value, std::size_t low, const char* what) {
    if (given) {
      value = *given;
    } else if (auto text = lookup(variable)) {
      value = parse_bytes(*text, variable);
    }
    if (value < low || value > (std::size_t{1} << 30))
      throw Error(fmt::format("collie::init: {} of {} bytes ({}): {}", what, value, variable,
                              low > 0 ? "choose 1 KiB to 1 GiB" : "choose at most 1 GiB"));
  };
  bytes_setting(options.segment_bytes, "COLLIE_SEGMENT_BYTES", config.segment_bytes, 1024,
                "a segment");
  bytes_setting(options.stage_whole_bytes, "COLLIE_STAGE_WHOLE_BYTES", config.stage_whole_bytes, 0,
                "a limit for staging whole");
  bytes_setting(options.stage_chunk_bytes, "COLLIE_STAGE_CHUNK_BYTES", config.stage_chunk_bytes, 0,
                "a staging chunk (0: segment by segment)");
  if (auto text = lookup("COLLIE_HOST_LINK")) {
    const auto comma = text->find(',');
    char* end = nullptr;
    const std::string rate = text->substr(0, comma);
    const double gbits = std::strtod(rate.c_str(), &end);
    bool valid = !rate.empty() && end == rate.c_str() + rate.size() && gbits > 0 &&
                 std::isfinite(gbits);
    double latency = config.host_link_latency_us;
    if (comma != std::string::npos) {
      const std::string us = text->substr(comma + 1);
      latency = std::strtod(us.c_str(), &end);
      valid = valid && !us.empty() && end == us.c_str() + us.size() && latency >= 0 &&
              std::isfinite(latency);
    }
    if (!valid)
      throw Error(fmt::format(
          "collie::init: COLLIE_HOST_LINK='{}': the link between hosts as GBITS[,LATENCY_US] "
          "(\"1\": 1 Gbit/s; \"25,5\": 25 Gbit/s and 5 us)",
          *text));
    config.host_link_gbits = gbits;
    config.host_link_latency_us = latency;
  }
  if (options.spin) {
    config.transport.spin = *options.spin;
  } else if (auto text = lookup("COLLIE_SPIN_US")) {
    const int us = parse_int(*text, "COLLIE_SPIN_US");
    if (us < 0 || us > 1000000)
      throw Error(fmt::format("collie::init: COLLIE_SPIN_US='{}': choose 0 to 1000000", *text));
    config.transport.spin = std::chrono::microseconds(us);
  }
  if (config.transport.spin.count() < 0) throw Error("collie::init: the spin must not be negative");
  config.transport.backend = options.transport.value_or(lookup("COLLIE_TRANSPORT").value_or("auto"));
  if (config.transport.backend != "auto" && config.transport.backend != "tcp" &&
      config.transport.backend != "shm") {
    throw Error(fmt::format(
        "collie::init: {}='{}': choose auto (shared memory between ranks of one host, TCP "
        "between hosts), tcp or shm",
        options.transport ? "the transport option" : "COLLIE_TRANSPORT", config.transport.backend));
  }
  if (auto text = lookup("COLLIE_SHM_SINGLE_COPY"))
    config.transport.shm_single_copy_from = parse_bytes(*text, "COLLIE_SHM_SINGLE_COPY");
  config.transport.shm_stores = lookup("COLLIE_SHM_STORES").value_or("auto");
  if (config.transport.shm_stores != "auto" && config.transport.shm_stores != "cached" &&
      config.transport.shm_stores != "streaming") {
    throw Error(fmt::format(
        "collie::init: COLLIE_SHM_STORES='{}': choose auto (whichever measures faster), cached "
        "or streaming (non-temporal)",
        config.transport.shm_stores));
  }
  config.trace_dir = options.trace_dir.value_or(lookup("COLLIE_TRACE").value_or(""));
  return config;
}

AlgorithmOverrides parse_algorithm_overrides(std::string_view text, std::string_view source) {
  AlgorithmOverrides out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const auto item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw Error(
          fmt::format("collie::init: {}: '{}' is not COLLECTIVE:ALGORITHM (for example "
                      "all_reduce:ring,broadcast:tree)",
                      source, item));
    }
    const auto c = collectives::parse_collective(item.substr(0, colon));
    if (!c) {
      std::vector<std::string_view> all;
      for (auto known : collectives::kCollectives)
        all.push_back(collectives::collective_name(known));
      throw Error(fmt::format("collie::init: {}: no collective '{}'; collectives: {}", source,
                              item.substr(0, colon), fmt::join(all, ", ")));
    }
    const auto name = item.substr(colon + 1);
    const auto a = collectives::parse_algorithm(name);
    if (!a || (*a != collectives::Algorithm::Auto && !collectives::implements(*c, *a))) {
      throw Error(fmt::format("collie::init: {}: {}", source,
                              collectives::no_algorithm_message(*c, name, true)));
    }
    out.emplace_back(*c, *a);
  }
  return out;
}

JobConfig resolve_job_config(const InitOptions& options) {
  return resolve_job_config(options, [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  });
}

}  // namespace collie
