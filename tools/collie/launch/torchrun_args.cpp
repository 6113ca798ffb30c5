// torchrun's command line for `collie launch` (launch/torchrun_args.hpp).
#include "torchrun_args.hpp"
#include "etcd_args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/host_cpus.hpp>
#include <collie/memory.hpp>
#include <collie/transport/interfaces.hpp>

#include "store_address.hpp"
#include "torchrun_words.hpp"

namespace collie::cli {

namespace {

// Each local rank's streams under `spec` (1 stdout, 2 stderr, 3 both).
std::vector<int> parse_streams(const std::string& spec, const char* flag, int ranks) {
  std::vector<int> streams(static_cast<std::size_t>(ranks), 0);
  if (spec.empty()) return streams;
  if (!is_stream_spec(spec)) {
    throw Error(fmt::format(
        "collie launch: {} '{}' is not a stream spec: 0 (none), 1 (stdout), 2 (stderr), 3 (both), "
        "or LOCAL_RANK:N pairs such as 0:3,1:2",
        flag, spec));
  }
  if (spec.size() == 1) {
    std::fill(streams.begin(), streams.end(), spec[0] - '0');
    return streams;
  }
  for (const auto item : items_of(spec)) {
    const int local = *parse_int(item.substr(0, item.find(':')));
    if (local < 0 || local >= ranks) {
      throw Error(fmt::format("collie launch: {} '{}' names local rank {}, but this node runs {}",
                              flag, spec, local, ranks));
    }
    streams[static_cast<std::size_t>(local)] = item.back() - '0';
  }
  return streams;
}

int resolve_nproc(const std::string& text) {
  if (text == "cpu") return host_cpus();
  if (text == "gpu" || text == "auto") {
    const int gpus = cuda::device_count();
    if (gpus > 0) return gpus;
    if (text == "auto") return host_cpus();
    throw Error("collie launch: --nproc-per-node gpu: no CUDA device is usable here (" +
                cuda::status() + ")");
  }
  const auto n = parse_int(text);
  if (!n || *n < 1) {
    throw Error(fmt::format(
        "collie launch: --nproc-per-node '{}': give a number of ranks, at least 1, or auto, cpu "
        "or gpu",
        text));
  }
  return *n;
}

// "N" or "MIN:MAX".
std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const auto low = parse_int(std::string_view(text).substr(0, colon));
  const auto high =
      colon == std::string::npos ? low : parse_int(std::string_view(text).substr(colon + 1));
  if (!low || !high || *low < 1 || *high < *low) {
    throw Error(fmt::format(
        "collie launch: --nnodes '{}' is not a number of nodes (1 or more) or MIN:MAX with "
        "1 <= MIN <= MAX",
        text));
  }
  return {*low, *high};
}

// torchrun's --rdzv-conf: "key=value,key=value".
void apply_rdzv_conf(LaunchArgs& a) {
  for (const auto item : items_of(a.rdzv_conf)) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key(item.substr(0, eq));
    const std::string value(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1));
    if (key == "join_timeout" || key == "timeout") {
      const auto s = parse_int(value);
      if (!s || *s <= 0)
        throw Error(fmt::format("collie launch: --rdzv-conf {}={}: not a number of seconds", key,
                                value));
      a.join_timeout_s = *s;
    } else if (key == "last_call_timeout") {
      const auto s = parse_int(value);
      if (!s || *s < 0)
        throw Error(fmt::format("collie launch: --rdzv-conf {}={}: not a number of seconds", key,
                                value));
      a.last_call_s = *s;
    } else if (key == "is_host") {
      a.is_host = truthy(value);
    } else if (!is_etcd_backend(a.rdzv_backend) || !apply_etcd_conf(a, key, value)) {
      throw Error(fmt::format(
          "collie launch: --rdzv-conf {}: collie cannot honour this key (it honours join_timeout "
          "and timeout, as --join-timeout; last_call_timeout; is_host; with etcd protocol, "
          "cacert, cert and key)",
          key));
    }
  }
}

// Whether `host` names this machine: a loopback name or address, or an
// address of one of its interfaces.
bool is_this_host(const std::string& host) {
  if (host == "localhost" || host.starts_with("127.") || host == "::1") return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  return !interface_with(host).empty();
}

