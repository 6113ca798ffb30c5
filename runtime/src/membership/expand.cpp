// ProcessGroup::expand() (process_group.hpp) and a newcomer's init(): a
// running job takes in processes started after it, between steps.
//
// A newcomer (InitOptions::join, COLLIE_JOIN=1) opens the job's store as
// any rank does, takes a ticket in the run's namespace (a counter), says
// who it is, and waits for its admission under that ticket.
//
// The members' expand() is a collective of their group:
// 1. Decide. The first member's view of the waiting tickets (those after
//    the last one any group admitted, up to the count) is written under
//    the group's n-th expand (compare_set on an empty key), and every
//    member reads that decision: newcomers that come meanwhile wait for
//    the next expand(). No newcomer: the group goes on as it is. Else the
//    members meet in a barrier of the group first: one lost since its last
//    call fails it, and they shrink before anyone is admitted.
// 2. Admit. Each ticket's admission is itself first-writer-wins, so two
//    groups that admit the same newcomer at once both see it, and the one
//    that lost throws (one group of a job admits newcomers at a time). The
//    admission names the new world's namespace, the newcomer's rank and
//    size, and the link between hosts as the members measured it (every
//    rank must price Auto's choices alike).
// 3. Meet. Members and newcomers make a new world in that namespace of the
//    job's store, as init() does (init_world.hpp), with new connections.
//    A newcomer that never comes is named at the timeout, and the old
//    group stays in use; otherwise it is revoked, naming its successor.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/keys.hpp>
#include <collie/log.hpp>
#include <collie/store/prefix_store.hpp>

#include "group/group.hpp"
#include "bootstrap/init_world.hpp"
#include "group/job_store.hpp"

