// The ranks `collie launch` runs on this node, for one attempt: starting
// them (bound to processors when asked), passing their output on line by
// line with each rank's prefix (and to log files with --tee or
// --redirects), reaping them,
// and stopping them (a signal, then SIGKILL after the stop timeout). Used
// by the launcher's one thread.
#pragma once

#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "child_process.hpp"
#include "cpu_binding.hpp"

namespace collie::cli {

// One rank started on this node.
struct LocalRank {
  using Clock = std::chrono::steady_clock;
  int rank = 0;
  int local_rank = 0;
  std::unique_ptr<ChildProcess> child;
  pid_t pid = -1;
  std::optional<int> status;  // wait status once reaped
  bool stopped_by_launcher = false;
  Clock::time_point started;
  Clock::time_point ended;
  // --keep-going's replacement: the pid of the process it replaced (-1:
  // an original rank), which it joins at the others' next expand().
  pid_t replaces = -1;
  std::string out_partial;
  std::string err_partial;
  std::ofstream log;
};

// Where each local rank's streams go (bits: 1 its stdout, 2 its stderr).
struct RankOutput {
  std::string log_dir;      // "" for no log files
  std::vector<int> logged;  // written to LOG_DIR/attempt-A/rank-R.log
  std::vector<int> shown;   // passed on to the launcher's stdout/stderr, prefixed
};

class LocalRanks {
 public:
  using Clock = std::chrono::steady_clock;
  // The environment a rank gets, on top of the launcher's.
  using Environment = std::function<std::vector<std::string>(const LocalRank&)>;

  // `first_rank`: the world rank of local rank 0; `output`: where each
  // rank's streams go (--tee, --redirects, --local-ranks-filter).
  LocalRanks(std::vector<std::string> command, int first_rank, int count, Placement placement,
             RankOutput output);

  // Starts every rank of attempt `attempt`. Throws collie::Error (after
  // killing what it started) if one cannot be started.
  void start(int attempt, const Environment& environment);
  // Starts a process in place of `lost` (exited), for the same local rank,
  // with `environment`'s variables (the launcher adds COLLIE_JOIN=1): its
  // lines show as "[rank R replacement]", its log is rank-R-replacement-N.
  // Throws collie::Error if it cannot be started.
  LocalRank& replace(const LocalRank& lost, int attempt, const Environment& environment);
  // Waits up to `wait` for output from a rank, or for `extra_fd` to be
  // readable.
  void wait_for_output(std::chrono::milliseconds wait, int extra_fd);
  // Passes on what the ranks printed: complete lines, with their prefix.
  void pump_all();
  // Reaps the ranks that exited; calls `exited` for each.
  void reap(const std::function<void(LocalRank&)>& exited);
  bool all_reaped() const;
  // Sends `signal_number` to every rank still running (and SIGCONT: a
  // stopped rank handles it only once it runs again); the first call also
  // starts the stop timeout after which they get SIGKILL (kill_late()).
  void begin_stop(int signal_number, double stop_timeout_s);
  bool stopping() const { return stopping_; }
  // SIGKILL for ranks still running past the stop timeout; true if it sent any.
  bool kill_late();
  Clock::duration since_stop() const { return Clock::now() - stop_started_; }
  // After the last rank exited: what is still in the pipes, then close them
  // (descendants of a rank may hold them open; do not wait for those).
  void drain_output();
  // Every process of this attempt, replacements last (their addresses stay
  // put as replacements are added).
  const std::deque<LocalRank>& ranks() const { return ranks_; }

 private:
  void pump(LocalRank& r, bool is_err);
  void launch(LocalRank& r, int attempt, const Environment& environment, const std::string& log);
  void kill_all(int signal_number);

  std::vector<std::string> command_;
  int first_rank_;
  int count_;
  Placement placement_;
  RankOutput output_;
  std::deque<LocalRank> ranks_;
  bool stopping_ = false;
  Clock::time_point stop_started_;
  Clock::time_point stop_deadline_;
};

}  // namespace collie::cli