void resolve_rendezvous(LaunchArgs& a) {
  if (a.rdzv_backend != "static" && a.rdzv_backend != "c10d" && !is_etcd_backend(a.rdzv_backend)) {
    throw Error(fmt::format(
        "collie launch: --rdzv-backend {}: use c10d (nodes numbered as they join, the store on "
        "the endpoint's node), etcd (or etcd-v2: the nodes meet in an etcd cluster, any node may "
        "be lost) or static (--node-rank)",
        a.rdzv_backend));
  }
  apply_rdzv_conf(a);
  if (is_etcd_backend(a.rdzv_backend)) {
    resolve_etcd_rendezvous(a);
    return;
  }
  if (a.rdzv_backend == "c10d" && a.nnodes_min != a.nnodes_max && a.node_rank) {
    // As torchrun ignores it: scripts pass --node_rank=$NODE_RANK to every
    // launch, elastic or not.
    a.notes.push_back(fmt::format(
        "--node-rank {} is ignored: an elastic job (--nnodes {}) numbers its nodes as they join "
        "each round",
        *a.node_rank, a.nnodes));
    a.node_rank.reset();
  }
  if (a.standalone) {
    if (a.nnodes_max > 1)
      throw Error("collie launch: --standalone is a job on this node alone: --nnodes must be 1");
    a.rdzv_backend = "c10d";
    a.master_addr = "127.0.0.1";
    a.master_port = 0;
  } else if (!a.rdzv_endpoint.empty()) {
    const auto& e = a.rdzv_endpoint;
    const bool has_port = e.starts_with("[") ? e.find("]:") != std::string::npos
                                             : std::count(e.begin(), e.end(), ':') == 1;
    const bool bare_v6 = !e.starts_with("[") && std::count(e.begin(), e.end(), ':') > 1;
    const int port = a.rdzv_backend == "c10d" ? 29400 : a.master_port.value_or(29500);
    const auto endpoint =
        parse_host_port(has_port  ? e
                        : bare_v6 ? fmt::format("[{}]:{}", e, port)
                                  : fmt::format("{}:{}", e, port));
    a.master_addr = endpoint.host;
    a.master_port = endpoint.port;
  }
  const bool many = a.nnodes_max > 1;
  if (a.rdzv_backend == "static" || a.node_rank) {
    a.node_rank_value = a.node_rank.value_or(0);
    a.host_store = a.node_rank_value == 0;
    return;
  }
  // c10d: the node that has the endpoint hosts the store and is node 0; the
  // others are numbered as they join.
  a.node_rank_value = many ? -1 : 0;
  a.host_store = !many || a.is_host.value_or(is_this_host(a.master_addr));
}

void resolve_program(LaunchArgs& a) {
  if (a.command.empty()) {
    throw Error(
        "collie launch: no program given; usage: collie launch -n N -- PROGRAM [ARGS...] (or "
        "torchrun's form: collie launch --nproc_per_node=N script.py [ARGS...])");
  }
  if (a.no_python && (a.module || a.run_path)) {
    throw Error(fmt::format("collie launch: --no-python cannot go with --{}: a {} needs Python",
                            a.module ? "module" : "run-path",
                            a.module ? "module" : "script run by path"));
  }
  if (a.module && a.run_path)
    throw Error("collie launch: --module and --run-path name the program two ways: pick one");
  const bool script = a.command[0].ends_with(".py");
  if (a.no_python || !(a.module || a.run_path || script)) return;
  std::vector<std::string> command{python_for_torch(), "-u"};
  if (a.module) command.emplace_back("-m");
  command.insert(command.end(), a.command.begin(), a.command.end());
  a.command = std::move(command);
}

// The launcher's note for flags it takes but needs not act on.
void note_unneeded(LaunchArgs& a) {
  if (!a.start_method.empty()) {
    if (a.start_method != "spawn" && a.start_method != "fork" && a.start_method != "forkserver") {
      throw Error(fmt::format(
          "collie launch: --start-method {}: torchrun knows spawn, fork and forkserver",
          a.start_method));
    }
    a.notes.push_back(fmt::format(
        "--start-method {} is not needed: collie launch starts every rank as a new process of "
        "its own",
        a.start_method));
  }
  if (!(a.monitor_interval_s > 0))
    throw Error("collie launch: --monitor-interval must be a positive number of seconds");
}

