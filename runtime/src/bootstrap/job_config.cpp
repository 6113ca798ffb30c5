// A job's settings from InitOptions and the environment (job_config.hpp):
// one function per concern, each COLLIE_* variable read and checked by its
// entry in the table (collie/environment.hpp); the launchers' variables in
// launcher_variables.cpp.
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/certificates.hpp>
#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/job_config.hpp>
#include <collie/store/client_options.hpp>
#include <collie/store/etcd_store.hpp>
#include <collie/transport/interfaces.hpp>

#include "bootstrap/launcher_variables.hpp"

namespace collie {

namespace {

namespace env = environment;
constexpr std::string_view kWho = "collie::init";

// The variable's text, else its default's ("" where it has none).
std::string text_of(const env::Variable& v, const EnvironmentLookup& lookup) {
  return lookup(v.name).value_or(std::string(v.fallback));
}

std::chrono::milliseconds seconds_of(const env::Variable& v, const EnvironmentLookup& lookup) {
  return std::chrono::milliseconds(env::seconds_in_ms(v, text_of(v, lookup), kWho));
}

// etcd://HOST:PORT[,HOST:PORT...]/JOB, and how to reach etcd (the
// COLLIE_ETCD_* variables).
void resolve_etcd(const std::string& url, const InitOptions& options,
                  const EnvironmentLookup& lookup, JobConfig& config) {
  config.method = JobConfig::Method::Etcd;
  const std::string_view rest = std::string_view(url).substr(7);
  const auto slash = rest.rfind('/');
  const auto job = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  const bool job_ok = !job.empty() && job.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                            "abcdefghijklmnopqrstuvwxyz"
                                                            "0123456789._-") == std::string_view::npos;
  if (!job_ok) {
    throw Error(fmt::format(
        "collie::init: '{}' is not etcd://HOST:PORT[,HOST:PORT...]/JOB (JOB: letters, digits, "
        "'.', '_', '-'; every rank of the job gives the same)",
        url));
  }
  try {
    config.etcd_endpoints = store::parse_etcd_endpoints(rest.substr(0, slash));
  } catch (const Error& e) {
    throw Error(fmt::format("collie::init: '{}': {}", url, e.what()));
  }
  config.etcd_job = std::string(job);
  config.etcd_cacert = options.etcd_cacert.value_or(text_of(env::kEtcdCacert, lookup));
  config.etcd_cert = options.etcd_cert.value_or(text_of(env::kEtcdCert, lookup));
  config.etcd_key = options.etcd_key.value_or(text_of(env::kEtcdKey, lookup));
  config.etcd_insecure =
      options.etcd_insecure ? *options.etcd_insecure
                            : env::choice(env::kEtcdInsecure, text_of(env::kEtcdInsecure, lookup),
                                          kWho) == "1";
  // Ranks route to the first member: its host picks the interface they advertise.
  std::string_view first = config.etcd_endpoints.front();
  for (const std::string_view scheme : {"https://", "http://"})
    if (first.starts_with(scheme)) first.remove_prefix(scheme.size());
  if (const auto at = split_host_port(first.substr(0, first.find('/')))) {
    config.master_addr = at->host;
    config.master_port = at->port;
  }
}

// The init method: env://, tcp://, file://, etcd://, or a store the program gives.
void resolve_method(const InitOptions& options, const EnvironmentLookup& lookup,
                    JobConfig& config) {
  std::string url = options.init_method;
  // A program that leaves the method at its default takes the environment's.
  const bool from_environment = (url.empty() || url == "env://") && !options.store &&
                                !text_of(env::kInitMethod, lookup).empty();
  if (from_environment) url = text_of(env::kInitMethod, lookup);
  if (options.store) {
    config.method = JobConfig::Method::Given;
    config.given_store = options.store;
    config.given_store_name = options.store_name;
    config.master_addr =
        !options.route_to.empty() ? options.route_to : lookup("MASTER_ADDR").value_or("");
    if (!options.store_served_at.empty()) {
      const auto at = split_host_port(options.store_served_at);
      if (!at) {
        throw Error(fmt::format("collie::init: store_served_at '{}' is not HOST:PORT",
                                options.store_served_at));
      }
      config.given_served = true;
      config.given_key_prefix = options.store_key_prefix;
      config.master_addr = at->host;
      config.master_port = at->port;
    }
  } else if (url == "env://" || url.empty()) {
    config.method = JobConfig::Method::Env;
  } else if (url.starts_with("tcp://")) {
    config.method = JobConfig::Method::Tcp;
    const auto address = split_host_port(std::string_view(url).substr(6));
    if (!address || address->port == 0) {
      throw Error(
          fmt::format("collie::init: '{}' is not tcp://HOST:PORT (or tcp://[IPV6]:PORT) "
                      "with a port in 1-65535",
                      url));
    }
    config.master_addr = address->host;
    config.master_port = address->port;
  } else if (url.starts_with("file://")) {
    config.method = JobConfig::Method::File;
    config.file_path = url.substr(7);
    if (!config.file_path.starts_with('/')) {
      throw Error(
          fmt::format("collie::init: '{}' needs an absolute path: file:///path/to/file", url));
    }
  } else if (url.starts_with("etcd://")) {
    resolve_etcd(url, options, lookup, config);
  } else {
    throw Error(
        fmt::format("collie::init: unknown init method '{}'{}; use env://, "
                    "tcp://HOST:PORT, file:///PATH or etcd://HOST:PORT[,HOST:PORT]/JOB",
                    url, from_environment ? " (from COLLIE_INIT_METHOD)" : ""));
  }
}

// How long calls may take, when the stall inspector looks, and how many
// async calls run at once.
void resolve_times(const InitOptions& options, const EnvironmentLookup& lookup, JobConfig& config) {
  config.async_calls = static_cast<int>(env::integer(
      env::kAsyncCalls,
      options.async_calls ? std::to_string(*options.async_calls) : text_of(env::kAsyncCalls, lookup),
      options.async_calls ? std::string(kWho) + ": InitOptions::async_calls" : std::string(kWho)));
  config.timeout = options.timeout ? *options.timeout : seconds_of(env::kTimeout, lookup);
  if (config.timeout <= std::chrono::milliseconds::zero())
    throw Error("collie::init: the timeout must be positive");
  config.stall_time =
      options.stall_time ? *options.stall_time : seconds_of(env::kStallTime, lookup);
  if (config.stall_time < std::chrono::milliseconds::zero())
    throw Error("collie::init: the stall time must not be negative");
}

// The launcher's word: its secret, whether it hosts the store, the attempt.
void resolve_launcher_settings(const InitOptions& options, const EnvironmentLookup& lookup,
                               JobConfig& config) {
  config.token = options.token ? *options.token : store::token_from_environment(lookup);
  config.store_hosted_by_launcher =
      config.given_served ||
      env::choice(env::kStoreHosted, text_of(env::kStoreHosted, lookup), kWho) == "1";
  config.restart_count =
      static_cast<int>(env::integer(env::kRestartCount, text_of(env::kRestartCount, lookup), kWho));
}

// A size in bytes: the option's value, else the variable's (or its
// default), within the variable's range.
std::size_t bytes_of(const std::optional<std::size_t>& given, std::string_view option,
                     const env::Variable& v, const EnvironmentLookup& lookup) {
  if (!given) return env::bytes(v, text_of(v, lookup), kWho);
  return env::bytes(v, std::to_string(*given), fmt::format("{}: InitOptions::{}", kWho, option));
}

// How the algorithms run: forced ones, segments, staging, the link
// between hosts for Auto.
void resolve_algorithm_settings(const InitOptions& options, const EnvironmentLookup& lookup,
                                JobConfig& config) {
  if (options.algorithms) {
    config.algorithms =
        collectives::parse_selection(*options.algorithms, "collie::init: InitOptions::algorithms");
  } else if (auto algo = lookup(env::kAlgo.name)) {
    config.algorithms =
        collectives::parse_selection(*algo, fmt::format("collie::init: {}", env::kAlgo.name));
  }
  config.segment_bytes =
      bytes_of(options.segment_bytes, "segment_bytes", env::kSegmentBytes, lookup);
  config.stage_whole_bytes =
      bytes_of(options.stage_whole_bytes, "stage_whole_bytes", env::kStageWholeBytes, lookup);
  config.stage_chunk_bytes =
      bytes_of(options.stage_chunk_bytes, "stage_chunk_bytes", env::kStageChunkBytes, lookup);
  const auto& v = env::kHostLink;
  const auto given = lookup(v.name);
  config.host_link_given = given.has_value();
  if (!given) return;
  const std::string text = *given;
  const auto comma = text.find(',');
  const std::string rate = text.substr(0, comma);
  const std::string us = comma == std::string::npos ? "" : text.substr(comma + 1);
  char* end = nullptr;
  const double gbits = std::strtod(rate.c_str(), &end);
  bool valid =
      !rate.empty() && end == rate.c_str() + rate.size() && gbits > 0 && std::isfinite(gbits);
  double latency = config.host_link_latency_us;
  if (comma != std::string::npos) {
    latency = std::strtod(us.c_str(), &end);
    valid = valid && !us.empty() && end == us.c_str() + us.size() && latency >= 0 &&
            std::isfinite(latency);
  }
  if (!valid) env::refuse(v, text, kWho);
  config.host_link_gbits = gbits;
  config.host_link_latency_us = latency;
}

// What carries messages, and how waits poll.
void resolve_transport(const InitOptions& options, const EnvironmentLookup& lookup,
                       JobConfig& config) {
  auto& t = config.transport;
  if (options.spin) {
    t.spin = *options.spin;
    if (t.spin.count() < 0) throw Error("collie::init: the spin must not be negative");
  } else {
    t.spin =
        std::chrono::microseconds(env::integer(env::kSpinUs, text_of(env::kSpinUs, lookup), kWho));
  }
  t.backend =
      options.transport
          ? env::choice(env::kTransport, *options.transport, "collie::init: InitOptions::transport")
          : env::choice(env::kTransport, text_of(env::kTransport, lookup), kWho);
  t.shm_single_copy_from =
      env::bytes(env::kShmSingleCopy, text_of(env::kShmSingleCopy, lookup), kWho);
  t.shm_stores = env::choice(env::kShmStores, text_of(env::kShmStores, lookup), kWho);
  t.seal = env::choice(env::kSeal, text_of(env::kSeal, lookup), kWho);
  if (const auto streams = text_of(env::kStreams, lookup); streams == "auto") {
    t.streams = 0;
  } else {
    int n = 0;
    const auto [end, error] = std::from_chars(streams.data(), streams.data() + streams.size(), n);
    if (error != std::errc() || end != streams.data() + streams.size() || n < 1 || n > 16)
      env::refuse(env::kStreams, streams, kWho);
    t.streams = n;
  }
  t.seal_cert = text_of(env::kSealCert, lookup);
  t.seal_key = text_of(env::kSealKey, lookup);
  t.seal_ca = text_of(env::kSealCa, lookup);
  if (auto problem = seal::Certificates::settings_problem(t.seal_cert, t.seal_key, t.seal_ca);
      !problem.empty())
    throw Error(fmt::format("{}: {}", kWho, problem));
  if (t.seal_key.empty()) t.seal_key = t.seal_cert;
}

}  // namespace

