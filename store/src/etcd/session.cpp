// The etcd store's session: lease, calls and their errors (session.hpp).
#include "session.hpp"

#include <fmt/format.h>

#include <collie/crypto.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>

namespace collie::store::etcd {

namespace {

// "61626364": barrier names are arbitrary bytes; in hex they cannot reach
// into another barrier's keys.
std::string hex(std::string_view bytes) {
  std::string out;
  for (const char c : bytes)
    out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

}  // namespace

Session::Session(EtcdOptions options) : options_(std::move(options)), http_(options_) {
  id_ = fmt::format("{:016x}", crypto::random_u64());
  grant(Clock::now() + options_.timeout);
  keeper_ = std::thread([this] { keep_alive(); });
}

Session::~Session() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  // Its keys go now, not a TTL later; a store that cannot reach etcd any
  // more leaves them to expire.
  try {
    (void)http_.post("/v3/lease/revoke", Json{{"ID", std::to_string(lease_.load())}}.dump(),
                     Clock::now() + std::chrono::seconds(2));
  } catch (const std::exception&) {
  }
}

std::string Session::describe() const {
  return fmt::format("etcd at {} (prefix {})", http_.members(), options_.prefix);
}

std::string Session::barrier(std::string_view name) const {
  return options_.prefix + "b/" + hex(name) + "/";
}

Clock::time_point Session::deadline(Timeout t) const {
  const auto value = t.value_or(options_.timeout);
  if (value <= std::chrono::milliseconds::zero())
    throw ArgumentError("etcd store: the timeout must be positive");
  return Clock::now() + value;
}

Json Session::call(std::string_view path, const Json& request, Clock::time_point deadline,
                   std::string_view what, Timeout timeout, bool* ambiguous) {
  const auto reply = http_.post(path, request.dump(), deadline, ambiguous);
  if (!reply) fail(what, timeout);
  auto json = Json::parse(reply->body, nullptr, false);
  if (reply->status == 200 && json.is_object()) return json;
  auto [code, message] = error_of(json);
  if (message.empty()) message = reply->body.substr(0, 300);
  const auto text = fmt::format("etcd at {}: {}: {} (HTTP {})", reply->member, what, message,
                                reply->status);
  switch (code) {
    case 3:   // InvalidArgument: too large, too many operations
    case 11:  // OutOfRange
      throw RequestError(text);
    case 7:   // PermissionDenied
    case 16:  // Unauthenticated
      throw AuthenticationError(text);
    default:
      throw Error(text);
  }
}

void Session::fail(std::string_view what, Timeout timeout, std::string_view more) {
  const auto limit = timeout.value_or(options_.timeout);
  bool quorum = false;
  // At least a second: a loaded machine (a sanitizer build, an
  // oversubscribed host) answers /health slower than a tenth of a short
  // call, and a member that is only slow is not a lost quorum.
  const auto budget = std::clamp(limit / 10, std::chrono::milliseconds(1000),
                                 std::chrono::milliseconds(2000));
  const auto health = http_.health(budget, &quorum);
  if (!quorum) {
    // (What each member says now covers what the calls saw.)
    throw ConnectionError(fmt::format("etcd store: {} failed within {}: etcd at {} has no quorum ({}){}",
                                      what, describe_duration(limit), http_.members(), health, more));
  }
  throw TimeoutError(fmt::format("etcd at {}: {} timed out after {}{}", http_.members(), what,
                                 describe_duration(limit), more));
}

Session::Rewrite Session::rewrite(
    std::string_view key,
    const std::function<std::optional<std::string>(const std::optional<std::string>&)>& change,
    std::string_view what, Timeout timeout) {
  const auto until = deadline(timeout);
  const auto full = data(key);
  for (;;) {
    const auto read = parse_range(call("/v3/kv/range", range_request(full), until, what, timeout));
    std::optional<std::string> current;
    std::int64_t revision = 0;
    if (!read.kvs.empty()) {
      current = read.kvs[0].value;
      revision = read.kvs[0].mod_revision;
    }
    auto next = change(current);
    if (!next) return Rewrite{false, std::move(current)};
    const auto mark = std::to_string(next_sequence());
    const auto request =
        txn(Json::array({compare_mod(full, revision)}),
            Json::array({op_put(put_request(full, *next)), op_put(put_request(marker(), mark, lease()))}));
    bool ambiguous = false;
    const auto reply = call("/v3/kv/txn", request, until, what, timeout, &ambiguous);
    if (succeeded(reply)) return Rewrite{true, std::move(next)};
    if (ambiguous) {
      // An attempt before this one got no answer: if it was done, the
      // marker says so, and this one failed its comparison for that reason.
      const auto m = parse_range(call("/v3/kv/range", range_request(marker()), until, what, timeout));
      if (!m.kvs.empty() && m.kvs[0].value == mark) return Rewrite{true, std::move(next)};
    }
  }
}

void Session::grant(Clock::time_point deadline) {
  const auto reply =
      http_.post("/v3/lease/grant", Json{{"TTL", options_.lease_ttl.count()}}.dump(), deadline);
  if (!reply) fail("taking a lease", options_.timeout);
  const auto json = Json::parse(reply->body, nullptr, false);
  if (reply->status != 200 || !json.is_object() || number(json, "ID") == 0) {
    throw Error(fmt::format("etcd at {}: taking a lease failed: {} (HTTP {})", reply->member,
                            reply->body.substr(0, 300), reply->status));
  }
  lease_ = number(json, "ID");
}

void Session::keep_alive() {
  const auto every = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(100),
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl) / 3);
  auto wait = every;
  bool failing = false;  // said once per streak of failures
  const auto failed = [&](const std::string& why) {
    if (!failing)
      collie::log().warn("etcd store: keeping the lease of {} alive: {} (trying again)",
                         describe(), why);
    failing = true;
    wait = every / 4;
  };
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stop_cv_.wait_for(lock, wait, [&] { return stopping_; })) return;
    }
    wait = every;
    try {
      const auto reply = http_.post("/v3/lease/keepalive",
                                    Json{{"ID", std::to_string(lease_.load())}}.dump(),
                                    Clock::now() + every);
      if (!reply) {
        failed("no member answered: " + http_.failures());
        continue;
      }
      // The reply is one line of a stream: {"result":{"ID":..,"TTL":..}}.
      const auto line = reply->body.substr(0, reply->body.find('\n'));
      const auto json = Json::parse(line, nullptr, false);
      if (const auto e = error_of(json); !e.message.empty()) {
        failed(e.message);
        continue;
      }
      const auto it = json.is_object() ? json.find("result") : json.end();
      const auto result = it != json.end() && it->is_object() ? *it : Json::object();
      if (number(result, "TTL") > 0) {
        if (failing) collie::log().warn("etcd store: the lease of {} is kept alive again", describe());
        failing = false;
        continue;
      }
      collie::log().warn(
          "etcd store: the lease of {} expired (this process could not reach etcd for {} s): its "
          "barrier entries and keys put with the lease are gone; taking a new lease",
          describe(), options_.lease_ttl.count());
      grant(Clock::now() + every);
    } catch (const std::exception& e) {
      failed(e.what());
    }
  }
}

}  // namespace collie::store::etcd
