// The stall inspector: each group's progress, the responder that answers
// other ranks' queries, and the check that asks them (stall.hpp).
#include "watch/stall.hpp"
#include "watch/stall_polling.hpp"

#include <algorithm>
#include <fstream>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

#include <asio/io_context.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/coarse_clock.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/store/async_client.hpp>
#include <collie/keys.hpp>

#include "group/job_store.hpp"
#include "group/call.hpp"
#include "group/group.hpp"
#include "group/placement.hpp"

namespace collie {

namespace {

using Clock = std::chrono::steady_clock;

// (Read at every call's start and end: the coarse clock, as stall reports
// count in milliseconds.)
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             CoarseClock::now().time_since_epoch())
      .count();
}

std::chrono::milliseconds since(std::int64_t ns) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(now_ns() - ns));
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The kernel and pid namespace this process sees: two processes with the
// same one can look at each other's /proc.
std::string kernel_id() {
  char ns[128] = {};
  const auto n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  return machine_id() + "/" +
         (n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string("?"));
}

}  // namespace

std::string process_identity() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{}\n{}\n{}", kernel_id(), ::getpid(), host);
}

std::string describe_process(const std::string& identity) {
  std::istringstream in(identity);
  std::string kernel, pid, host;
  std::getline(in, kernel);
  std::getline(in, pid);
  std::getline(in, host);
  if (kernel.empty() || pid.empty()) return "";
  if (kernel != kernel_id())
    return fmt::format(
        "it is on another host ({}): it is stopped, frozen, or the host cannot be "
        "reached",
        host);
  const auto stat = read_line("/proc/" + pid + "/stat");
  const auto paren = stat.rfind(')');
  if (stat.empty() || paren == std::string::npos || paren + 2 >= stat.size())
    return fmt::format("its process ({} on {}) has exited", pid, host);
  switch (stat[paren + 2]) {
    case 'T':
    case 't':
      return fmt::format("its process ({} on {}) is stopped (SIGSTOP, or a debugger holds it)", pid,
                         host);
    case 'Z':
    case 'X':
      return fmt::format("its process ({} on {}) has exited", pid, host);
    default:
      return fmt::format(
          "its process ({} on {}) is alive but does not answer (its threads may be "
          "blocked, or its store connection lost)",
          pid, host);
  }
}

// ---- the answers --------------------------------------------------------------

// "<status> <text>": W (waiting in the call), F (finished it), O (in another
// call under the same number: a mismatch), N (has not reached it).
std::optional<std::string> answer_query(World& world, std::uint32_t slot, std::uint64_t sequence) {
  std::lock_guard lock(world.groups_mu);
  const auto it = world.groups.find(slot);
  if (it == world.groups.end()) return std::nullopt;
  const auto& p = it->second->progress;
  const auto seq = static_cast<std::int64_t>(sequence);
  if (const auto running = p.running(seq); running.sequence >= 0) {
    // The asker's fingerprint is not known here: the asker compares.
    return fmt::format("W {:x} {}", running.fingerprint,
                       describe(decode_fingerprint(running.fingerprint), false));
  }
  const auto finished = p.finished.load(std::memory_order_relaxed);
  if (p.ended(seq))
    return fmt::format("F it finished it {} ago",
                       describe_duration(since(p.finished_at.load(std::memory_order_relaxed))));
  std::string text =
      finished < 0 ? fmt::format("N it has finished no call on {} yet (it made it {} ago)",
                                 it->second->name, describe_duration(since(p.started_at.load())))
                   : fmt::format("N it last finished #{} {} ago", finished,
                                 describe_duration(since(p.finished_at.load())));
  // Where it is instead: a call on another group, or its own code.
  for (const auto& [other_slot, group] : world.groups) {
    const auto c = group->progress.oldest();
    if (c.sequence < 0) continue;
    text += fmt::format("; it is in {} #{} on {} (for {})",
                        describe(decode_fingerprint(c.fingerprint), false), c.sequence,
                        group->name, describe_duration(since(c.since)));
    return text;
  }
  return text + "; it is in no collective call (its program is busy elsewhere)";
}

// ---- the responder ------------------------------------------------------------

