// `collie launch` on one node: the secret, the store, the attempts
// (launch/launcher.hpp).
#include "launcher.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>

#include "blame.hpp"
#include "newcomers.hpp"
#include "nodes.hpp"
#include "rank_environment.hpp"
#include "ranks.hpp"
#include "store_route.hpp"
#include "summary.hpp"

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

class Launcher {
 public:
  // `args` is resolved and checked (resolve_torchrun()); the secret is
  // resolved here, before anything starts.
  explicit Launcher(LaunchArgs args)
      : args_(std::move(args)),
        store_(args_),
        nodes_(args_.nnodes_max),
        placement_(place_ranks(parse_binding(args_.bind), args_.nproc_count)) {}

  int run() {
    for (const auto& note : args_.notes)
      say(note);
    block_signals();
    store_.open(say);
    team_ = store_.team();
    node_rank_ = team_ ? team_->node_rank() : args_.node_rank_value;
    RankOutput output;
    if (!args_.tee.empty() || !args_.redirects.empty()) output.log_dir = args_.log_dir;
    for (int local = 0; local < args_.nproc_count; ++local) {
      const auto i = static_cast<std::size_t>(local);
      output.logged.push_back(args_.tee_streams[i] | args_.redirect_streams[i]);
      output.shown.push_back(args_.shown[i] ? 3 & ~args_.redirect_streams[i] : 0);
    }
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
      if (!regroup && restarts_++ >= args_.max_restarts) {
        say(fmt::format("no restarts left (--max-restarts {}); exiting with code {}",
                        args_.max_restarts, exit_code_));
        if (team_) team_->end_job(fmt::format("it failed (no restarts left): {}",
                                              end_.failure_text.empty() ? end_.remote_failure
                                                                    : end_.failure_text));
        return exit_code_;
      }
      if (regroup) {
        say("meeting again to take in the waiting node (a change of nodes, not a restart)");
      } else if (elastic()) {
        say(fmt::format("restart {} of {}: meeting again with the nodes that come (--nnodes {})",
                        restarts_, args_.max_restarts, args_.nnodes));
      } else {
        say(fmt::format("restarting every rank (restart {} of {})", restarts_,
                        args_.max_restarts));
      }
      if (team_ && !elastic()) team_->restart_barrier();
    }
  }

 private:
  // In rounds: MIN:MAX nodes, or any job that meets in etcd (no node hosts
  // its store for good, so every attempt meets anew).
  bool elastic() const { return args_.nnodes_min != args_.nnodes_max || args_.etcd; }
  static constexpr std::chrono::milliseconds kRejoinSettle{1000};
  static constexpr std::chrono::milliseconds kRejoinGrace{200};
  int nodes() const { return nodes_; }

  // An elastic job's round: who is in it, and who left since the last.
  void join_round() {
    NodeTeam::Elastic e;
    e.min_nodes = args_.nnodes_min;
    e.max_nodes = args_.nnodes_max;
    e.last_call = std::chrono::milliseconds(static_cast<std::int64_t>(args_.last_call_s * 1000));
    // A node that ran in the last round comes back with the others that
    // are still there, all at about the same moment (a failure or a change
    // of nodes ends the attempt everywhere at once): the last call for
    // more ends once no node joined for a second, so that a lost node is
    // not waited for. A node that comes later joins as a newcomer (no
    // restart used).
    // The nodes expected back are the last round's but the one holding the
    // rank the others blame (lost, or at fault): once they are all here,
    // the last call waits kRejoinGrace more for a join (the blamed node,
    // should it be alive: it comes back as fast as the others).
    if (!members_.empty()) {
      e.settle = kRejoinSettle;
      e.expected_settle = kRejoinGrace;
      const int lost = end_.lost_node;
      for (std::size_t n = 0; lost >= 0 && n < members_.size(); ++n)
        if (static_cast<int>(n) != lost) e.expected.push_back(members_[n]);
    }
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
    collie::log().debug("collie launch: joining round {} (expecting {} nodes back)", attempt_,
                        e.expected.size());
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
    if (args_.etcd) store_.begin_round(attempt_, node_rank_, say);
    collie::log().debug("collie launch: round {} begins", attempt_);
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

  std::vector<std::string> environment_for(const LocalRank& r) const {
    RankPlace place;
    place.rank = r.rank;
    place.local_rank = r.local_rank;
    place.node_rank = node_rank_;
    place.nodes = nodes();
    place.attempt = attempt_;
    place.store_host = store_.rank_host();
    place.port = store_.rank_port();
    place.socket_ifname = store_.rank_ifname();
    place.token = store_.token();
    place.shared_cpus = placement_.shared;
    place.error_file = error_files_.path(attempt_, r.rank);
    return rank_environment(args_, place);
  }

  // A rank exited: the first failure of an attempt stops the others.
  void on_exit(LocalRank& r) {
    const int status = *r.status;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) ++end_.succeeded;
    if (ok) return;
    if (ranks_->stopping()) {
      // A replacement stopped because the others never admitted it: no
      // failure of the job's.
      if (r.replaces >= 0 && end_.unadmitted > 0) end_.stranded.push_back(&r);
      return;
    }
    if (args_.keep_going) {
      // The others shrink their groups and go on (ProcessGroup::shrink()).
      say(fmt::format("rank {} (node {}, pid {}) failed: {}, {} after it started; the others go "
                      "on (--keep-going)",
                      r.rank, node_rank_, r.pid, describe_wait_status(status),
                      seconds_text(r.ended - r.started)));
      if (end_.lost.empty()) {
        exit_code_ = exit_code_of(status);
        end_.failure_text = fmt::format("rank {} (node {}, pid {}) failed first: {}", r.rank,
                                        node_rank_, r.pid, describe_wait_status(status));
      }
      end_.lost.push_back(&r);
      if (restarts_ < args_.max_restarts) replace(r);
      return;
    }
    if (args_.master_worker && r.rank != 0) {
      // The master names the worker in its own errors and goes on.
      say(fmt::format("rank {} (a worker, node {}, pid {}) failed: {}, {} after it started; the "
                      "master carries on",
                      r.rank, node_rank_, r.pid, describe_wait_status(status),
                      seconds_text(r.ended - r.started)));
      return;
    }
    end_.first_failure = &r;
    exit_code_ = exit_code_of(status);
    end_.failure_text = fmt::format("rank {} (node {}, pid {}) failed first: {}, {} after it started",
                                r.rank, node_rank_, r.pid, describe_wait_status(status),
                                seconds_text(r.ended - r.started));
    if (team_) {
      try {
        team_->report_failure(end_.failure_text, std::chrono::seconds(10));
      } catch (const Error& e) {
        say(fmt::format("could not tell the other nodes: {}", e.what()));
      }
    }
    collie::log().debug("collie launch: attempt {}: rank {} failed; the other nodes told",
                        attempt_, r.rank);
    ranks_->begin_stop(SIGTERM, args_.stop_timeout_s);
  }

  // --keep-going with restarts left: a process in `lost`'s place, which
  // joins the others at their next expand() (COLLIE_JOIN=1).
  void replace(const LocalRank& lost) {
    ++restarts_;
    try {
      const auto& started = ranks_->replace(lost, attempt_, [this](const LocalRank& r) {
        auto environment = environment_for(r);
        environment.push_back(fmt::format("{}=1", environment::kJoin.name));
        return environment;
      });
      say(fmt::format("started pid {} in place of rank {} (restart {} of --max-restarts {}): it "
                      "joins the others at their next expand()",
                      started.pid, lost.rank, restarts_, args_.max_restarts));
    } catch (const Error& e) {
      say(fmt::format("could not start a replacement for rank {}: {}", lost.rank, e.what()));
    }
  }

  // --keep-going: once every other process of this node has ended (and
  // every replacement the others admitted), a replacement still waiting
  // for an expand() would wait its whole timeout: the job's members have
  // passed their last expand(). It is stopped, saying so.
  void stop_unadmitted() {
    if (!args_.keep_going || ranks_->stopping() || restarts_ == 0) return;
    std::vector<const LocalRank*> waiting;
    for (const auto& r : ranks_->ranks()) {
      if (r.status) continue;
      // A rank, or a replacement known to be a member: it finishes.
      if (r.replaces < 0 || admitted_.count(r.pid) != 0) return;
      waiting.push_back(&r);
    }
    if (waiting.empty()) return;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::vector<pid_t> stranded;
    try {
      store::Store* s = store_.reader();
      if (s == nullptr) return;
      for (const auto* r : waiting) {
        if (newcomer_admitted(*s, attempt_, r->pid, host)) {
          admitted_.insert(r->pid);  // read once, not at every look
          return;
        }
      }
    } catch (const std::exception& e) {
      say(fmt::format("could not read whether the replacements were admitted: {}", e.what()));
      return;
    }
    for (const auto* r : waiting)
      stranded.push_back(r->pid);
    say(fmt::format("the node's other ranks have ended, and the replacement{} (pid {}) never "
                    "joined them: the job's members called no expand() after it came; stopping "
                    "{}",
                    stranded.size() == 1 ? "" : "s", fmt::join(stranded, ", "),
                    stranded.size() == 1 ? "it" : "them"));
    end_.unadmitted = stranded.size();
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
    end_ = {};
    if (team_) team_->begin_attempt(attempt_);
    ranks_->start(attempt_, [this](const LocalRank& r) { return environment_for(r); });
    const auto slice = std::min(
        100ms, std::chrono::milliseconds(static_cast<std::int64_t>(args_.monitor_interval_s * 1000)));
    while (true) {
      ranks_->wait_for_output(std::max(slice, 1ms), signal_fd_);
      handle_signals();
      ranks_->pump_all();
      ranks_->reap([this](LocalRank& r) { on_exit(r); });
      stop_unadmitted();
      if (team_ && !ranks_->stopping()) {
        if (auto failed = team_->other_failure()) {
          end_.remote_failure = *failed;
          exit_code_ = 1;
          ranks_->begin_stop(SIGTERM, args_.stop_timeout_s);
        } else if (auto waiting = elastic() ? team_->newcomer(args_.nnodes_max) : std::nullopt) {
          // Marked before any rank stops: every node then counts it alike.
          end_.remote_failure = *waiting;
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
                        seconds_text(ranks_->since_stop())));
      }
      if (ranks_->all_reaped()) break;
    }
    collie::log().debug("collie launch: attempt {}: every rank of this node has exited", attempt_);
    ranks_->drain_output();
    if (interrupt_signal_ != 0) return Outcome::Interrupted;
    if (!end_.lost.empty()) {
      std::vector<int> lost;
      for (const auto* r : end_.lost)
        lost.push_back(r->rank);
      const auto processes = ranks_->ranks().size();
      say(fmt::format("rank{} {} lost (--keep-going); {} of the node's {} {} exited 0",
                      lost.size() == 1 ? "" : "s", fmt::join(lost, ", "), end_.succeeded,
                      processes, processes == static_cast<std::size_t>(args_.nproc_count)
                                     ? "ranks" : "processes"));
      // Who replaced whom.
      for (const auto& r : ranks_->ranks()) {
        if (r.replaces < 0) continue;
        const bool stranded =
            std::find(end_.stranded.begin(), end_.stranded.end(), &r) != end_.stranded.end();
        say(stranded ? fmt::format("rank {}: pid {} came to replace pid {}, but the others never "
                                   "admitted it (stopped by collie launch)",
                                   r.rank, r.pid, r.replaces)
                     : fmt::format("rank {}: pid {} replaced pid {}, and {}", r.rank, r.pid,
                                   r.replaces, describe_wait_status(*r.status)));
      }
      // Every rank failed: the job did too, the first one named.
      if (end_.succeeded == 0) end_.first_failure = end_.lost.front();
    }
    if (end_.first_failure != nullptr || !end_.remote_failure.empty()) return Outcome::Failed;
    return Outcome::Success;
  }

  void summarize(Outcome outcome) {
    if (outcome == Outcome::Interrupted) {
      say(fmt::format("stopped by {} (attempt {} of {})",
                      interrupt_signal_ == SIGINT ? "SIGINT" : "SIGTERM", attempt_ + 1,
                      args_.max_restarts + 1));
    } else if (end_.first_failure != nullptr) {
      const auto blamed = blamed_rank();
      if (!blamed.empty()) {
        say(blamed);
        say("(" + end_.failure_text + ")");
      } else {
        say(end_.failure_text);
      }
    } else if (elastic() && team_->regrouped()) {
      say(fmt::format("a change of nodes: {}", end_.remote_failure));
    } else {
      say(fmt::format("another node failed: {}", end_.remote_failure));
    }
    if (const auto cause = root_cause(error_files_, attempt_, *ranks_, end_.first_failure);
        !cause.empty())
      say(cause);
    const auto table = rank_table(node_rank_, *ranks_, end_.first_failure, end_.blamed);
    std::fwrite(table.data(), 1, table.size(), stderr);
    std::fflush(stderr);
  }

  // "rank 2 (node 0) is the one the others blame: ..." (blame.hpp);
  // "" when no rank blamed another.
  std::string blamed_rank() {
    try {
      store::Store* s = store_.reader();
      if (s == nullptr) return "";
      const auto verdict = read_blames(*s, attempt_);
      collie::log().debug("collie launch: attempt {}: the blames read", attempt_);
      if (!verdict) return "";
      end_.blamed = verdict->culprit;
      end_.lost_node = verdict->culprit / args_.nproc_count;
      return fmt::format(
          "rank {} (node {}) is the one the others blame: rank{} {} failed losing it or waiting "
          "for it; rank {} said: {}",
          verdict->culprit, end_.lost_node,
          verdict->blamers.size() == 1 ? "" : "s", fmt::join(verdict->blamers, ", "),
          verdict->quoted, verdict->said);
    } catch (const std::exception& e) {
      say(fmt::format("could not read whom the ranks blame: {}", e.what()));
      // In etcd the round's store is one node's: unreachable, that node is
      // the one gone.
      if (args_.etcd && node_rank_ != StoreRoute::kRoundStoreNode &&
          (dynamic_cast<const ConnectionError*>(&e) != nullptr ||
           dynamic_cast<const TimeoutError*>(&e) != nullptr))
        end_.lost_node = StoreRoute::kRoundStoreNode;
      return "";
    }
  }

  int finish_success() {
    if (!team_) return 0;
    if (const auto failed = team_->finish(store_.hosts())) {
      say(*failed);
      return 1;
    }
    if (elastic()) team_->end_job("it succeeded");
    return 0;
  }

  const LaunchArgs args_;
  StoreRoute store_;                  // the secret, the store, the team, what the ranks reach
  NodeTeam* team_ = nullptr;          // store_'s; several nodes only
  int node_rank_ = 0;
  int nodes_ = 1;                     // this attempt's (an elastic job's change)
  std::vector<std::string> members_;  // an elastic job's nodes this round
  int attempt_ = 0;
  std::set<pid_t> admitted_;  // replacements found admitted (stop_unadmitted)
  int restarts_ = 0;  // failures restarted, and replacements; a change of nodes is no failure
  Placement placement_;  // where each local rank runs (--bind)
  ErrorFiles error_files_;
  sigset_t signals_{};
  int signal_fd_ = -1;
  LocalRanks* ranks_ = nullptr;     // this attempt's (run()'s)
  // How the attempt under way is ending (reset by run_attempt()).
  struct AttemptEnd {
    const LocalRank* first_failure = nullptr;  // the first of this node's ranks to fail
    int blamed = -1;  // the rank the failed ranks blame (blamed_rank()); -1: none
    int lost_node = -1;  // its node, or the store's that could not be read; -1: none
    std::string failure_text;    // what this node says of its first failure
    std::string remote_failure;  // what another node said, or a change of nodes
    std::vector<const LocalRank*> lost;  // --keep-going: this node's ranks that failed
    int succeeded = 0;                   // this node's ranks that exited 0
    std::size_t unadmitted = 0;          // replacements stopped, never admitted
    std::vector<const LocalRank*> stranded;  // those, once reaped
  } end_;
  int exit_code_ = 0;         // the launcher's, should it give up now
  int interrupt_signal_ = 0;  // SIGINT or SIGTERM, once received
};

}  // namespace

int run_launcher(const LaunchArgs& args) {
  return Launcher(args).run();
}

}  // namespace collie::cli
