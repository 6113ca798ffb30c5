// `collie launch`: start the ranks of a job on this node, like torchrun.
//
// The launcher on node 0 hosts the job's rendezvous store. It starts N local
// ranks with torchrun's environment variables (launch_ranks.hpp), prefixes
// every line they print with their rank, forwards SIGINT/SIGTERM, and when
// one rank fails it stops the others, prints which rank the others blame
// (launch_blame.hpp; else which failed first) and how, and restarts the whole
// group up to --max-restarts times. With several nodes, the launchers tell
// each other about failures, restarts and completion through the store
// (launch_nodes.hpp). This file: the command line, the job's secret and
// store, and the attempts.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>
#include <collie/host_cpus.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>

#include "address.hpp"
#include "commands.hpp"
#include "launch_blame.hpp"
#include "launch_nodes.hpp"
#include "launch_ranks.hpp"

namespace collie::cli {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct LaunchArgs {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;
  std::string port_file;
  int max_restarts = 0;
  bool tee = false;
  std::string log_dir = "collie-logs";
  double stop_timeout_s = 5;
  double node_timeout_s = 300;
  std::string token_file;     // the job's secret; see resolve_token()
  bool insecure = false;      // several nodes without a secret
  std::string bind = "auto";  // cpu_binding.hpp
  std::vector<std::string> command;
};

enum class Outcome { Success, Failed, Interrupted };

void say(const std::string& text) {
  const std::string line = "collie launch: " + text + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

std::string seconds(Clock::duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

class Launcher {
 public:
  explicit Launcher(LaunchArgs args) : args_(std::move(args)) { validate(); }

  int run() {
    block_signals();
    start_store();
    LocalRanks ranks(args_.command, args_.node_rank * args_.nproc, args_.nproc, placement_,
                     args_.tee ? args_.log_dir : std::string());
    ranks_ = &ranks;
    for (attempt_ = 0;; ++attempt_) {
      const Outcome outcome = run_attempt();
      if (outcome == Outcome::Success) return finish_success();
      summarize(outcome);
      if (outcome == Outcome::Interrupted) return 128 + interrupt_signal_;
      if (attempt_ >= args_.max_restarts) {
        say(fmt::format("no restarts left (--max-restarts {}); exiting with code {}",
                        args_.max_restarts, exit_code_));
        return exit_code_;
      }
      say(fmt::format("restarting every rank (restart {} of {})", attempt_ + 1,
                      args_.max_restarts));
      if (team_) team_->restart_barrier();
    }
  }

 private:
  bool multi_node() const { return args_.nnodes > 1; }
  int world_size() const { return args_.nproc * args_.nnodes; }
  std::chrono::milliseconds node_timeout() const {
    return std::chrono::milliseconds(static_cast<std::int64_t>(args_.node_timeout_s * 1000));
  }

  void validate() {
    if (args_.command.empty()) {
      throw Error(
          "collie launch: no program given; usage: collie launch -n N -- PROGRAM [ARGS...]");
    }
    if (args_.nproc < 1) throw Error("collie launch: -n/--nproc-per-node must be at least 1");
    if (args_.nnodes < 1) throw Error("collie launch: --nnodes must be at least 1");
    if (args_.node_rank < 0 || args_.node_rank >= args_.nnodes) {
      throw Error(fmt::format("collie launch: --node-rank {} is not in [0, {}) (--nnodes {})",
                              args_.node_rank, args_.nnodes, args_.nnodes));
    }
    if (args_.max_restarts < 0) throw Error("collie launch: --max-restarts must not be negative");
    placement_ = place_ranks(parse_binding(args_.bind), args_.nproc);
    if (!(args_.stop_timeout_s >= 0))
      throw Error("collie launch: --stop-timeout must not be negative");
    if (!(args_.node_timeout_s > 0)) throw Error("collie launch: --node-timeout must be positive");
    // torchrun's default port when several nodes must agree on one; a free
    // port when the job is on this node alone.
    port_ = args_.master_port.value_or(multi_node() ? 29500 : 0);
    if (port_ < 0 || port_ > 65535) {
      throw Error(fmt::format("collie launch: --master-port {} is not a port number", port_));
    }
    if (port_ == 0 && multi_node() && args_.node_rank != 0) {
      throw Error(
          "collie launch: nodes other than node 0 need the store's port: pass "
          "--master-port (node 0 may use 0 with --port-file to pick a free one)");
    }
    resolve_token();  // before anything starts: a job without one may be refused
  }

  void block_signals() {
    sigemptyset(&signals_);
    for (int s : {SIGINT, SIGTERM, SIGCHLD})
      sigaddset(&signals_, s);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    signal_fd_ = signalfd(-1, &signals_, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) throw Error("collie launch: cannot create a signalfd");
    // A closed terminal or pipe on our side must not kill the launcher.
    signal(SIGPIPE, SIG_IGN);
  }

  // The job's secret, which the store and every rank's handshakes prove:
  // --token-file, else COLLIE_STORE_TOKEN or COLLIE_STORE_TOKEN_FILE; on one
  // node, else a fresh random one that only this launcher and its ranks
  // know; several nodes must share one, or say --insecure.
  void resolve_token() {
    if (!args_.token_file.empty()) {
      token_ = store::read_token_file(args_.token_file);
      return;
    }
    token_ = store::token_from_environment();
    if (!token_.empty()) return;
    if (!multi_node()) {
      token_ = store::random_token();
      return;
    }
    if (!args_.insecure) {
      throw Error(fmt::format(
          "collie launch: a job on several nodes needs a secret that every node shares, or "
          "anyone who can reach port {} can join it as a rank or stop it: give every node the "
          "same --token-file (or COLLIE_STORE_TOKEN_FILE, or COLLIE_STORE_TOKEN), made once "
          "with e.g. `head -c 32 /dev/urandom | base64 > job.token`; --insecure runs without "
          "one",
          port_));
    }
    say(fmt::format(
        "WARNING: --insecure: this job has no secret. Anyone who can reach port {} on {} can "
        "join it as a rank, read and change its store, or stop it.",
        port_, args_.node_rank == 0 ? "this host" : args_.master_addr));
  }

  void start_store() {
    const std::string& token = token_;
    if (args_.node_rank == 0) {
      store::ServerOptions options;
      // A job on this node alone keeps its store on loopback.
      options.host = multi_node() ? std::string() : args_.master_addr;
      options.port = static_cast<std::uint16_t>(port_);
      options.token = token;
      // torch programs rendezvous in this store too (TORCHELASTIC_USE_AGENT_STORE
      // below): on one node its clients are on loopback and must run as
      // this user; across nodes torch's protocol cannot prove the job's
      // secret, so only with --insecure.
      options.torch_clients = serves_torch();
      options.torch_refusal_hint =
          "collie launch serves torch's clients across nodes only with --insecure (torch's "
          "protocol cannot prove the job's secret); docs/torch.md";
      store::raise_open_file_limit();
      server_ = std::make_unique<store::StoreServer>(options);
      port_ = server_->port();
      if (!args_.port_file.empty()) write_port_file(args_.port_file, server_->port());
      if (multi_node()) say(fmt::format("store listening on port {}", port_));
    }
    if (multi_node()) {
      team_ = std::make_unique<NodeTeam>(
          args_.node_rank == 0 ? std::string("127.0.0.1") : args_.master_addr,
          static_cast<std::uint16_t>(port_), token, args_.node_rank, args_.nnodes, node_timeout());
    }
  }

  bool serves_torch() const { return !multi_node() || args_.insecure; }

  // PYTHONPATH with this build's collie_torch package first, where it is.
  static std::optional<std::string> python_path() {
    const std::filesystem::path dir = COLLIE_PYTHON_DIR;
    std::error_code ec;
    if (!std::filesystem::exists(dir / "collie_torch" / "__init__.py", ec)) return std::nullopt;
    const char* now = std::getenv("PYTHONPATH");
    return dir.string() + (now != nullptr && *now != '\0' ? ":" + std::string(now) : "");
  }

  std::vector<std::string> environment_for(const LocalRank& r) const {
    auto env = base_environment_for(r);
    // Bound ranks: how many processors they share, unless the user said.
    if (placement_.shared > 0 && std::getenv(kHostCpusVariable) == nullptr)
      env.push_back(fmt::format("{}={}", kHostCpusVariable, placement_.shared));
    if (serves_torch()) env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
    if (const auto path = python_path()) env.push_back("PYTHONPATH=" + *path);
    return env;
  }

  std::vector<std::string> base_environment_for(const LocalRank& r) const {
    return {
        fmt::format("MASTER_ADDR={}", args_.master_addr),
        fmt::format("MASTER_PORT={}", port_),
        fmt::format("WORLD_SIZE={}", world_size()),
        fmt::format("RANK={}", r.rank),
        fmt::format("LOCAL_RANK={}", r.local_rank),
        fmt::format("LOCAL_WORLD_SIZE={}", args_.nproc),
        fmt::format("GROUP_RANK={}", args_.node_rank),
        fmt::format("GROUP_WORLD_SIZE={}", args_.nnodes),
        fmt::format("COLLIE_RESTART_COUNT={}", attempt_),
        fmt::format("TORCHELASTIC_RESTART_COUNT={}", attempt_),
        "COLLIE_STORE_HOSTED=1",
        // The job's secret, inherited: never on a command line.
        fmt::format("COLLIE_STORE_TOKEN={}", token_),
        "COLLIE_STORE_TOKEN_FILE=",
    };
  }

  // A rank exited: the first failure of an attempt stops the others.
  void on_exit(LocalRank& r) {
    const int status = *r.status;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || ranks_->stopping()) return;
    first_failure_ = &r;
    exit_code_ = exit_code_of(status);
    failure_text_ = fmt::format("rank {} (node {}, pid {}) failed first: {}, {} after it started",
                                r.rank, args_.node_rank, r.pid, describe_wait_status(status),
                                seconds(r.ended - r.started));
    if (team_) {
      try {
        team_->report_failure(failure_text_, std::chrono::seconds(10));
      } catch (const Error& e) {
        say(fmt::format("could not tell the other nodes: {}", e.what()));
      }
    }
    ranks_->begin_stop(SIGTERM, args_.stop_timeout_s);
  }

  void handle_signals() {
    signalfd_siginfo info{};
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      const int number = static_cast<int>(info.ssi_signo);
      if (number == SIGCHLD) continue;  // reaped in the loop
      if (interrupt_signal_ == 0) {
        interrupt_signal_ = number;
        say(fmt::format("received {}; forwarding it to every rank",
                        number == SIGINT ? "SIGINT" : "SIGTERM"));
        if (team_) {
          try {
            team_->report_failure(fmt::format("node {} was interrupted", args_.node_rank), 5s);
          } catch (const Error&) {
          }
        }
        ranks_->begin_stop(number, args_.stop_timeout_s);
      } else {
        say("received a second signal; killing every rank");
        ranks_->begin_stop(SIGKILL, args_.stop_timeout_s);
      }
    }
  }

  Outcome run_attempt() {
    first_failure_ = nullptr;
    blamed_ = -1;
    remote_failure_.clear();
    failure_text_.clear();
    if (team_) team_->begin_attempt(attempt_);
    ranks_->start(attempt_, [this](const LocalRank& r) { return environment_for(r); });
    while (true) {
      ranks_->wait_for_output(100ms, signal_fd_);
      handle_signals();
      ranks_->pump_all();
      ranks_->reap([this](LocalRank& r) { on_exit(r); });
      if (team_ && !ranks_->stopping()) {
        if (auto failed = team_->other_failure()) {
          remote_failure_ = *failed;
          exit_code_ = 1;
          ranks_->begin_stop(SIGTERM, args_.stop_timeout_s);
        }
      }
      if (ranks_->kill_late()) {
        say(fmt::format("ranks still running {} after being asked to stop; sending SIGKILL",
                        seconds(ranks_->since_stop())));
      }
      if (ranks_->all_reaped()) break;
    }
    ranks_->drain_output();
    if (interrupt_signal_ != 0) return Outcome::Interrupted;
    if (first_failure_ != nullptr || !remote_failure_.empty()) return Outcome::Failed;
    return Outcome::Success;
  }

  void summarize(Outcome outcome) {
    if (outcome == Outcome::Interrupted) {
      say(fmt::format("stopped by {} (attempt {} of {})",
                      interrupt_signal_ == SIGINT ? "SIGINT" : "SIGTERM", attempt_ + 1,
                      args_.max_restarts + 1));
    } else if (first_failure_ != nullptr) {
      const auto blamed = blamed_rank();
      if (!blamed.empty()) {
        say(blamed);
        say("(" + failure_text_ + ")");
      } else {
        say(failure_text_);
      }
    } else {
      say(fmt::format("another node failed: {}", remote_failure_));
    }
    std::string table = fmt::format("collie launch: ranks on node {}:\n", args_.node_rank);
    for (const auto& r : ranks_->ranks()) {
      std::string how = describe_wait_status(*r.status);
      if (r.stopped_by_launcher) how = "stopped by collie launch (" + how + ")";
      const char* mark = r.rank == blamed_      ? "   <- blamed by the others"
                         : &r != first_failure_ ? ""
                         : blamed_ >= 0         ? "   <- exited first"
                                                : "   <- failed first";
      table += fmt::format("  rank {:>3}  pid {:>7}  {}{}\n", r.rank, r.pid, how, mark);
    }
    std::fwrite(table.data(), 1, table.size(), stderr);
    std::fflush(stderr);
  }

  // "rank 2 (node 0) is the one the others blame: ..." (launch_blame.hpp);
  // "" when no rank blamed another.
  std::string blamed_rank() {
    try {
      std::unique_ptr<store::StoreClient> local;
      store::Store* s = team_ ? &team_->store() : nullptr;
      if (s == nullptr && server_ != nullptr) {
        store::ClientOptions options;
        options.token = token_;
        options.timeout = 2s;
        options.connect_timeout = 2s;
        local = std::make_unique<store::StoreClient>("127.0.0.1", static_cast<std::uint16_t>(port_),
                                                     options);
        s = local.get();
      }
      if (s == nullptr) return "";
      const auto verdict = read_blames(*s, attempt_);
      if (!verdict) return "";
      blamed_ = verdict->culprit;
      return fmt::format(
          "rank {} (node {}) is the one the others blame: rank{} {} failed losing it or waiting "
          "for it; rank {} said: {}",
          verdict->culprit, verdict->culprit / args_.nproc, verdict->blamers.size() == 1 ? "" : "s",
          fmt::join(verdict->blamers, ", "), verdict->quoted, verdict->said);
    } catch (const std::exception& e) {
      say(fmt::format("could not read whom the ranks blame: {}", e.what()));
      return "";
    }
  }

  int finish_success() {
    if (!team_) return 0;
    if (const auto failed = team_->finish()) {
      say(*failed);
      return 1;
    }
    return 0;
  }

  LaunchArgs args_;
  int port_ = 0;
  int attempt_ = 0;
  Placement placement_;  // where each local rank runs (--bind)
  std::string token_;    // the job's secret (resolve_token())
  sigset_t signals_{};
  int signal_fd_ = -1;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<NodeTeam> team_;  // several nodes only
  LocalRanks* ranks_ = nullptr;     // this attempt's (run()'s)
  const LocalRank* first_failure_ = nullptr;
  int blamed_ = -1;  // the rank the failed ranks blame (blamed_rank()); -1: none
  std::string failure_text_;
  std::string remote_failure_;
  int exit_code_ = 0;
  int interrupt_signal_ = 0;
};

}  // namespace

