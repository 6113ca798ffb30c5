// The keys a job's ranks write in its store: the namespace of each run,
// joining, the failures they diagnose and the stall inspector's. Public
// for the programs that read them: the launcher reads the ranks' blames
// after a failed attempt; `collie store keys PREFIX` lists them on a live
// job. Nothing else spells these keys. docs/design.md's key table gathers
// every component's keys (a test holds it to these tables).
//
// A job's ranks work in the namespace of their run (run(), through a
// PrefixStore), so a restarted job never reads its previous attempt's
// keys. "<slot>" is a group's tag space (0: the world;
// runtime/src/group/tags.hpp), "<seq>" a call's place in its group.
//
// | key                                    | value                       | written by → read by |
// |----------------------------------------|-----------------------------|----------------------|
// | collie/run/<restart>[/gen/<g>]         | (a namespace)               | JobStore → everyone  |
// | world/rank/<r>/claimed                 | a counter: 1 once taken     | init → init          |
// | world/rank/<r>/host                    | its host identity (transport::host_identity()) | init → init of rank 0 |
// | world/id                               | the job's group id, 16 hex  | init of rank 0 → init |
// | world/machine/<machine>                | ranks on that machine       | init → init of rank 0 |
// | world/joined                           | (a barrier)                 | init                 |
// | world/placement                        | "<ranks> <cores> <host of rank 0> ..." | init of rank 0 → init |
// | world/link                             | "<gbit/s> <latency us> <prober> <echo> <ms>", or "failed <why>" | init of the link's prober → init |
// | blame/<world rank>                     | "<blamed rank> <message>"   | executor → executor, launcher |
// | mismatch/<slot>/<seq>                  | the first diagnosis         | executor → executor  |
// | stall/final/<slot>/<seq>               | "<culprit> <group rank> <report>" | executor → executor |
// | stall/proc/<world rank>                | "<kernel>\n<pid>\n<host>"   | init → stall inspector |
// | stall/n, stall/q/<k>                   | query count; "<slot> <seq>" | stall inspector → responders |
// | stall/a/<k>/<world rank>               | one rank's answer           | responder → stall inspector |
// | stall/ask/<slot>/<seq>/<round>         | a counter: the first asks   | stall inspector      |
// | stall/report/<slot>/<seq>/<round>      | "<culprit> <report>"        | stall inspector → stall inspector |
// | shrink/slots                           | a counter: the tag spaces shrunk groups took, from the top | shrink → shrink |
// | shrink/<slot>/<members>                | "<slot> <world rank>,...": the group's survivors, as first written | shrink → shrink |
// | expand/tickets                         | a counter: the newcomers that came to the run | newcomer → expand |
// | expand/newcomer/<ticket>               | "pid <pid> on <host>"       | newcomer → expand (its messages) |
// | expand/claimed                         | the last ticket a group admitted | expand → expand |
// | expand/decision/<group id>/<slot>/<n>  | "<first ticket> <last ticket>": the n-th expand of that group admits them, as first written | expand → expand |
// | expand/admit/<ticket>                  | "<world> <rank> <size> <first newcomer> <gbit/s> <latency us>" | expand → newcomer |
// | expand/world/<world>                   | (a namespace: the expanded world's keys) | expand, newcomer |
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace collie::keys {

namespace detail {
inline std::string join(std::string_view a, std::uint64_t b) {
  return std::string(a) + std::to_string(b);
}
inline std::string join(std::string_view a, std::uint64_t b, std::string_view c, std::uint64_t d) {
  return join(a, b) + std::string(c) + std::to_string(d);
}
}  // namespace detail

// ---- on the store's root ----

// Where runs' namespaces are.
inline constexpr std::string_view kRunPrefix = "collie/run/";
// The namespace of a job's run: its restart count, and the generation of
// its group (0 for the first; torch's destroy then init makes the next).
inline std::string run(int restart_count, int generation) {
  auto key = detail::join(kRunPrefix, static_cast<std::uint64_t>(restart_count));
  if (generation != 0) key += "/gen/" + std::to_string(generation);
  return key;
}

// ---- in a run's namespace: joining ----

inline std::string rank_claimed(int world_rank) {
  return detail::join("world/rank/", static_cast<std::uint64_t>(world_rank)) + "/claimed";
}
inline std::string rank_host(int world_rank) {
  return detail::join("world/rank/", static_cast<std::uint64_t>(world_rank)) + "/host";
}
inline constexpr std::string_view kGroupId = "world/id";
inline std::string machine(std::string_view machine_id) {
  return "world/machine/" + std::string(machine_id);
}
inline constexpr std::string_view kJoined = "world/joined";
inline constexpr std::string_view kPlacement = "world/placement";
// The link between hosts as measured at init (runtime/src/bootstrap/link_probe.hpp).
inline constexpr std::string_view kHostLink = "world/link";

// ---- in a run's namespace: failures ----

inline constexpr std::string_view kBlamePrefix = "blame/";
inline std::string blame(int world_rank) {
  return std::string(kBlamePrefix) + std::to_string(world_rank);
}
// A blame record: the rank a failed rank blames, and what it said.
struct Blame {
  int blamed = -1;
  std::string said;
};
inline std::string blame_value(int blamed, std::string_view said) {
  return std::to_string(blamed) + " " + std::string(said);
}
// nullopt when `value` does not start with a rank.
inline std::optional<Blame> parse_blame(std::string_view value) {
  const auto space = value.find(' ');
  const auto number = value.substr(0, space);
  if (number.empty() || number.size() > 9) return std::nullopt;
  int rank = 0;
  for (char c : number) {
    if (c < '0' || c > '9') return std::nullopt;
    rank = rank * 10 + (c - '0');
  }
  Blame b;
  b.blamed = rank;
  if (space != std::string_view::npos) b.said = std::string(value.substr(space + 1));
  return b;
}
// The world rank a blame key names (kBlamePrefix then the rank); -1 if none.
inline int blamer_of(std::string_view key) {
  const auto slash = key.rfind('/');
  const auto number = key.substr(slash == std::string_view::npos ? 0 : slash + 1);
  const auto parsed = parse_blame(number);
  return parsed ? parsed->blamed : -1;
}

inline std::string mismatch(std::uint32_t slot, std::uint64_t sequence) {
  return detail::join("mismatch/", slot, "/", sequence);
}
inline std::string stall_final(std::uint32_t slot, std::uint64_t sequence) {
  return detail::join("stall/final/", slot, "/", sequence);
}

// ---- in a run's namespace: shrinking a group (runtime/src/membership/shrink.cpp) ----

inline constexpr std::string_view kShrinkSlots = "shrink/slots";
// The decision of the shrink of the group with `slot` and these members
// (their fingerprint).
inline std::string shrink(std::uint32_t slot, std::uint64_t members) {
  return detail::join("shrink/", slot, "/", members);
}

// ---- in a run's namespace (generation 0): expanding a group (runtime/src/membership/expand.cpp) ----

inline constexpr std::string_view kExpandTickets = "expand/tickets";
inline constexpr std::string_view kExpandClaimed = "expand/claimed";
inline constexpr std::string_view kExpandNewcomerPrefix = "expand/newcomer/";
inline std::string expand_newcomer(std::uint64_t ticket) {
  return detail::join(kExpandNewcomerPrefix, ticket);
}
// What a newcomer writes there, and the launcher looks for its replacement by.
inline std::string newcomer_identity(long long pid, std::string_view host) {
  return "pid " + std::to_string(pid) + " on " + std::string(host);
}
// The decision of the n-th expand() of the group with `slot` in the world
// with this id.
inline std::string expand_decision(std::uint64_t group_id, std::uint32_t slot, std::uint64_t n) {
  return detail::join("expand/decision/", group_id, "/", slot) + "/" + std::to_string(n);
}
inline std::string expand_admit(std::uint64_t ticket) {
  return detail::join("expand/admit/", ticket);
}
// The namespace of the world an expand() made ("<group id>-<slot>-<n>").
inline std::string expand_world(std::string_view world) {
  return "expand/world/" + std::string(world);
}

// ---- in a run's namespace: the stall inspector (runtime/src/watch/stall.hpp) ----

inline std::string stall_process(int world_rank) {
  return detail::join("stall/proc/", static_cast<std::uint64_t>(world_rank));
}
inline constexpr std::string_view kStallQueries = "stall/n";
inline std::string stall_query(std::int64_t k) {
  return detail::join("stall/q/", static_cast<std::uint64_t>(k));
}
inline std::string stall_answers(std::int64_t k) {
  return detail::join("stall/a/", static_cast<std::uint64_t>(k)) + "/";
}
inline std::string stall_answer(std::int64_t k, int world_rank) {
  return stall_answers(k) + std::to_string(world_rank);
}
inline std::string stall_round(std::uint32_t slot, std::uint64_t sequence, int round) {
  return detail::join("", slot, "/", sequence) + "/" + std::to_string(round);
}
inline std::string stall_ask(std::uint32_t slot, std::uint64_t sequence, int round) {
  return "stall/ask/" + stall_round(slot, sequence, round);
}
inline std::string stall_report(std::uint32_t slot, std::uint64_t sequence, int round) {
  return "stall/report/" + stall_round(slot, sequence, round);
}

}  // namespace collie::keys
