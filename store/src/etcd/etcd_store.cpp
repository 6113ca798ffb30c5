// The Store interface on etcd (etcd_store.hpp): each call as etcd requests.
#include <collie/store/etcd_store.hpp>

#include <limits>
#include <sys/stat.h>

#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/error.hpp>

#include "../counter.hpp"
#include "../describe.hpp"
#include "session.hpp"
#include "waits.hpp"

namespace collie::store {

namespace {

using etcd::Clock;
using etcd::Json;

// etcd refuses requests over 1.5 MiB (--max-request-bytes); values travel in
// base64 (4 bytes for 3) with their key and some JSON around them.
constexpr std::size_t kMaxValueBytes = (3u << 20) / 2 / 4 * 3 - 8192;

void check_all(const EtcdOptions& o) {
  if (o.endpoints.empty()) throw ArgumentError("etcd store: no endpoint (host:port) was given");
  if (o.prefix.empty() || o.prefix.back() != '/')
    throw ArgumentError(fmt::format("etcd store: the prefix '{}' must end in '/'", o.prefix));
  if (o.timeout <= std::chrono::milliseconds::zero())
    throw ArgumentError("etcd store: the timeout must be positive");
  if (o.lease_ttl < std::chrono::seconds(2))
    throw ArgumentError("etcd store: the lease's time to live must be at least 2 s");
  for (const auto& e : o.endpoints) {
    if (e.starts_with("http://") && !o.insecure) {
      throw ArgumentError(fmt::format(
          "etcd store: {} is plain HTTP: anyone who reaches it could read and change the job's "
          "keys. Use https:// with a client certificate (cacert, cert, key), or say insecure "
          "(--insecure) to accept it",
          e));
    }
  }
  if (!o.insecure && (o.tls.cert.empty() || o.tls.key.empty())) {
    throw ArgumentError(
        "etcd store: no client certificate: etcd is reached over TLS with a certificate and its "
        "key (--rdzv_conf cacert=CA.pem,cert=CLIENT.pem,key=CLIENT-KEY.pem, or "
        "COLLIE_ETCD_CACERT, COLLIE_ETCD_CERT, COLLIE_ETCD_KEY), or without TLS only when you "
        "say insecure (--insecure)");
  }
  for (const auto* file : {&o.tls.cacert, &o.tls.cert, &o.tls.key}) {
    struct stat st {};
    if (!file->empty() && ::stat(file->c_str(), &st) != 0)
      throw ArgumentError(fmt::format("etcd store: cannot read '{}'", *file));
  }
}

void check_value(std::string_view key, std::size_t bytes) {
  if (bytes + key.size() <= kMaxValueBytes) return;
  throw RequestError(fmt::format(
      "etcd store: the value of '{}' is {} bytes: over what one etcd request carries ({} bytes "
      "of key and value; etcd's --max-request-bytes is 1.5 MiB and values travel in base64)",
      printable_key(key), bytes, kMaxValueBytes));
}

std::int64_t counter_of(std::string_view key, const std::string& text) {
  const auto value = parse_counter(text);
  if (!value) {
    throw RequestError(fmt::format("add('{}'): the key holds '{}', which is not an integer",
                                   printable_key(key), printable_key(text)));
  }
  return *value;
}

}  // namespace

std::vector<std::string> parse_etcd_endpoints(std::string_view text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = text.find(',', at);
    auto part = text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    at = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    while (!part.empty() && part.front() == ' ')
      part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ')
      part.remove_suffix(1);
    std::string_view address = part;
    for (const std::string_view scheme : {"https://", "http://"})
      if (address.starts_with(scheme)) address.remove_prefix(scheme.size());
    while (!address.empty() && address.back() == '/')
      address.remove_suffix(1);
    const auto hp = split_host_port(address);
    if (part.empty() || !hp || hp->port == 0) {
      throw ArgumentError(fmt::format(
          "etcd endpoints '{}': '{}' is not host:port (nor https://host:port)", text, part));
    }
    out.emplace_back(part);
  }
  return out;
}

class EtcdStore::Impl {
 public:
  explicit Impl(EtcdOptions options) : session(std::move(options)) {}
  etcd::Session session;
};

void EtcdStore::check_options(const EtcdOptions& options) { check_all(options); }

EtcdStore::EtcdStore(EtcdOptions options) {
  check_all(options);
  impl_ = std::make_unique<Impl>(std::move(options));
}

EtcdStore::~EtcdStore() = default;

const EtcdOptions& EtcdStore::options() const { return impl_->session.options(); }
std::string EtcdStore::describe() const { return impl_->session.describe(); }
std::chrono::milliseconds EtcdStore::timeout() const { return options().timeout; }

void EtcdStore::set(std::string_view key, std::string_view value, Timeout timeout) {
  check_value(key, value.size());
  auto& s = impl_->session;
  s.call("/v3/kv/put", etcd::put_request(s.data(key), value), s.deadline(timeout),
         describe_call("set", key), timeout);
}

void EtcdStore::put_with_lease(std::string_view key, std::string_view value, Timeout timeout) {
  check_value(key, value.size());
  auto& s = impl_->session;
  s.call("/v3/kv/put", etcd::put_request(s.data(key), value, s.lease()), s.deadline(timeout),
         describe_call("put_with_lease", key), timeout);
}