void add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("launch", "Start the ranks of a job on this node, like torchrun");
  auto args = std::make_shared<LaunchArgs>();
  auto master_port = std::make_shared<int>(-1);
  cmd->add_option("-n,--nproc-per-node", args->nproc, "Ranks to start on this node")
      ->capture_default_str();
  cmd->add_option("--nnodes", args->nnodes, "Number of nodes in the job")->capture_default_str();
  cmd->add_option("--node-rank", args->node_rank, "This node's index, 0 to nnodes-1")
      ->capture_default_str();
  cmd->add_option("--master-addr", args->master_addr, "Address of node 0, where the store runs")
      ->capture_default_str();
  cmd->add_option("--master-port", *master_port,
                  "Port of the store (default: a free port on one node, 29500 on several)");
  cmd->add_option("--port-file", args->port_file,
                  "Node 0: write the store's port to this file once it listens");
  cmd->add_option("--max-restarts", args->max_restarts,
                  "Restart every rank this many times after a failure")
      ->capture_default_str();
  cmd->add_flag("--tee", args->tee,
                "Also write each rank's output to LOG_DIR/attempt-A/rank-R.log");
  cmd->add_option("--log-dir", args->log_dir, "Where --tee writes")->capture_default_str();
  cmd->add_option("--stop-timeout", args->stop_timeout_s,
                  "Seconds ranks get after SIGTERM/SIGINT before SIGKILL")
      ->capture_default_str();
  cmd->add_option("--node-timeout", args->node_timeout_s,
                  "Several nodes: seconds without a heartbeat from another node's launcher "
                  "before the job is stopped as failed")
      ->capture_default_str();
  cmd->add_option("--token-file", args->token_file,
                  "The job's secret, the same file on every node (default: "
                  "$COLLIE_STORE_TOKEN, $COLLIE_STORE_TOKEN_FILE, or on one node a random "
                  "secret for this job)");
  cmd->add_flag("--insecure", args->insecure,
                "Several nodes without a secret: anyone who can reach the store's port may "
                "join or stop the job (a warning says so)");
  add_bind_option(*cmd, args->bind, "the ranks");
  cmd->add_option("command", args->command, "The program and its arguments (after --)")->required();
  cmd->footer(
      "Every rank gets torchrun's variables: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT,\n"
      "and COLLIE_RESTART_COUNT and COLLIE_STORE_HOSTED=1 (this launcher hosts the store);\n"
      "ranks bound by --bind also get COLLIE_HOST_CPUS, the processors they share.\n"
      "torch programs: the store also serves torch's TCPStore clients (on one node: on\n"
      "loopback, to this user's processes only; on several: with --insecure only), and the\n"
      "ranks get TORCHELASTIC_USE_AGENT_STORE=True, so torch.distributed's env:// meets\n"
      "there, and PYTHONPATH with this build's collie_torch first (docs/torch.md).\n"
      "The job has a secret that its store and every rank's handshake check: a random one\n"
      "on one node (COLLIE_STORE_TOKEN in the ranks' environment, never on a command line);\n"
      "several nodes share one with --token-file (or refuse to start without --insecure).\n"
      "Output lines are prefixed with '[rank R] '. When a rank fails, the others get SIGTERM\n"
      "and SIGCONT (then SIGKILL after --stop-timeout), a summary names the rank the failed\n"
      "ranks blame (the one they lost or waited for; else the rank that failed first), and\n"
      "the exit code is the first failed rank's (128+N for signal N). SIGINT/SIGTERM are\n"
      "forwarded.\n"
      "Several nodes: run the same command on each with --nnodes K --node-rank R\n"
      "--master-addr NODE0 --master-port P; a failure on any node stops (or restarts) all.");
  cmd->callback([args, master_port] {
    if (*master_port >= 0) args->master_port = *master_port;
    throw Exit{Launcher(*args).run()};
  });
}

}  // namespace collie::cli
