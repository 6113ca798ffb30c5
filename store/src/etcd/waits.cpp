// The etcd store's blocking calls: watches and the barrier (waits.hpp).
#include "waits.hpp"

#include <algorithm>
#include <set>
#include <thread>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "../describe.hpp"

namespace collie::store::etcd {

namespace {

// How long a barrier that timed out may take to take its entry back out.
constexpr auto kUndoTime = std::chrono::seconds(5);

// One transaction of ranges, no comparison: one revision for all of them.
Json read_all(Session& s, const std::vector<std::string>& full_keys, Clock::time_point deadline,
              std::string_view what, Timeout timeout) {
  Json ops = Json::array();
  for (const auto& key : full_keys)
    ops.push_back(op_range(range_request(key)));
  return s.call("/v3/kv/txn", txn(Json::array(), std::move(ops)), deadline, what, timeout);
}

Range range_at(const Json& reply, std::size_t i) {
  const auto& r = responses(reply);
  if (i >= r.size()) throw ProtocolError("etcd store: a transaction's reply lacks a response");
  return parse_range(r[i].value("response_range", Json::object()));
}

// Watches [key, range_end) from `revision` until `seen` says an event is
// the one awaited (true), or the stream ends or the deadline passes (false).
bool watch(Session& s, std::string_view key, std::string_view range_end, std::int64_t revision,
           Clock::time_point deadline, const std::function<bool(const std::string& key, bool put)>& seen) {
  bool found = false;
  const auto on_line = [&](std::string_view line) {
    const auto json = Json::parse(line, nullptr, false);
    if (!json.is_object()) return true;
    if (json.contains("error")) return false;  // the stream failed: read again
    const auto result = json.value("result", Json::object());
    if (result.value("canceled", false)) return false;  // no leader, compacted: read again
    if (const auto events = result.find("events"); events != result.end()) {
      for (const auto& e : *events) {
        const auto kv = e.value("kv", Json::object());
        if (seen(unbase64(kv.value("key", "")), e.value("type", "PUT") != "DELETE")) found = true;
      }
    }
    return !found;
  };
  const auto body = watch_request(key, range_end, revision).dump();
  const auto started = Clock::now();
  if (s.http().stream("/v3/watch", body, deadline, on_line)) return found;
  // A stream that ended at once (a member going away): not at full speed.
  if (Clock::now() - started < std::chrono::milliseconds(50))
    std::this_thread::sleep_for(std::min<Clock::duration>(
        std::chrono::milliseconds(50), std::max<Clock::duration>(deadline - Clock::now(), {})));
  return false;
}

std::string list_missing(const std::vector<std::string>& keys) {
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i)
    out += (i == 0 ? "'" : ", '") + printable_key(keys[i]) + "'";
  if (keys.size() > 8) out += fmt::format(" and {} more", keys.size() - 8);
  return out;
}

}  // namespace

Read read_keys(Session& s, std::span<const std::string> keys, Clock::time_point deadline,
               std::string_view what, Timeout timeout) {
  Read out;
  for (std::size_t at = 0; at < keys.size(); at += kMaxTxnOps) {
    std::vector<std::string> full;
    for (std::size_t i = at; i < std::min(keys.size(), at + kMaxTxnOps); ++i)
      full.push_back(s.data(keys[i]));
    const auto reply = read_all(s, full, deadline, what, timeout);
    // The first part's revision: a watch from there misses nothing any
    // part did not see.
    if (at == 0) out.revision = revision_of(reply);
    for (std::size_t i = 0; i < full.size(); ++i) {
      const auto r = range_at(reply, i);
      out.values.push_back(r.kvs.empty() ? std::nullopt : std::optional(r.kvs[0].value));
    }
  }
  if (keys.empty()) {
    out.revision = revision_of(read_all(s, {s.data_prefix()}, deadline, what, timeout));
  }
  return out;
}

std::vector<std::string> wait_for_keys(Session& s, std::span<const std::string> keys,
                                       std::string_view what, Timeout timeout) {
  const auto until = s.deadline(timeout);
  for (;;) {
    auto read = read_keys(s, keys, until, what, timeout);
    std::set<std::string> missing;
    std::vector<std::string> missing_names;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (read.values[i]) continue;
      missing.insert(s.data(keys[i]));
      missing_names.push_back(keys[i]);
    }
    if (missing.empty()) {
      std::vector<std::string> values;
      for (auto& v : read.values)
        values.push_back(std::move(*v));
      return values;
    }
    if (Clock::now() >= until)
      s.fail(what, timeout, "; still missing: " + list_missing(missing_names));
    // Watch the span of the missing keys; a key seen put is crossed off
    // (and one deleted again, put back). All there: read them again.
    const std::set<std::string> awaited = missing;
    const auto first = *awaited.begin();
    const auto last = *awaited.rbegin() + std::string(1, '\0');
    watch(s, first, last, read.revision + 1, until, [&](const std::string& key, bool put) {
      if (awaited.count(key) == 0) return false;
      if (put)
        missing.erase(key);
      else
        missing.insert(key);
      return missing.empty();
    });
  }
}

