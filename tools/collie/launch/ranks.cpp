// This node's ranks for one attempt of `collie launch` (launch/ranks.hpp).
#include "ranks.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <poll.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::cli {

using namespace std::chrono_literals;

namespace {

void write_all(FILE* stream, const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stream);
  std::fflush(stream);
}

}  // namespace

LocalRanks::LocalRanks(std::vector<std::string> command, int first_rank, int count,
                       Placement placement, RankOutput output)
    : command_(std::move(command)),
      first_rank_(first_rank),
      count_(count),
      placement_(std::move(placement)),
      output_(std::move(output)) {
  output_.logged.resize(static_cast<std::size_t>(count), 0);
  output_.shown.resize(static_cast<std::size_t>(count), 3);
  if (output_.log_dir.empty()) std::fill(output_.logged.begin(), output_.logged.end(), 0);
}

void LocalRanks::start(int attempt, const Environment& environment) {
  ranks_.clear();
  stopping_ = false;
  for (int local = 0; local < count_; ++local) {
    auto& r = ranks_.emplace_back();
    r.local_rank = local;
    r.rank = first_rank_ + local;
    try {
      launch(r, attempt, environment, fmt::format("rank-{}.log", r.rank));
    } catch (...) {
      kill_all(SIGKILL);
      while (!all_reaped()) {
        std::this_thread::sleep_for(10ms);
        reap([](LocalRank&) {});
      }
      throw;
    }
  }
}

LocalRank& LocalRanks::replace(const LocalRank& lost, int attempt, const Environment& environment) {
  int before = 0;
  for (const auto& r : ranks_)
    before += r.rank == lost.rank && r.replaces >= 0 ? 1 : 0;
  auto& r = ranks_.emplace_back();
  r.local_rank = lost.local_rank;
  r.rank = lost.rank;
  r.replaces = lost.pid;
  launch(r, attempt, environment, fmt::format("rank-{}-replacement-{}.log", r.rank, before + 1));
  return r;
}

// Starts `r`'s process (bound to its processors, if asked), the last of
// ranks_; on failure, takes it off the list and rethrows.
void LocalRanks::launch(LocalRank& r, int attempt, const Environment& environment,
                        const std::string& log) {
  const auto local = static_cast<std::size_t>(r.local_rank);
  try {
    if (output_.logged[local] != 0) {
      const auto dir = std::filesystem::path(output_.log_dir) / fmt::format("attempt-{}", attempt);
      std::filesystem::create_directories(dir);
      r.log.open(dir / log);
      if (!r.log)
        throw Error(fmt::format("collie launch: cannot write logs in '{}'", dir.string()));
    }
    cpu_set_t cpus;
    const bool bound = placement_.set_of(r.local_rank, cpus);
    r.child = std::make_unique<ChildProcess>(command_, environment(r), bound ? &cpus : nullptr);
  } catch (...) {
    ranks_.pop_back();
    throw;
  }
  r.pid = r.child->pid();
  r.started = Clock::now();
}

void LocalRanks::wait_for_output(std::chrono::milliseconds wait, int extra_fd) {
  std::vector<pollfd> fds;
  if (extra_fd >= 0) fds.push_back({extra_fd, POLLIN, 0});
  for (auto& r : ranks_) {
    if (r.child->out_fd() >= 0) fds.push_back({r.child->out_fd(), POLLIN, 0});
    if (r.child->err_fd() >= 0) fds.push_back({r.child->err_fd(), POLLIN, 0});
  }
  poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
}

void LocalRanks::pump_all() {
  for (auto& r : ranks_) {
    pump(r, false);
    pump(r, true);
  }
}

// Emits complete lines of one stream with the rank's prefix.
void LocalRanks::pump(LocalRank& r, bool is_err) {
  const int fd = is_err ? r.child->err_fd() : r.child->out_fd();
  if (fd < 0) return;
  std::string& partial = is_err ? r.err_partial : r.out_partial;
  char buffer[65536];
  while (true) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got > 0) {
      partial.append(buffer, static_cast<std::size_t>(got));
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
    // End of stream: flush what is left as a last line.
    if (!partial.empty() && partial.back() != '\n') partial.push_back('\n');
    is_err ? r.child->close_err() : r.child->close_out();
    break;
  }
  const int stream = is_err ? 2 : 1;
  const auto local = static_cast<std::size_t>(r.local_rank);
  const bool shown = (output_.shown[local] & stream) != 0;
  const bool logged = r.log.is_open() && (output_.logged[local] & stream) != 0;
  std::string out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const auto line = std::string_view(partial).substr(start, nl - start + 1);
    if (shown) out += fmt::format("[rank {}{}] {}", r.rank, r.replaces >= 0 ? " replacement" : "", line);
    if (logged) r.log << line;
  }
  partial.erase(0, start);
  if (!out.empty()) write_all(is_err ? stderr : stdout, out);
  if (r.log) r.log.flush();
}

void LocalRanks::reap(const std::function<void(LocalRank&)>& exited) {
  // By index: `exited` may add a replacement (replace()).
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    auto& r = ranks_[i];
    if (r.status || r.pid < 0) continue;
    int status = 0;
    if (waitpid(r.pid, &status, WNOHANG) == r.pid) {
      r.status = status;
      r.ended = Clock::now();
      exited(r);
    }
  }
}

bool LocalRanks::all_reaped() const {
  for (const auto& r : ranks_) {
    if (!r.status) return false;
  }
  return true;
}

void LocalRanks::begin_stop(int signal_number, double stop_timeout_s) {
  if (!stopping_) {
    stopping_ = true;
    stop_started_ = Clock::now();
    stop_deadline_ = stop_started_ + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(stop_timeout_s));
  }
  for (auto& r : ranks_) {
    if (r.status) continue;
    r.stopped_by_launcher = true;
    kill(-r.pid, signal_number);
    // A stopped rank (SIGSTOP, a debugger's stop) handles it only once it
    // runs again.
    kill(-r.pid, SIGCONT);
  }
}

bool LocalRanks::kill_late() {
  if (!stopping_ || Clock::now() < stop_deadline_ || all_reaped()) return false;
  kill_all(SIGKILL);
  stop_deadline_ = Clock::time_point::max();
  return true;
}

void LocalRanks::kill_all(int signal_number) {
  for (auto& r : ranks_) {
    if (!r.status && r.pid > 0) kill(-r.pid, signal_number);
  }
}

void LocalRanks::drain_output() {
  const auto deadline = Clock::now() + 500ms;
  bool open = true;
  while (open && Clock::now() < deadline) {
    open = false;
    for (auto& r : ranks_) {
      pump(r, false);
      pump(r, true);
      open = open || r.child->out_fd() >= 0 || r.child->err_fd() >= 0;
    }
    if (open) std::this_thread::sleep_for(10ms);
  }
  for (auto& r : ranks_) {
    for (bool is_err : {false, true}) {
      std::string& partial = is_err ? r.err_partial : r.out_partial;
      if (!partial.empty()) {
        const auto local = static_cast<std::size_t>(r.local_rank);
        if ((output_.shown[local] & (is_err ? 2 : 1)) != 0)
          write_all(is_err ? stderr : stdout,
                    fmt::format("[rank {}{}] {}\n", r.rank, r.replaces >= 0 ? " replacement" : "",
                                partial));
        if (r.log.is_open() && (output_.logged[local] & (is_err ? 2 : 1)) != 0)
          r.log << partial << "\n";
        partial.clear();
      }
    }
    r.child->close_out();
    r.child->close_err();
  }
}

}  // namespace collie::cli