class StallResponder::Impl {
 public:
  Impl(const JobConfig& config, const std::string& prefix, ProgressLookup lookup)
      : lookup_(std::move(lookup)),
        rank_(config.rank),
        prefix_(prefix + "/") {
    store::ClientOptions options;
    options.timeout = config.timeout;
    options.connect_timeout = config.timeout;
    options.token = config.token;
    options.seal = seal::mode_of(config.transport.seal);
    options.certificates = transport::load_certificates(config.transport);
    options.spin = std::chrono::microseconds(0);
    client_.emplace(io_, options);
    const bool own_server = config.rank == 0 && !config.store_hosted_by_launcher;
    client_->connect(own_server ? "127.0.0.1" : config.master_addr, config.master_port,
                     [this](const store::Failure* f, store::Done) {
                       settled();
                       if (f != nullptr) return quit("connecting", *f);
                       wait_next();
                     });
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    // A group destroyed right after init (destroy, then init again) would
    // cut the connection in its handshake, which the store logs as a
    // client that may have the wrong token: let the handshake end first.
    {
      std::unique_lock lock(settle_mu_);
      settle_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return settled_; });
    }
    io_.stop();
    thread_.join();
    client_.reset();
  }

 private:
  void settled() {
    {
      std::lock_guard lock(settle_mu_);
      settled_ = true;
    }
    settle_cv_.notify_all();
  }

  void quit(const char* doing, const store::Failure& f) {
    collie::log().debug("rank {}: the stall responder stops ({}: {})", rank_, doing, f.message);
  }

  void wait_next() {
    keys_ = {prefix_ + keys::stall_query(static_cast<std::int64_t>(next_))};
    client_->wait(keys_, [this](const store::Failure* f, store::Done) {
      if (f != nullptr) return quit("waiting for a query", *f);
      client_->get(keys_[0], [this](const store::Failure* failed, std::string query) {
        if (failed != nullptr) return quit("reading a query", *failed);
        answer(query);
      });
    });
  }

  void answer(const std::string& query) {
    const auto k = next_++;
    std::uint32_t slot = 0;
    std::uint64_t sequence = 0;
    std::istringstream in(query);
    std::optional<std::string> text;
    if (in >> slot >> sequence) text = lookup_(slot, sequence);
    if (!text) return wait_next();
    client_->set(prefix_ + keys::stall_answer(static_cast<std::int64_t>(k), rank_), *text,
                 [this](const store::Failure* f, store::Done) {
                   if (f != nullptr) return quit("answering", *f);
                   wait_next();
                 });
  }

  ProgressLookup lookup_;
  int rank_;
  std::string prefix_;
  std::uint64_t next_ = 1;
  std::vector<std::string> keys_;
  asio::io_context io_;
  std::optional<store::AsyncStoreClient> client_;
  std::thread thread_;
  std::mutex settle_mu_;
  std::condition_variable settle_cv_;
  bool settled_ = false;  // the connection is made, or failed
};

StallResponder::StallResponder(const JobConfig& config, const std::string& prefix,
                               ProgressLookup lookup)
    : impl_(std::make_unique<Impl>(config, prefix, std::move(lookup))) {}

StallResponder::StallResponder(std::shared_ptr<store::Store> store, int rank,
                               ProgressLookup lookup)
    : polling_(std::make_unique<StallPolling>(std::move(store), rank, std::move(lookup))) {}

StallResponder::~StallResponder() = default;

// ---- the check ----------------------------------------------------------------

StallCheck::StallCheck(detail::Group& g, const Call& call, Clock::time_point started)
    : g_(g), call_(call), started_(started) {
  if (!g.world->responder || g.members.size() < 2) return;
  const auto stall = g.world->config.stall_time;
  if (stall.count() <= 0) return;
  stall_ = std::min(stall, call.timeout);
  window_ = std::clamp(stall_ / 5, std::chrono::milliseconds(50), std::chrono::milliseconds(5000));
}

void StallCheck::poll() {
  if (stall_.count() <= 0) return;
  // Round r reports at (r + 1) stall times: it starts a window earlier.
  const auto due = stall_ * (rounds_ + 1) - window_;
  if (Clock::now() - started_ < due) return;
  inspect(rounds_++);
}

void StallCheck::final_poll() {
  if (stall_.count() <= 0) return;
  if (rounds_ > 0 && Clock::now() - started_ < stall_ * rounds_ + stall_) return;
  inspect(rounds_++);
}

