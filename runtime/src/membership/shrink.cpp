// ProcessGroup::shrink() (process_group.hpp): the members a group has left
// agree on who they are, and go on in a new group on the same connections.
//
// 1. Probe. Each member sends every other member a word (the fingerprint
//    of the group's members, on the group's shrink tag, tags.hpp) and
//    waits for every other member's. A lost member fails both within a
//    second (the transport's contract: its connection is reset, or refused
//    to a member never met); a live one answers once it calls shrink. So
//    each member's view is every member that is gone by then: a rank
//    killed before anyone's probe is in every view, one that dies during
//    the probes in some. A live member that never calls shrink is named at
//    the timeout.
// 2. Agree. The first view written in the store under the group's key
//    (compare_set on an empty key) is the decision every member reads, with
//    a tag space reserved from the top of the slots (a job-wide counter),
//    so views that differ still end in one group. A member the decision
//    leaves out (another member found it gone) throws; a member the
//    decision keeps that died in the meantime fails the new group's first
//    call, naming it, and the survivors shrink again.
// 3. Revoke. The old group is broken for good: its calls throw at once,
//    and a group made from it can never agree on a slot (new_group is a
//    collective of the old group). A second shrink() of it returns the
//    group the first one made.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/fnv.hpp>
#include <collie/interrupt.hpp>
#include <collie/keys.hpp>
#include <collie/log.hpp>

#include "group/job_store.hpp"
#include "executor/executor.hpp"
#include "bootstrap/make_group.hpp"
#include "group/group.hpp"
#include "group/tags.hpp"