namespace collie {

namespace {

// What a newcomer is told: "<world> <rank> <size> <first newcomer> <gbit/s>
// <latency us> <streams>".
struct Admission {
  std::string world;
  int rank = 0;
  int size = 0;
  int first_newcomer = 0;
  double gbits = 0;
  double latency_us = 0;
  int streams = 1;
};

std::string encode(const Admission& a) {
  return fmt::format("{} {} {} {} {} {} {}", a.world, a.rank, a.size, a.first_newcomer, a.gbits,
                     a.latency_us, a.streams);
}

Admission decode_admission(const std::string& text) {
  Admission a;
  std::istringstream in(text);
  in >> a.world >> a.rank >> a.size >> a.first_newcomer >> a.gbits >> a.latency_us >>
      a.streams;
  if (!in || a.size < 1 || a.streams < 1 || a.rank < 0 || a.rank >= a.size ||
      a.first_newcomer > a.rank)
    throw ProtocolError(fmt::format(
        "a newcomer's admission in the job's store reads '{}', not \"<world> <rank> <size> "
        "<first newcomer> <gbit/s> <latency us> <streams>\": is another program using this "
        "store?",
        text));
  return a;
}

// "<first ticket> <last ticket>" (first exclusive).
std::pair<std::int64_t, std::int64_t> decode_decision(const std::string& text) {
  std::istringstream in(text);
  std::int64_t from = 0, to = 0;
  in >> from >> to;
  if (!in || from < 0 || to < from)
    throw ProtocolError(fmt::format(
        "an expand() decision in the job's store reads '{}', not \"<first ticket> <last "
        "ticket>\": is another program using this store?",
        text));
  return {from, to};
}

std::int64_t number_or_zero(const std::optional<std::string>& text) {
  if (!text) return 0;
  try {
    return std::stoll(*text);
  } catch (const std::exception&) {
    throw ProtocolError(fmt::format(
        "the job's store holds '{}' where expand() keeps a ticket number: is another program "
        "using this store?",
        *text));
  }
}

// The expanded world's job: this process's settings, its store a namespace
// of the run's, where stall reports still reach the collie store that
// serves it (if one does).
JobConfig expanded_config(const JobConfig& base, const std::shared_ptr<store::Store>& run_store,
                          const std::string& world, int rank, int size) {
  JobConfig c = base;
  c.method = JobConfig::Method::Given;
  c.given_store = std::make_shared<store::PrefixStore>(run_store, keys::expand_world(world));
  c.given_store_name.clear();
  c.join = false;
  c.rank = rank;
  c.world_size = size;
  c.rank_source = "expand()";
  const bool served = base.method == JobConfig::Method::Env ||
                      base.method == JobConfig::Method::Tcp ||
                      (base.method == JobConfig::Method::Given && base.given_served);
  c.given_served = served;
  c.given_key_prefix.clear();
  if (served) {
    c.given_key_prefix =
        (base.method == JobConfig::Method::Given ? base.given_key_prefix + "/" : std::string()) +
        keys::run(base.restart_count, 0) + "/" + keys::expand_world(world);
  }
  if (!c.trace_dir.empty()) c.trace_dir += "/" + world;
  return c;
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "an unnamed host";
  return name;
}

}  // namespace

namespace {

// What the members decided and did in the store (steps 1 and 2): the new
// world's id and size, and who joins; none when nobody waits.
struct Admitted {
  std::string world;
  int size = 0;
  std::vector<std::string> who;  // the newcomers, for messages
};

// Step 1: the tickets the n-th expand() of this group admits, (from, to].
std::pair<std::int64_t, std::int64_t> decide(detail::Group& g, std::uint64_t n) {
  auto& world = *g.world;
  auto& run = *world.run_store;
  const auto key = keys::expand_decision(world.group_id, g.slot, n);
  std::string decided;
  if (auto d = run.try_get(key)) {
    decided = *d;
  } else {
    const std::int64_t tickets = run.add(keys::kExpandTickets, 0);
    const std::int64_t claimed = number_or_zero(run.try_get(keys::kExpandClaimed));
    const auto result =
        run.compare_set(key, "", fmt::format("{} {}", claimed, std::max(claimed, tickets)));
    if (!result.current) throw Error(fmt::format("the store lost key {}", key));
    decided = *result.current;
  }
  return decode_decision(decided);
}

// Step 2: tickets (from, to] admitted to the n-th expand's world.
Admitted admit(detail::Group& g, std::uint64_t n, std::int64_t from, std::int64_t to) {
  auto& world = *g.world;
  auto& run = *world.run_store;
  const int members = static_cast<int>(g.members.size());
  Admitted a;
  a.size = members + static_cast<int>(to - from);
  a.world = fmt::format("{:016x}-{}-{}", world.group_id, g.slot, n);
  for (std::int64_t t = from + 1; t <= to; ++t) {
    const int rank = members + static_cast<int>(t - from - 1);
    const Admission mine{a.world,          rank,
                         a.size,           members,
                         world.host_link.gbits, world.host_link.latency_us,
                         world.host_link.streams};
    const auto result = run.compare_set(keys::expand_admit(static_cast<std::uint64_t>(t)), "",
                                        encode(mine));
    if (!result.current || decode_admission(*result.current).world != a.world) {
      throw Error(fmt::format(
          "rank {}: expand on {}: newcomer {} was admitted by another group at the same time "
          "(to world {}); one group of a job admits newcomers at a time. {} stays in use",
          g.rank, g.name, t, result.current ? decode_admission(*result.current).world : "?",
          g.name));
    }
    const auto said = run.try_get(keys::expand_newcomer(static_cast<std::uint64_t>(t)));
    a.who.push_back(fmt::format("rank {} ({})", rank, said ? *said : "not yet said who"));
  }
  // The last ticket admitted, for the next decision (only ever raised).
  for (auto current = run.try_get(keys::kExpandClaimed); number_or_zero(current) < to;) {
    const auto result =
        run.compare_set(keys::kExpandClaimed, current ? *current : "", std::to_string(to));
    current = result.current;
  }
  return a;
}

}  // namespace

ProcessGroup ProcessGroup::expand() {
  auto& g = *impl_;
  g.require_member("expand");
  std::lock_guard lock(g.shrink_mu);
  if (g.is_broken.load(std::memory_order_acquire)) {
    std::lock_guard broken(g.broken_mu);
    throw ConnectionError(fmt::format(
        "rank {}: expand on {}: this group can no longer be used ({}); shrink() it first", g.rank,
        g.name, g.broken));
  }
  auto& world = *g.world;
  const std::uint64_t n = g.expansions++;
  const auto context = [&](const Error& e) {
    return fmt::format(
        "rank {}: expand on {}: the members agree in the job's store, which failed: {}", g.rank,
        g.name, e.what());
  };
  std::pair<std::int64_t, std::int64_t> tickets;
  try {
    tickets = decide(g, n);
  } catch (const ConnectionError& e) {
    throw ConnectionError(context(e));
  } catch (const TimeoutError& e) {
    throw TimeoutError(context(e));
  }
  const auto [from, to] = tickets;
  if (to == from) return *this;
  // Every member is alive and here before anyone is admitted: a member lost
  // since the group's last call (one that call did not need) fails this
  // barrier, naming it, and nobody waits for it in the new world; the
  // tickets stay unclaimed for the expand() after the shrink.
  barrier();
  Admitted admitted;
  try {
    admitted = admit(g, n, from, to);
  } catch (const ConnectionError& e) {
    throw ConnectionError(context(e));
  } catch (const TimeoutError& e) {
    throw TimeoutError(context(e));
  }
  const int members = static_cast<int>(g.members.size());
  const int size = admitted.size;
  const auto& world_id = admitted.world;
  const auto& who = admitted.who;

  WorldSeed seed;
  seed.name = fmt::format("world of {} after expand ({} joined)", size, size - members);
  seed.run_store = world.run_store;
  seed.host_link = world.host_link;
  std::shared_ptr<detail::Group> next;
  const auto failed = [&](const Error& e) {
    return fmt::format(
        "rank {}: expand on {}: the members admitted newcomers {} but the new group did not "
        "form: {}. {} stays in use, and these newcomers are not admitted again",
        g.rank, g.name, fmt::join(who, ", "), e.what(), g.name);
  };
  try {
    next = make_world(expanded_config(world.config, world.run_store, world_id, g.rank, size), seed);
  } catch (const TimeoutError& e) {
    throw TimeoutError(failed(e));
  } catch (const ConnectionError& e) {
    throw ConnectionError(failed(e));
  } catch (const InterruptedError&) {
    throw;
  } catch (const Error& e) {
    throw Error(failed(e));
  }
  for (int r = members; r < size; ++r)
    next->newcomers.push_back(r);
  {
    std::lock_guard broken(g.broken_mu);
    if (g.broken.empty())
      g.broken = fmt::format("expand() replaced it with {} (newcomers: {})", next->name,
                             fmt::join(who, ", "));
    g.is_broken.store(true, std::memory_order_release);
  }
  log().info("rank {}: expand on {}: {} joined, now rank {} of {}", g.rank, g.name,
             fmt::join(who, ", "), g.rank, size);
  return ProcessGroup(next);
}

std::vector<int> ProcessGroup::newcomers() const {
  return impl_->newcomers;
}

std::shared_ptr<detail::Group> join_running_job(JobConfig config) {
  std::shared_ptr<store::Store> run;
  std::uint64_t ticket = 0;
  const auto where = [&] {
    return config.method == JobConfig::Method::Env || config.method == JobConfig::Method::Tcp
               ? fmt::format("the store at {}:{}", config.master_addr, config.master_port)
               : std::string("the job's store");
  };
  {
    JobStore job(config);
    run = job.run_store();
  }
  try {
    ticket = static_cast<std::uint64_t>(run->add(keys::kExpandTickets, 1));
    run->set(keys::expand_newcomer(ticket), keys::newcomer_identity(::getpid(), hostname()));
  } catch (const Error& e) {
    throw ConnectionError(fmt::format("newcomer: cannot reach {} to join the running job: {}",
                                      where(), e.what()));
  }
  log().info("newcomer {} (pid {}): waiting in {} for the job's members to admit it at their "
             "next expand()",
             ticket, ::getpid(), where());
  std::string text;
  try {
    text = run->get(keys::expand_admit(ticket));
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format(
        "newcomer {} (pid {}) waited {} in {} and no member admitted it: the job's members "
        "take newcomers in at ProcessGroup::expand(), between steps; does the program call it, "
        "and is this the job's store? ({})",
        ticket, ::getpid(), describe_duration(config.timeout), where(), e.what()));
  } catch (const ConnectionError& e) {
    throw ConnectionError(fmt::format(
        "newcomer {} (pid {}) was waiting in {} for the job's members to admit it when the store "
        "went away: {}",
        ticket, ::getpid(), where(), e.what()));
  }
  const auto a = decode_admission(text);
  WorldSeed seed;
  seed.name = fmt::format("world of {} after expand ({} joined)", a.size, a.size - a.first_newcomer);
  seed.run_store = run;
  seed.host_link = HostLink{a.gbits, a.latency_us,
                            "as the members had it when they admitted this newcomer", a.streams,
                            0};
  auto config_of_world = expanded_config(config, run, a.world, a.rank, a.size);
  std::shared_ptr<detail::Group> group;
  try {
    group = make_world(std::move(config_of_world), seed);
  } catch (const InterruptedError&) {
    throw;
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format("newcomer {}, admitted as rank {} of {}: {}", ticket, a.rank, a.size, e.what()));
  } catch (const ConnectionError& e) {
    throw ConnectionError(fmt::format("newcomer {}, admitted as rank {} of {}: {}", ticket, a.rank, a.size, e.what()));
  }
  for (int r = a.first_newcomer; r < a.size; ++r)
    group->newcomers.push_back(r);
  log().info("newcomer {}: joined as rank {} of {}", ticket, a.rank, a.size);
  return group;
}

}  // namespace collie
