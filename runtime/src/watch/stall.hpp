// The stall inspector: who a waiting collective waits for, named through
// the store (docs/failures.md).
//
// Every rank keeps its progress on each group it is in (Progress: the call
// it is in, the last it finished, since when), for a few atomic stores per
// call. A thread of its own (StallResponder), with a store connection of its
// own, sleeps in a store wait and answers queries: "where are you on group
// G's call #S?".
//
// A rank whose call has waited for COLLIE_STALL_TIME (default 30 s; or its
// timeout, if that is shorter) asks (StallCheck): the first of the call's
// waiting ranks to ask posts one query, collects the answers for a short
// window, names the culprit and posts the report; the others read it. Each
// logs it, and a TimeoutError at the call's timeout carries it. A rank that
// does not answer is looked at through /proc when it is on this host
// (stopped, or exited), else said not to answer (stopped, frozen or
// unreachable).
//
// Its keys, in the job's view of the store, are keys.hpp's stall/ family.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <collie/job_config.hpp>
#include <collie/process_group.hpp>

#include "group/progress.hpp"

namespace collie {

namespace store {
class Store;
}

struct Call;
struct World;

// What this rank says about call #`sequence` of the group in slot `slot`
// (see stall.cpp for the format); nullopt when it is not in that group.
using ProgressLookup =
    std::function<std::optional<std::string>(std::uint32_t slot, std::uint64_t sequence)>;

// Answers stall queries from a thread of its own. Started at init when the
// job's store is a TCP store or etcd, and the stall time is not 0; quietly
// stops if the store goes away (rank 0 may host it and exit first).
class StallResponder {
 public:
  // `prefix`: the job's namespace in the store (JobStore::prefix()); the
  // responder has a connection of its own to the collie store there.
  StallResponder(const JobConfig& config, const std::string& prefix, ProgressLookup lookup);
  // On another store (etcd): waits for queries in the job's view `store`
  // itself, a slice at a time (stall_polling.cpp).
  StallResponder(std::shared_ptr<store::Store> store, int rank, ProgressLookup lookup);
  ~StallResponder();
  StallResponder(const StallResponder&) = delete;
  StallResponder& operator=(const StallResponder&) = delete;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<class StallPolling> polling_;
};

// The stall check of one call on one rank: poll() between wait slices.
class StallCheck {
 public:
  using Clock = std::chrono::steady_clock;
  StallCheck(detail::Group& g, const Call& call, Clock::time_point started);

  // Inspects when the call has waited long enough (and again every stall
  // time after); logs the report. Never throws.
  void poll();
  // Inspects now unless a report is at most a stall time old (at the timeout).
  void final_poll();

  // The last report ("" if none), and the world rank it blames (-1: none).
  const std::string& report() const { return report_; }
  int culprit() const { return culprit_; }

 private:
  void inspect(int round);

  detail::Group& g_;
  const Call& call_;
  Clock::time_point started_;
  std::chrono::milliseconds stall_{0};   // 0: off
  std::chrono::milliseconds window_{0};  // how long answers are awaited
  int rounds_ = 0;                       // inspections done
  std::string report_;
  int culprit_ = -1;
};

// This rank's answer to a query on call #`sequence` of the group in `slot`
// (stall.cpp has the format); nullopt when it is not in that group.
std::optional<std::string> answer_query(World& world, std::uint32_t slot, std::uint64_t sequence);

// A description of this process for stall/proc/<rank> ("<kernel id>\n<pid>\n<host>").
std::string process_identity();

// What /proc says of a process known by process_identity()'s text, seen
// from this host: "" when it is not on this kernel (or unreadable).
std::string describe_process(const std::string& identity);

}  // namespace collie