// The nodes, the store's port, restarts and the launcher's timeouts.
void check_nodes_and_limits(LaunchArgs& a) {
  const bool elastic = a.nnodes_min != a.nnodes_max;
  if (elastic && a.node_rank_value != -1) {
    throw Error(fmt::format(
        "collie launch: --nnodes {}: an elastic job numbers its nodes as they join each "
        "round: use --rdzv-backend c10d (with --rdzv-endpoint), without --node-rank",
        a.nnodes));
  }
  if (a.node_rank_value >= a.nnodes_max) {
    throw Error(fmt::format("collie launch: --node-rank {} is not in [0, {}) (--nnodes {})",
                            a.node_rank_value, a.nnodes_max, a.nnodes_max));
  }
  if (a.node_rank_value < -1) throw Error("collie launch: --node-rank must not be negative");
  if (a.max_restarts < 0) throw Error("collie launch: --max-restarts must not be negative");
  if (!(a.stop_timeout_s >= 0)) throw Error("collie launch: --stop-timeout must not be negative");
  if (!(a.node_timeout_s > 0)) throw Error("collie launch: --node-timeout must be positive");
  if (!(a.join_timeout_s > 0)) throw Error("collie launch: --join-timeout must be positive");
  // torchrun's default port when several nodes must agree on one; a free
  // port when the job is on this node alone.
  const bool many = a.nnodes_max > 1;
  a.port = a.master_port.value_or(many ? 29500 : 0);
  if (a.port < 0 || a.port > 65535)
    throw Error(fmt::format("collie launch: --master-port {} is not a port number", a.port));
  if (a.etcd) a.port = a.master_port.value_or(0);  // each round's node 0 hosts; any free port
  if (a.port == 0 && many && !a.host_store && !a.etcd) {
    throw Error(
        "collie launch: nodes other than node 0 need the store's port: pass "
        "--master-port (node 0 may use 0 with --port-file to pick a free one)");
  }
}

void resolve_output(LaunchArgs& a) {
  const int n = a.nproc_count;
  a.tee_streams = parse_streams(a.tee, "--tee", n);
  a.redirect_streams = parse_streams(a.redirects, "--redirects", n);
  a.shown.assign(static_cast<std::size_t>(n), a.local_ranks_filter.empty());
  for (const auto item : items_of(a.local_ranks_filter)) {
    const auto rank = parse_int(item);
    if (!rank || *rank < 0 || *rank >= n) {
      throw Error(fmt::format(
          "collie launch: --local-ranks-filter '{}': each must be a local rank, 0 to {}",
          a.local_ranks_filter, n - 1));
    }
    a.shown[static_cast<std::size_t>(*rank)] = true;
  }
}

void resolve_local_addr(LaunchArgs& a) {
  if (a.local_addr.empty()) return;
  a.socket_ifname = interface_with(a.local_addr);
  if (!a.socket_ifname.empty()) return;
  throw Error(fmt::format(
      "collie launch: --local-addr {} is not an address of this host's interfaces", a.local_addr));
}

// Runs `python -c` to see whether it finds torch (without importing it).
bool has_torch(const std::string& python) {
  std::vector<std::string> words{
      python, "-c",
      "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"};
  std::vector<char*> argv;
  for (auto& w : words)
    argv.push_back(w.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd : {1, 2})
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int failed = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// `name` looked up in PATH, or "".
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const auto colon = std::min(dirs.find(':'), dirs.size());
    const std::filesystem::path candidate =
        std::filesystem::path(dirs.substr(0, colon).empty() ? "." : dirs.substr(0, colon)) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    dirs.remove_prefix(std::min(colon + 1, dirs.size()));
  }
  return "";
}

}  // namespace

std::string interface_with(const std::string& address) {
  try {
    for (const auto& i : transport::list_interfaces())
      if (i.address == address) return "=" + i.name;
  } catch (const std::exception&) {
  }
  return "";
}

void resolve_torchrun(LaunchArgs& a) {
  a.nproc_count = resolve_nproc(a.nproc);
  std::tie(a.nnodes_min, a.nnodes_max) = parse_nnodes(a.nnodes);
  resolve_rendezvous(a);
  check_nodes_and_limits(a);
  note_unneeded(a);
  resolve_output(a);
  resolve_local_addr(a);
  resolve_program(a);
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (a.nproc_count > 1 && (omp == nullptr || *omp == '\0')) {
    a.omp_threads_one = true;
    a.notes.push_back(
        "every rank gets OMP_NUM_THREADS=1, as under torchrun, so that the ranks do not each "
        "start a thread per processor; set OMP_NUM_THREADS to choose another number");
  }
}

std::string python_for_torch() {
  if (const char* exec = std::getenv("PYTHON_EXEC"); exec != nullptr && *exec != '\0') return exec;
  std::vector<std::string> candidates;
  for (const auto& c : {on_path("python3"), std::string("/usr/bin/python3")}) {
    if (!c.empty() && access(c.c_str(), X_OK) == 0 &&
        std::find(candidates.begin(), candidates.end(), c) == candidates.end())
      candidates.push_back(c);
  }
  for (const auto& c : candidates)
    if (has_torch(c)) return c;
  return candidates.empty() ? "python3" : candidates.front();
}

}  // namespace collie::cli