JobConfig resolve_job_config(const InitOptions& options, const EnvironmentLookup& lookup) {
  JobConfig config;
  resolve_method(options, lookup, config);
  config.join = options.join ? *options.join
                             : env::choice(env::kJoin, text_of(env::kJoin, lookup), kWho) == "1";
  const auto* family = detail::launcher_family(lookup);
  detail::resolve_rank(options, lookup, family, config);
  if (config.method == JobConfig::Method::Env)
    detail::resolve_store_address(lookup, family, config);
  resolve_times(options, lookup, config);
  config.socket_ifname =
      options.socket_ifname.value_or(lookup(env::kSocketIfname.name).value_or(""));
  config.lane_ifname = lookup(env::kLaneIfname.name).value_or("auto");
  if (config.lane_ifname != "auto" && config.lane_ifname != "none")
    transport::InterfaceFilter::parse(config.lane_ifname, env::kLaneIfname.name);
  resolve_launcher_settings(options, lookup, config);
  resolve_algorithm_settings(options, lookup, config);
  resolve_transport(options, lookup, config);
  config.trace_dir = options.trace_dir.value_or(lookup(env::kTrace.name).value_or(""));
  return config;
}

JobConfig resolve_job_config(const InitOptions& options) {
  return resolve_job_config(options, [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  });
}

}  // namespace collie