std::string EtcdStore::get(std::string_view key, Timeout timeout) {
  const std::string k(key);
  return etcd::wait_for_keys(impl_->session, std::span(&k, 1), describe_call("get", key), timeout)
      .front();
}

std::optional<std::string> EtcdStore::try_get(std::string_view key, Timeout timeout) {
  auto& s = impl_->session;
  const auto r = etcd::parse_range(s.call("/v3/kv/range", etcd::range_request(s.data(key)),
                                          s.deadline(timeout), describe_call("try_get", key),
                                          timeout));
  if (r.kvs.empty()) return std::nullopt;
  return r.kvs[0].value;
}

std::int64_t EtcdStore::add(std::string_view key, std::int64_t delta, Timeout timeout) {
  std::int64_t result = 0;
  impl_->session.rewrite(
      key,
      [&](const std::optional<std::string>& current) -> std::optional<std::string> {
        const std::int64_t old = current ? counter_of(key, *current) : 0;
        if (__builtin_add_overflow(old, delta, &result)) {
          throw RequestError(fmt::format("add('{}', {}): {} + {} overflows int64",
                                         printable_key(key), delta, old, delta));
        }
        return std::to_string(result);
      },
      describe_call("add", key), timeout);
  return result;
}

CompareSetResult EtcdStore::compare_set(std::string_view key, std::string_view expected,
                                        std::string_view desired, Timeout timeout) {
  check_value(key, desired.size());
  const auto r = impl_->session.rewrite(
      key,
      [&](const std::optional<std::string>& current) -> std::optional<std::string> {
        const bool matches = current ? *current == expected : expected.empty();
        if (!matches) return std::nullopt;
        return std::string(desired);
      },
      describe_call("compare_set", key), timeout);
  return CompareSetResult{r.written, r.value};
}

void EtcdStore::append(std::string_view key, std::string_view value, Timeout timeout) {
  impl_->session.rewrite(
      key,
      [&](const std::optional<std::string>& current) -> std::optional<std::string> {
        auto next = current.value_or("") + std::string(value);
        check_value(key, next.size());
        return next;
      },
      describe_call("append", key), timeout);
}

void EtcdStore::wait(std::span<const std::string> keys, Timeout timeout) {
  etcd::wait_for_keys(impl_->session, keys, describe_call("wait", keys), timeout);
}

bool EtcdStore::check(std::span<const std::string> keys, Timeout timeout) {
  auto& s = impl_->session;
  const auto read =
      etcd::read_keys(s, keys, s.deadline(timeout), describe_call("check", keys), timeout);
  for (const auto& v : read.values)
    if (!v) return false;
  return true;
}

bool EtcdStore::delete_key(std::string_view key, Timeout timeout) {
  auto& s = impl_->session;
  const auto reply = s.call("/v3/kv/deleterange", etcd::delete_request(s.data(key)),
                            s.deadline(timeout), describe_call("delete_key", key), timeout);
  return etcd::number(reply, "deleted") > 0;
}

std::int64_t EtcdStore::count_keys(std::string_view prefix, Timeout timeout) {
  auto& s = impl_->session;
  const auto from = s.data(prefix);
  const auto reply =
      s.call("/v3/kv/range", etcd::range_request(from, etcd::prefix_end(from), true),
             s.deadline(timeout), describe_call("count_keys", prefix), timeout);
  return etcd::number(reply, "count");
}

std::vector<std::string> EtcdStore::list_keys(std::string_view prefix, Timeout timeout) {
  auto& s = impl_->session;
  const auto from = s.data(prefix);
  const auto r = etcd::parse_range(
      s.call("/v3/kv/range", etcd::range_request(from, etcd::prefix_end(from), false, true),
             s.deadline(timeout), describe_call("list_keys", prefix), timeout));
  std::vector<std::string> names;
  const auto strip = s.data_prefix().size();
  for (const auto& kv : r.kvs)
    names.push_back(kv.key.substr(strip));
  return names;
}

std::vector<std::string> EtcdStore::multi_get(std::span<const std::string> keys,
                                              Timeout timeout) {
  return etcd::wait_for_keys(impl_->session, keys, describe_call("multi_get", keys), timeout);
}

void EtcdStore::multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                          Timeout timeout) {
  if (keys.size() != values.size()) {
    throw ArgumentError(fmt::format("multi_set: {} keys but {} values", keys.size(),
                                    values.size()));
  }
  auto& s = impl_->session;
  const auto until = s.deadline(timeout);
  const auto what = describe_call("multi_set", keys);
  // One transaction per 128 keys, each under etcd's request size.
  std::size_t at = 0;
  while (at < keys.size()) {
    Json ops = Json::array();
    std::size_t bytes = 0;
    for (; at < keys.size() && ops.size() < etcd::kMaxTxnOps; ++at) {
      check_value(keys[at], values[at].size());
      bytes += keys[at].size() + values[at].size();
      if (!ops.empty() && bytes > kMaxValueBytes) break;
      ops.push_back(etcd::op_put(etcd::put_request(s.data(keys[at]), values[at])));
    }
    s.call("/v3/kv/txn", etcd::txn(Json::array(), std::move(ops)), until, what, timeout);
  }
}

void EtcdStore::barrier(std::string_view name, std::uint32_t n, Timeout timeout) {
  etcd::enter_barrier(impl_->session, name, n, timeout);
}

}  // namespace collie::store