void enter_barrier(Session& s, std::string_view name, std::uint32_t n, Timeout timeout) {
  const auto what = describe_call("barrier", name);
  if (n == 0) throw RequestError(fmt::format("barrier '{}': n must be at least 1", printable_key(name)));
  const auto until = s.deadline(timeout);
  const auto base = s.barrier(name);
  const auto generation_key = base + "g";  // released generations, as decimal text
  const auto version_key = base + "v";     // touched by every entry and exit
  const auto entries = [&](std::int64_t g) { return fmt::format("{}e/{:020d}/", base, g); };
  const auto generation_of = [&](const Range& r) -> std::int64_t {
    return r.kvs.empty() ? 0 : std::stoll(r.kvs[0].value);
  };

  // Enter the current generation (the comparison: it is still current).
  std::int64_t generation = 0;
  std::int64_t generation_revision = 0;
  std::string entry;
  for (;;) {
    const auto reply = read_all(s, {generation_key}, until, what, timeout);
    const auto g = range_at(reply, 0);
    generation = generation_of(g);
    generation_revision = g.kvs.empty() ? 0 : g.kvs[0].mod_revision;
    // Named by its n: the entrants that agree on n are counted by a prefix,
    // and so are all of them, without reading any (two counts, whatever n).
    entry = fmt::format("{}{}/{}-{}", entries(generation), n, s.id(), s.next_sequence());
    const auto request = txn(Json::array({compare_mod(generation_key, generation_revision)}),
                             Json::array({op_put(put_request(entry, std::to_string(n), s.lease())),
                                          op_put(put_request(version_key, ""))}));
    if (succeeded(s.call("/v3/kv/txn", request, until, what, timeout))) break;
  }
  // Leaves the barrier: false when it was released first.
  const auto leave = [&] {
    const auto request = txn(Json::array({compare_mod(generation_key, generation_revision)}),
                             Json::array({op_delete(delete_request(entry)),
                                          op_put(put_request(version_key, ""))}));
    return succeeded(s.call("/v3/kv/txn", request, Clock::now() + kUndoTime, what, kUndoTime));
  };

  const auto wait_for_release = [&] {
    for (;;) {
      const auto all = entries(generation);
      const auto alike = fmt::format("{}{}/", all, n);
      const auto reply = s.call(
          "/v3/kv/txn",
          txn(Json::array(),
              Json::array({op_range(range_request(generation_key)),
                           op_range(range_request(version_key)),
                           op_range(range_request(all, prefix_end(all), true)),
                           op_range(range_request(alike, prefix_end(alike), true))})),
          Clock::now() >= until ? Clock::now() + kUndoTime : until, what, timeout);
      const auto g = range_at(reply, 0);
      if (generation_of(g) != generation) return;  // released
      const auto v = range_at(reply, 1);
      const auto count = static_cast<std::uint64_t>(range_at(reply, 3).count);
      if (range_at(reply, 2).count != range_at(reply, 3).count) {
        // Someone entered with another n: which (one read, only now).
        const auto names = parse_range(s.call("/v3/kv/range",
                                              range_request(all, prefix_end(all), false, true),
                                              Clock::now() + kUndoTime, what, kUndoTime));
        std::string other;
        for (const auto& e : names.kvs) {
          const auto theirs = e.key.substr(all.size(), e.key.find('/', all.size()) - all.size());
          if (theirs != std::to_string(n)) other = theirs;
        }
        if (other.empty()) continue;  // it left meanwhile: count again
        if (leave())
          throw RequestError(fmt::format(
              "barrier '{}': this caller says n={}, but a caller waiting in it says n={}",
              printable_key(name), n, other));
        return;
      }
      if (count >= n) {
        // The last one in: release everyone, unless someone came or left
        // since the count (then count again).
        const auto release =
            txn(Json::array({compare_mod(generation_key, generation_revision),
                             compare_mod(version_key, v.kvs.empty() ? 0 : v.kvs[0].mod_revision)}),
                Json::array({op_put(put_request(generation_key, std::to_string(generation + 1))),
                             op_delete(delete_request(entries(generation),
                                                      prefix_end(entries(generation))))}));
        if (succeeded(s.call("/v3/kv/txn", release, until, what, timeout))) return;
        continue;
      }
      if (Clock::now() >= until) {
        if (!leave()) return;
        s.fail(what, timeout,
               fmt::format("; {} of its {} callers came", count, n));
      }
      // Wait for the generation to move on, or the deadline.
      watch(s, generation_key, "", revision_of(reply) + 1, until,
            [](const std::string&, bool) { return true; });
    }
  };
  try {
    wait_for_release();
  } catch (const TimeoutError&) {
    // A call that ran into the deadline: out of the count, unless released.
    bool released = false;
    try {
      released = !leave();
    } catch (const Error&) {
    }
    if (!released) throw;
  }
}

}  // namespace collie::store::etcd
