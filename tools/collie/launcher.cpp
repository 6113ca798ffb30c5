// `collie launch` on one node: the secret, the store, the attempts
// (launcher.hpp).
#include "launcher.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>
#include <collie/store/torch_relay.hpp>
#include <collie/transport/interfaces.hpp>

#include "address.hpp"
#include "launch_blame.hpp"
#include "launch_nodes.hpp"
#include "launch_ranks.hpp"
#include "launch_summary.hpp"
#include "rank_environment.hpp"
#include "torchrun_args.hpp"

namespace collie::cli {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

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
    for (const auto& note : args_.notes)
      say(note);
    block_signals();
    start_store();
    node_rank_ = team_ ? team_->node_rank() : args_.node_rank_value;
    RankOutput output;
    if (!args_.tee.empty() || !args_.redirects.empty()) output.log_dir = args_.log_dir;
    for (int local = 0; local < args_.nproc_count; ++local) {
      const auto i = static_cast<std::size_t>(local);
      output.logged.push_back(args_.tee_streams[i] | args_.redirect_streams[i]);
      output.shown.push_back(args_.shown[i] ? 3 & ~args_.redirect_streams[i] : 0);
    }
    int restarts = 0;  // failures restarted; a change of nodes is no failure
    for (attempt_ = 0;; ++attempt_) {
      if (elastic()) join_round();
      // (An elastic job's node may have another number in each round.)
      LocalRanks ranks(args_.command, node_rank_ * args_.nproc_count, args_.nproc_count,
                       placement_, output);
      ranks_ = &ranks;
      const Outcome outcome = run_attempt();
      if (outcome == Outcome::Success) return finish_success();
      summarize(outcome);
      if (outcome == Outcome::Interrupted) return 128 + interrupt_signal_;
      const bool regroup = elastic() && team_->regrouped();
      if (!regroup && restarts++ >= args_.max_restarts) {
        say(fmt::format("no restarts left (--max-restarts {}); exiting with code {}",
                        args_.max_restarts, exit_code_));
        if (team_) team_->end_job(fmt::format("it failed (no restarts left): {}",
                                              failure_text_.empty() ? remote_failure_
                                                                    : failure_text_));
        return exit_code_;
      }
      if (regroup) {
        say("meeting again to take in the waiting node (a change of nodes, not a restart)");
      } else if (elastic()) {
        say(fmt::format("restart {} of {}: meeting again with the nodes that come (--nnodes {})",
                        restarts, args_.max_restarts, args_.nnodes));
      } else {
        say(fmt::format("restarting every rank (restart {} of {})", restarts,
                        args_.max_restarts));
      }
      if (team_ && !elastic()) team_->restart_barrier();
    }
  }

 private:
  bool multi_node() const { return args_.nnodes_max > 1; }
  bool elastic() const { return args_.nnodes_min != args_.nnodes_max; }
  int nodes() const { return nodes_; }

  // An elastic job's round: who is in it, and who left since the last.
  void join_round() {
    NodeTeam::Elastic e;
    e.min_nodes = args_.nnodes_min;
    e.max_nodes = args_.nnodes_max;
    e.last_call = std::chrono::milliseconds(static_cast<std::int64_t>(args_.last_call_s * 1000));
    e.closes = args_.host_store;
    e.check_signals = [this] {
      signalfd_siginfo info{};
      while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) {
          throw Error(fmt::format("collie launch: stopped by {} while waiting for round {} of "
                                  "the rendezvous",
                                  info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", attempt_));
        }
      }
    };
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const auto round = team_->rendezvous(attempt_, e, fmt::format("{} pid {}", host, getpid()));
    std::vector<std::string> left;
    for (const auto& m : members_)
      if (std::find(round.members.begin(), round.members.end(), m) == round.members.end())
        left.push_back(m);
    attempt_ = round.attempt;
    node_rank_ = round.node_rank;
    nodes_ = round.nodes;
    members_ = round.members;
    say(fmt::format("round {}: {} nodes ({}), {} ranks; this is node {}", attempt_, nodes_,
                    fmt::join(members_, ", "), nodes_ * args_.nproc_count, node_rank_));
    if (!left.empty()) say(fmt::format("not in this round: {}", fmt::join(left, ", ")));
  }
  static std::chrono::milliseconds of_seconds(double s) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
  }
  NodeTeam::Timeouts timeouts() const {
    return {of_seconds(args_.node_timeout_s), of_seconds(args_.join_timeout_s)};
  }

  void validate() {
    if (args_.command.empty()) {
      throw Error(
          "collie launch: no program given; usage: collie launch -n N -- PROGRAM [ARGS...] (or "
          "torchrun's form: collie launch --nproc_per_node=N script.py [ARGS...])");
    }
    nodes_ = args_.nnodes_max;
    if (elastic() && args_.node_rank_value != -1) {
      throw Error(fmt::format(
          "collie launch: --nnodes {}: an elastic job numbers its nodes as they join each "
          "round: use --rdzv-backend c10d (with --rdzv-endpoint), without --node-rank",
          args_.nnodes));
    }
    if (args_.node_rank_value >= nodes()) {
      throw Error(fmt::format("collie launch: --node-rank {} is not in [0, {}) (--nnodes {})",
                              args_.node_rank_value, nodes(), nodes()));
    }
    if (args_.node_rank_value < -1)
      throw Error("collie launch: --node-rank must not be negative");
    if (args_.max_restarts < 0) throw Error("collie launch: --max-restarts must not be negative");
    placement_ = place_ranks(parse_binding(args_.bind), args_.nproc_count);
    if (!(args_.stop_timeout_s >= 0))
      throw Error("collie launch: --stop-timeout must not be negative");
    if (!(args_.node_timeout_s > 0)) throw Error("collie launch: --node-timeout must be positive");
    if (!(args_.join_timeout_s > 0)) throw Error("collie launch: --join-timeout must be positive");
    // torchrun's default port when several nodes must agree on one; a free
    // port when the job is on this node alone.
    port_ = args_.master_port.value_or(multi_node() ? 29500 : 0);
    if (port_ < 0 || port_ > 65535) {
      throw Error(fmt::format("collie launch: --master-port {} is not a port number", port_));
    }
    if (port_ == 0 && multi_node() && !args_.host_store) {
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
        port_, args_.host_store ? "this host" : args_.master_addr));
  }

  void start_store() {
    if (args_.host_store) {
      store::ServerOptions options;
      // A job on this node alone keeps its store on loopback.
      options.host = multi_node() ? std::string() : args_.master_addr;
      options.port = static_cast<std::uint16_t>(port_);
      options.token = token_;
      // torch programs rendezvous in this store too (TORCHELASTIC_USE_AGENT_STORE
      // below): on one node its clients are on loopback and must run as
      // this user; across nodes torch's protocol cannot prove the job's
      // secret, so only with --insecure.
      options.torch_clients = true;
      // Across nodes, on loopback only: the other nodes' torch clients come
      // through their launcher's relay, which proves the job's secret.
      options.torch_loopback_only = secure_nodes();
      options.torch_refusal_hint =
          "collie launch's ranks reach the store through their node's relay on loopback; "
          "docs/launching.md";
      store::raise_open_file_limit();
      try {
        server_ = std::make_unique<store::StoreServer>(options);
      } catch (const Error& e) {
        // torchrun's c10d: a node that has the endpoint's address but finds
        // its port taken (another node's launcher on this host) joins it.
        if (args_.node_rank_value >= 0 || args_.is_host.has_value()) throw;
        say(fmt::format("not hosting the store ({}): joining the one at {}:{}", e.what(),
                        args_.master_addr, port_));
        args_.host_store = false;
      }
      if (server_) {
        port_ = server_->port();
        if (!args_.port_file.empty()) write_port_file(args_.port_file, server_->port());
        if (multi_node()) say(fmt::format("store listening on port {}", port_));
      }
    }
    if (multi_node()) {
      const int rank = elastic()          ? NodeTeam::kElastic
                       : args_.host_store ? 0
                                          : args_.node_rank_value;
      team_ = std::make_unique<NodeTeam>(args_.host_store ? std::string("127.0.0.1")
                                                          : args_.master_addr,
                                         static_cast<std::uint16_t>(port_), token_, rank, nodes(),
                                         timeouts());
      if (args_.node_rank_value < 0 && !elastic())
        say(fmt::format("joined as node {}", team_->node_rank()));
    }
    store_host_ = args_.master_addr;
    store_port_ = port_;
    if (secure_nodes()) {
      // The ranks reach the store on this host's loopback: torch's clients
      // there are served (as this user's), where across hosts they could
      // not prove the secret. Off the store's node, through a relay.
      if (!args_.host_store) {
        store::ClientOptions options;
        options.token = token_;
        options.connect_timeout = timeouts().join;
        relay_ = std::make_unique<store::TorchRelay>(args_.master_addr,
                                                     static_cast<std::uint16_t>(port_), options);
      }
      store_host_ = "127.0.0.1";
      store_port_ = relay_ ? relay_->port() : port_;
      // Their own connections still leave by the interface toward the store's host.
      socket_ifname_ = args_.socket_ifname;
      if (socket_ifname_.empty() && !environment::get(environment::kSocketIfname))
        socket_ifname_ = interface_toward(args_.master_addr);
    } else {
      socket_ifname_ = args_.socket_ifname;
    }
  }

  // Several nodes with a secret: the ranks meet on loopback (above).
  bool secure_nodes() const { return multi_node() && !args_.insecure; }

  // "=eth0": the interface this host reaches `host` by ("" if none is found).
  static std::string interface_toward(const std::string& host) {
    try {
      return interface_with(transport::route_source_address(host));
    } catch (const std::exception&) {
      return "";
    }
  }

  std::vector<std::string> environment_for(const LocalRank& r) const {
    RankPlace place;
    place.rank = r.rank;
    place.local_rank = r.local_rank;
    place.node_rank = node_rank_;
    place.nodes = nodes();
    place.attempt = attempt_;
    place.store_host = store_host_;
    place.port = store_port_;
    place.socket_ifname = socket_ifname_;
    place.token = token_;
    place.shared_cpus = placement_.shared;
    place.error_file = error_files_.path(attempt_, r.rank);
    return rank_environment(args_, place);
  }

  // A rank exited: the first failure of an attempt stops the others.
  void on_exit(LocalRank& r) {
    const int status = *r.status;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || ranks_->stopping()) return;
    if (args_.master_worker && r.rank != 0) {
      // The master names the worker in its own errors and goes on.
      say(fmt::format("rank {} (a worker, node {}, pid {}) failed: {}, {} after it started; the "
                      "master carries on",
                      r.rank, node_rank_, r.pid, describe_wait_status(status),
                      seconds(r.ended - r.started)));
      return;
    }
    first_failure_ = &r;
    exit_code_ = exit_code_of(status);
    failure_text_ = fmt::format("rank {} (node {}, pid {}) failed first: {}, {} after it started",
                                r.rank, node_rank_, r.pid, describe_wait_status(status),
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
            team_->report_failure(fmt::format("node {} was interrupted", node_rank_), 5s);
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
    const auto slice = std::min(
        100ms, std::chrono::milliseconds(static_cast<std::int64_t>(args_.monitor_interval_s * 1000)));
    while (true) {
      ranks_->wait_for_output(std::max(slice, 1ms), signal_fd_);
      handle_signals();
      ranks_->pump_all();
      ranks_->reap([this](LocalRank& r) { on_exit(r); });
      if (team_ && !ranks_->stopping()) {
        if (auto failed = team_->other_failure()) {
          remote_failure_ = *failed;
          exit_code_ = 1;
          ranks_->begin_stop(SIGTERM, args_.stop_timeout_s);
        } else if (auto waiting = elastic() ? team_->newcomer(args_.nnodes_max) : std::nullopt) {
          // Marked before any rank stops: every node then counts it alike.
          remote_failure_ = *waiting;
          try {
            team_->mark_regroup();
            team_->report_failure(*waiting, 10s);
          } catch (const Error& e) {
            say(fmt::format("could not tell the other nodes: {}", e.what()));
          }
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
    } else if (elastic() && team_->regrouped()) {
      say(fmt::format("a change of nodes: {}", remote_failure_));
    } else {
      say(fmt::format("another node failed: {}", remote_failure_));
    }
    if (const auto cause = root_cause(error_files_, attempt_, *ranks_, first_failure_);
        !cause.empty())
      say(cause);
    const auto table = rank_table(node_rank_, *ranks_, first_failure_, blamed_);
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
          verdict->culprit, verdict->culprit / args_.nproc_count,
          verdict->blamers.size() == 1 ? "" : "s", fmt::join(verdict->blamers, ", "),
          verdict->quoted, verdict->said);
    } catch (const std::exception& e) {
      say(fmt::format("could not read whom the ranks blame: {}", e.what()));
      return "";
    }
  }

  int finish_success() {
    if (!team_) return 0;
    if (const auto failed = team_->finish(args_.host_store)) {
      say(*failed);
      return 1;
    }
    if (elastic()) team_->end_job("it succeeded");
    return 0;
  }

  LaunchArgs args_;
  int port_ = 0;
  int node_rank_ = 0;
  int nodes_ = 1;                     // this attempt's (an elastic job's change)
  std::vector<std::string> members_;  // an elastic job's nodes this round
  int attempt_ = 0;
  Placement placement_;  // where each local rank runs (--bind)
  std::string token_;    // the job's secret (resolve_token())
  ErrorFiles error_files_;
  sigset_t signals_{};
  int signal_fd_ = -1;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::TorchRelay> relay_;  // nodes but the store's, with a secret
  std::string store_host_;     // the store as the ranks reach it (MASTER_ADDR, MASTER_PORT)
  int store_port_ = 0;
  std::string socket_ifname_;  // the ranks' COLLIE_SOCKET_IFNAME ("" to leave theirs)
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

int run_launcher(const LaunchArgs& args) {
  return Launcher(args).run();
}

}  // namespace collie::cli