namespace collie {

namespace {

using Clock = std::chrono::steady_clock;

// The members' world ranks, hashed: the same on every member.
std::uint64_t members_fingerprint(const std::vector<int>& members) {
  return fnv1a64(fmt::format("{}", fmt::join(members, ",")));
}

// The probes of step 1: for each member, why it is lost (empty: it
// answered). Throws TimeoutError naming the members still silent at the
// deadline, InterruptedError when the waits are interrupted.
std::vector<std::string> probe(detail::Group& g, std::chrono::milliseconds limit) {
  auto& t = g.transport();
  const auto n = g.members.size();
  const auto tag = shrink_tag(g.slot);
  const std::uint64_t mine = members_fingerprint(g.members);
  const auto deadline = Clock::now() + limit;
  std::vector<std::string> lost(n);
  std::vector<std::uint64_t> heard(n, 0);
  std::vector<transport::RequestPtr> sends(n), recvs(n);
  // However this ends (a timeout, an interrupt, a member lost half-way),
  // nothing stays posted into `heard` or out of `mine`.
  struct Settle {
    transport::Transport& t;
    std::vector<transport::RequestPtr>& recvs;
    std::vector<transport::RequestPtr>& sends;
    ~Settle() {
      std::erase(recvs, nullptr);
      std::erase(sends, nullptr);
      settle_requests(t, recvs, sends);
    }
  } settle{t, recvs, sends};
  const auto rank = static_cast<std::size_t>(g.rank);
  for (std::size_t r = 0; r < n; ++r) {
    if (r == rank) continue;
    try {
      recvs[r] = t.irecv(g.members[r], tag, &heard[r], sizeof heard[r]);
      sends[r] = t.isend(g.members[r], tag, &mine, sizeof mine);
    } catch (const Error& e) {
      lost[r] = e.what();
    }
  }
  // Every answer, or its failure.
  for (;;) {
    std::vector<transport::RequestPtr> pending;
    std::vector<std::size_t> who;
    for (std::size_t r = 0; r < n; ++r) {
      if (recvs[r] && lost[r].empty()) {
        pending.push_back(recvs[r]);
        who.push_back(r);
      }
    }
    if (pending.empty()) break;
    if (const int signal = waits_interrupted(); signal != 0) {
      throw InterruptedError(fmt::format("rank {}: shrink on {} was interrupted: {}", g.rank,
                                         g.name, signal_name(signal)));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      std::vector<std::string> silent;
      for (std::size_t r : who)
        silent.push_back(t.describe_peer(g.members[r]));
      throw TimeoutError(fmt::format(
          "rank {}: shrink on {}: after {} the members {} have not called shrink (their "
          "connections are open: they live, but are elsewhere in the program)",
          g.rank, g.name, describe_duration(limit), fmt::join(silent, ", ")));
    }
    const int i = t.wait_any(pending, std::min(left, std::chrono::milliseconds(100)));
    if (i < 0) continue;
    const std::size_t r = who[static_cast<std::size_t>(i)];
    try {
      t.wait(recvs[r]);
      if (heard[r] != mine) {
        throw MismatchError(fmt::format(
            "rank {}: shrink on {}: {} shrinks another group (its members' fingerprint "
            "{:016x}, this group's {:016x})",
            g.rank, g.name, t.describe_peer(g.members[r]), heard[r], mine));
      }
    } catch (const MismatchError&) {
      throw;
    } catch (const Error& e) {
      lost[r] = e.what();
    }
    recvs[r] = nullptr;
  }
  // The sends: a member that answered and then died is lost too.
  for (std::size_t r = 0; r < n; ++r) {
    if (!sends[r] || !lost[r].empty()) continue;
    try {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      t.wait(sends[r], std::max(left, std::chrono::milliseconds(1)));
    } catch (const Error& e) {
      lost[r] = e.what();
    }
  }
  return lost;
}

// "<slot> <world rank>,<world rank>,...": a decision as the store holds it.
struct Decision {
  std::uint32_t slot = 0;
  std::vector<int> members;
};

std::string encode(const Decision& d) {
  return fmt::format("{} {}", d.slot, fmt::join(d.members, ","));
}

Decision decode(const std::string& value) {
  Decision d;
  const auto space = value.find(' ');
  d.slot = static_cast<std::uint32_t>(std::stoul(value.substr(0, space)));
  std::size_t at = space + 1;
  while (at < value.size()) {
    const auto comma = value.find(',', at);
    d.members.push_back(std::stoi(value.substr(at, comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return d;
}

// Step 2: this member's view written, unless another was first; the
// decision read back.
Decision agree(detail::Group& g, const std::vector<std::string>& lost) {
  auto& store = g.world->job->store();
  const auto key = keys::shrink(g.slot, members_fingerprint(g.members));
  if (auto decided = store.try_get(key)) return decode(*decided);
  Decision mine;
  for (std::size_t r = 0; r < g.members.size(); ++r)
    if (lost[r].empty()) mine.members.push_back(g.members[r]);
  const std::int64_t taken = store.add(keys::kShrinkSlots, 1);
  {
    std::lock_guard lock(g.world->new_group_mu);
    if (taken >= static_cast<std::int64_t>(kMaxSlot) - g.world->highest_slot) {
      throw Error(fmt::format(
          "rank {}: shrink on {}: the job has made {} groups, all the tag spaces there are",
          g.rank, g.name, kMaxSlot));
    }
  }
  mine.slot = kMaxSlot - static_cast<std::uint32_t>(taken) + 1;
  const auto result = store.compare_set(key, "", encode(mine));
  if (!result.current) {
    throw Error(fmt::format("rank {}: shrink on {}: the store lost key {}", g.rank, g.name, key));
  }
  return decode(*result.current);
}

}  // namespace

ProcessGroup ProcessGroup::shrink(std::optional<std::chrono::milliseconds> timeout) {
  auto& g = *impl_;
  g.require_member("shrink");
  std::lock_guard lock(g.shrink_mu);
  if (g.shrunk) return ProcessGroup(g.shrunk);
  const auto lost = probe(g, timeout.value_or(g.world->config.timeout));
  Decision decided;
  try {
    decided = agree(g, lost);
  } catch (const InterruptedError&) {
    throw;
  } catch (const Error& e) {
    // Rank 0 hosts the store of env:// and tcp:// unless a launcher does.
    const auto& config = g.world->config;
    const bool rank0_hosted = (config.method == JobConfig::Method::Env ||
                               config.method == JobConfig::Method::Tcp) &&
                              !config.store_hosted_by_launcher;
    bool rank0_lost = false;
    for (std::size_t r = 0; r < g.members.size(); ++r)
      rank0_lost = rank0_lost || (g.members[r] == 0 && !lost[r].empty());
    throw ConnectionError(fmt::format(
        "rank {}: shrink on {}: the members agree in the job's store, which failed: {}{} (a "
        "store that outlives any rank: `collie launch` hosts it, or init with etcd://)",
        g.rank, g.name, e.what(),
        rank0_hosted && rank0_lost ? "; rank 0 hosted it, and rank 0 is lost" : ""));
  }
  const int me = g.members[static_cast<std::size_t>(g.rank)];
  const auto at = std::find(decided.members.begin(), decided.members.end(), me);
  std::vector<std::string> gone;
  for (std::size_t r = 0; r < g.members.size(); ++r)
    if (std::find(decided.members.begin(), decided.members.end(), g.members[r]) ==
        decided.members.end())
      gone.push_back(fmt::format("rank {}", g.members[r]));
  if (at == decided.members.end()) {
    throw ConnectionError(fmt::format(
        "rank {}: shrink on {}: the other members found this rank lost and went on without "
        "it (in [{}])",
        g.rank, g.name, fmt::join(decided.members, ", ")));
  }
  auto name = fmt::format("shrunk group [{}]", fmt::join(decided.members, ", "));
  const int rank = static_cast<int>(at - decided.members.begin());
  {
    std::lock_guard broken(g.broken_mu);
    if (g.broken.empty()) {
      g.broken = fmt::format("shrink() replaced it with {} ({} lost)", name,
                             gone.empty() ? std::string("none") : fmt::format("{}", fmt::join(gone, ", ")));
    }
    g.is_broken.store(true, std::memory_order_release);
  }
  for (std::size_t r = 0; r < lost.size(); ++r)
    if (!lost[r].empty())
      log().info("rank {}: shrink on {}: rank {} is lost: {}", g.rank, g.name, g.members[r], lost[r]);
  g.shrunk = make_group(g.world, std::move(name), std::move(decided.members), rank, decided.slot);
  return ProcessGroup(g.shrunk);
}

}  // namespace collie