void StallCheck::inspect(int round) {
  auto& store = g_.world->job->store();
  auto& transport = g_.transport();
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_);
  const auto call_name =
      fmt::format("{} #{} on {}", describe(call_.signature(), false), call_.sequence, g_.name);
  const int me = g_.members[static_cast<std::size_t>(g_.rank)];
  try {
    if (store.add(keys::stall_ask(g_.slot, call_.sequence, round), 1, window_) > 1) {
      // Another waiting rank asks; its report is the same for all.
      const auto text = store.get(keys::stall_report(g_.slot, call_.sequence, round),
                                  window_ * 2 + std::chrono::seconds(1));
      const auto space = text.find(' ');
      culprit_ = std::stoi(text.substr(0, space));
      report_ = text.substr(space + 1);
    } else {
      const auto k = store.add(keys::kStallQueries, 1, window_);
      store.set(keys::stall_query(k), fmt::format("{} {}", g_.slot, call_.sequence),
                window_);
      std::vector<std::string> awaited;
      for (int wr : g_.members)
        if (wr != me) awaited.push_back(keys::stall_answer(k, wr));
      try {
        store.wait(awaited, window_);
      } catch (const TimeoutError&) {
      }
      const auto have = store.list_keys(keys::stall_answers(k), window_);
      std::vector<std::string> values;
      if (!have.empty()) values = store.multi_get(have, window_);
      std::map<int, std::string> answers;
      for (std::size_t i = 0; i < have.size(); ++i)
        answers[std::stoi(have[i].substr(have[i].rfind('/') + 1))] = values[i];
      const auto mine = fingerprint(call_.signature());
      std::vector<int> waiting;
      // What holds the call up, most likely first: a rank stopped or gone
      // (4), one that has not reached the call or is in another (3), one on
      // another host that does not answer (2), one alive here that does not
      // answer in time (1: it may be busy with its own failure).
      std::vector<std::pair<int, std::string>> blamed;  // (severity, text), by world rank order
      std::vector<int> blamed_rank;
      auto blame_rank = [&](int wr, int severity, std::string text) {
        blamed.emplace_back(severity, std::move(text));
        blamed_rank.push_back(wr);
      };
      for (std::size_t r = 0; r < g_.members.size(); ++r) {
        const int wr = g_.members[r];
        const int gr = static_cast<int>(r);
        if (wr == me) {
          waiting.push_back(gr);
          continue;
        }
        const auto who = gr == wr ? transport.describe_peer(wr)
                                  : fmt::format("rank {} ({})", gr, transport.describe_peer(wr));
        const auto a = answers.find(wr);
        if (a == answers.end()) {
          auto proc = store.try_get(keys::stall_process(wr), window_);
          auto what = proc ? describe_process(*proc) : std::string();
          if (what.empty()) what = "it is stopped, frozen, or cannot be reached";
          const int severity = what.find("is stopped") != std::string::npos ||
                                       what.find("has exited") != std::string::npos
                                   ? 4
                               : what.find("alive but does not answer") != std::string::npos ? 1
                                                                                             : 2;
          blame_rank(wr, severity, fmt::format("{} does not answer: {}", who, what));
          continue;
        }
        const auto& text = a->second;
        const char status = text.empty() ? '?' : text[0];
        const auto rest = text.size() > 2 ? text.substr(2) : std::string();
        if (status == 'W') {
          std::istringstream in(rest);
          std::uint64_t theirs = 0;
          in >> std::hex >> theirs;
          if (theirs == mine) {
            waiting.push_back(gr);
          } else {
            blame_rank(wr, 3,
                       fmt::format("{} is in {} #{} instead", who,
                                   describe(decode_fingerprint(theirs), true), call_.sequence));
          }
        } else if (status == 'N') {
          blame_rank(wr, 3, fmt::format("{} has not reached it: {}", who, rest));
        }
        // 'F': it finished and left; it waits for nobody.
      }
      // Most likely first (stable: rank order within a severity).
      std::vector<std::size_t> order(blamed.size());
      for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return blamed[a].first > blamed[b].first;
      });
      std::vector<std::string> blame;
      for (auto i : order)
        blame.push_back(blamed[i].second);
      const int culprit = order.empty() ? -1 : blamed_rank[order.front()];
      std::string text;
      if (blame.empty()) {
        text = fmt::format(
            "{} has waited {} on rank {}; every rank has reached it (ranks {} are "
            "waiting): the data of a rank may be slow to come",
            call_name, describe_duration(waited), g_.rank, fmt::join(waiting, ", "));
      } else {
        text = fmt::format("{} has waited {}: {}; rank{} {} {} waiting for {}", call_name,
                           describe_duration(waited), fmt::join(blame, "; "),
                           waiting.size() == 1 ? "" : "s", fmt::join(waiting, ", "),
                           waiting.size() == 1 ? "is" : "are", blame.size() == 1 ? "it" : "them");
      }
      culprit_ = culprit;
      report_ = text;
      store.set(keys::stall_report(g_.slot, call_.sequence, round), fmt::format("{} {}", culprit, text),
                window_);
    }
    collie::log().warn("rank {}: stalled: {}", g_.rank, report_);
  } catch (const std::exception& e) {
    collie::log().warn(
        "rank {}: {} has waited {}; the stall inspector could not ask the other "
        "ranks through the store: {}",
        g_.rank, call_name, describe_duration(waited), e.what());
  }
}

}  // namespace collie
