// `collie bench store`: throughput of the store's operations and the time
// for many clients to rendezvous.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <asio/io_context.hpp>
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/async_client.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>
#include <collie/version.hpp>

#include "store_address.hpp"
#include "commands.hpp"
#include "json_out.hpp"
#include "keys.hpp"

namespace collie::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  int clients = 4;
  double seconds = 1.0;
  std::vector<int> rendezvous = {64, 1024, 4096};
  std::size_t value_bytes = 16;
  std::string addr;
  std::string token_file;
  int client_spin_us = 50;
  int server_spin_us = 50;
  bool no_rendezvous = false;
  bool json = false;
};

struct OpsResult {
  std::string op;
  int clients;
  double ops_per_s;
  double p50_us;
  double p99_us;
};

struct RendezvousResult {
  int clients;
  double connect_ms;  // until every client is connected
  double total_ms;    // until every client has passed the barrier
};

double percentile(std::vector<double>& samples, double q) {
  if (samples.empty()) return 0;
  const auto index = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(index),
                   samples.end());
  return samples[index];
}

// `clients` threads, each with its own connection, run `op` back to back for
// `seconds`; every call is timed.
OpsResult measure_ops(const std::string& op, int clients, const BenchArgs& args,
                      const HostPort& server, const std::string& token, int run) {
  store::ClientOptions options;
  options.timeout = std::chrono::seconds(60);
  options.token = token;
  options.seal = store::seal_from_environment();
  options.certificates = store::certificates_from_environment();
  options.spin = std::chrono::microseconds(args.client_spin_us);
  std::vector<std::unique_ptr<store::StoreClient>> connections;
  for (int c = 0; c < clients; ++c) {
    connections.push_back(std::make_unique<store::StoreClient>(server.host, server.port, options));
  }
  const std::string value(args.value_bytes, 'v');
  constexpr int kKeysPerClient = 1000;
  auto key_of = [&](int client, int i) {
    return keys::bench_key(run, op, client, i % kKeysPerClient);
  };
  if (op == "get") {
    for (int c = 0; c < clients; ++c) {
      for (int i = 0; i < kKeysPerClient; ++i)
        connections[0]->set(key_of(c, i), value);
    }
  }

  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(clients));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(clients));
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto& client = *connections[static_cast<std::size_t>(c)];
      auto& samples = latencies[static_cast<std::size_t>(c)];
      samples.reserve(1 << 20);
      ready.fetch_add(1);
      while (!go.load())
        std::this_thread::yield();
      const auto deadline = Clock::now() + std::chrono::duration<double>(args.seconds);
      try {
        for (int i = 0;; ++i) {
          const auto key = key_of(c, i);
          const auto start = Clock::now();
          if (op == "set") {
            client.set(key, value);
          } else if (op == "get") {
            client.get(key);
          } else {
            client.add(key, 1);
          }
          const auto end = Clock::now();
          samples.push_back(std::chrono::duration<double, std::micro>(end - start).count());
          if (end >= deadline) break;
        }
      } catch (...) {
        errors[static_cast<std::size_t>(c)] = std::current_exception();
      }
    });
  }
  while (ready.load() < clients)
    std::this_thread::yield();
  const auto start = Clock::now();
  go.store(true);
  for (auto& t : threads)
    t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  std::vector<double> all;
  for (auto& samples : latencies)
    all.insert(all.end(), samples.begin(), samples.end());
  const double ops = static_cast<double>(all.size());
  return {op, clients, ops / elapsed, percentile(all, 0.5), percentile(all, 0.99)};
}

// `n` asynchronous clients on one thread: each connects, adds 1 to a shared
// counter and enters a barrier of n. Done when the last one is released.
RendezvousResult measure_rendezvous(int n, const HostPort& server, const std::string& token,
                                    int run) {
  asio::io_context io(1);
  store::ClientOptions options;
  options.timeout = std::chrono::seconds(60);
  options.token = token;
  options.seal = store::seal_from_environment();
  options.certificates = store::certificates_from_environment();
  const std::string barrier = keys::bench_rendezvous(run, n);
  const std::string counter = barrier + "/count";
  std::vector<std::unique_ptr<store::AsyncStoreClient>> clients;
  clients.reserve(static_cast<std::size_t>(n));
  int connected = 0;
  int released = 0;
  Clock::time_point all_connected;
  std::optional<store::Failure> failure;
  auto fail = [&](const store::Failure* f) {
    if (!failure) failure = *f;
    io.stop();
  };

  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<store::AsyncStoreClient>(io, options));
    auto* client = clients.back().get();
    client->connect(server.host, server.port, [&, client](const store::Failure* f, store::Done) {
      if (f != nullptr) return fail(f);
      if (++connected == n) all_connected = Clock::now();
      client->add(counter, 1, [&, client](const store::Failure* f2, std::int64_t) {
        if (f2 != nullptr) return fail(f2);
        client->barrier(barrier, static_cast<std::uint32_t>(n),
                        [&](const store::Failure* f3, store::Done) {
                          if (f3 != nullptr) return fail(f3);
                          if (++released == n) io.stop();
                        });
      });
    });
  }
  io.run_for(std::chrono::seconds(120));
  const auto end = Clock::now();
  if (failure) failure->raise();
  if (released != n) {
    throw TimeoutError(
        fmt::format("rendezvous of {} clients: only {} passed the barrier in 120 s", n, released));
  }
  clients.clear();
  io.restart();
  io.poll();
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - start).count();
  };
  return {n, ms(all_connected), ms(end)};
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

void run_bench(const BenchArgs& args) {
  if (args.clients < 1) throw Error("--clients must be at least 1");
  if (!(args.seconds > 0)) throw Error("--seconds must be positive");
  if (args.client_spin_us < 0 || args.server_spin_us < 0) {
    throw Error("--client-spin-us and --server-spin-us must not be negative");
  }
  const auto open_files = store::raise_open_file_limit();
  const std::string token = store_token(args.token_file);

  std::unique_ptr<store::StoreServer> own_server;
  HostPort server;
  std::string where;
  if (args.addr.empty()) {
    store::ServerOptions options;
    options.host = "127.0.0.1";
    options.token = token;
    options.seal = store::seal_from_environment();
    options.certificates = store::certificates_from_environment();
    options.spin = std::chrono::microseconds(args.server_spin_us);
    // Every client of the benchmark comes from 127.0.0.1: let the largest
    // rendezvous in, whatever the per-address default.
    std::size_t most = static_cast<std::size_t>(args.clients);
    for (const int n : args.rendezvous)
      most = std::max(most, static_cast<std::size_t>(std::max(n, 0)));
    options.max_connections = std::max(options.max_connections, most + 64);
    options.max_connections_per_address = std::max(options.max_connections_per_address, most + 64);
    own_server = std::make_unique<store::StoreServer>(options);
    server = {"127.0.0.1", own_server->port()};
    where = fmt::format("in-process on 127.0.0.1:{}", server.port);
  } else {
    server = parse_host_port(args.addr);
    where = args.addr;
  }
  const int run = static_cast<int>(getpid());

  if (!args.json) {
    std::printf("# collie %s store benchmark\n", collie::version());
    std::printf("# server: %s; host: %s; %zu-byte values; %.1f s per measurement\n", where.c_str(),
                host_name().c_str(), args.value_bytes, args.seconds);
    std::printf("#\n#   op  clients      ops/s   p50(us)   p99(us)\n");
    std::fflush(stdout);
  }
  std::vector<OpsResult> ops;
  std::vector<int> client_counts = {1};
  if (args.clients != 1) client_counts.push_back(args.clients);
  for (int clients : client_counts) {
    for (const char* op : {"set", "get", "add"}) {
      ops.push_back(measure_ops(op, clients, args, server, token, run));
      if (!args.json) {
        const auto& r = ops.back();
        std::printf("  %4s  %7d  %9.0f  %8.1f  %8.1f\n", r.op.c_str(), r.clients, r.ops_per_s,
                    r.p50_us, r.p99_us);
        std::fflush(stdout);
      }
    }
  }

  std::vector<RendezvousResult> rendezvous;
  const std::vector<int> sizes = args.no_rendezvous ? std::vector<int>{} : args.rendezvous;
  if (!args.json && !sizes.empty()) {
    std::printf(
        "#\n# rendezvous: every client connects, adds 1 to a counter and enters a barrier\n"
        "# of all clients (asynchronous clients on one thread)\n"
        "# clients  connected(ms)  released(ms)\n");
    std::fflush(stdout);
  }
  for (int n : sizes) {
    // Each client holds a socket, and so does the server when it runs here.
    const std::uint64_t needed = static_cast<std::uint64_t>(n) * (own_server ? 2 : 1) + 64;
    if (n < 1) throw Error(fmt::format("--rendezvous sizes must be at least 1, not {}", n));
    if (needed > open_files) {
      throw Error(
          fmt::format("a rendezvous of {} clients needs about {} open files, but this "
                      "process may open only {} (raise the hard limit: ulimit -Hn)",
                      n, needed, open_files));
    }
    rendezvous.push_back(measure_rendezvous(n, server, token, run));
    if (!args.json) {
      const auto& r = rendezvous.back();
      std::printf("  %7d  %13.1f  %12.1f\n", r.clients, r.connect_ms, r.total_ms);
      std::fflush(stdout);
    }
  }

  if (args.json) {
    nlohmann::ordered_json doc = {{"collie_version", collie::version()},
                                  {"server", where},
                                  {"host", host_name()},
                                  {"value_bytes", args.value_bytes},
                                  {"seconds", args.seconds}};
    auto& op_rows = doc["ops"] = nlohmann::ordered_json::array();
    for (const auto& r : ops) {
      op_rows.push_back({{"op", r.op},
                         {"clients", r.clients},
                         {"ops_per_s", rounded(r.ops_per_s, 1)},
                         {"p50_us", rounded(r.p50_us, 2)},
                         {"p99_us", rounded(r.p99_us, 2)}});
    }
    auto& meet_rows = doc["rendezvous"] = nlohmann::ordered_json::array();
    for (const auto& r : rendezvous) {
      meet_rows.push_back({{"clients", r.clients},
                           {"connected_ms", rounded(r.connect_ms, 2)},
                           {"released_ms", rounded(r.total_ms, 2)}});
    }
    std::fputs(dump_records(doc).c_str(), stdout);
  }
}

}  // namespace

void add_bench_store_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "store", "Operations per second of the rendezvous store, and the time to rendezvous");
  auto args = std::make_shared<BenchArgs>();
  cmd->add_option("--clients", args->clients,
                  "Concurrent clients (threads, one connection each) for the second round")
      ->capture_default_str();
  cmd->add_option("--seconds", args->seconds, "Duration of each ops/s measurement")
      ->capture_default_str();
  cmd->add_option("--rendezvous", args->rendezvous,
                  "Client counts for the rendezvous measurement (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--value-bytes", args->value_bytes, "Size of the values set and read")
      ->capture_default_str();
  cmd->add_option("--addr", args->addr,
                  "Benchmark the store at HOST:PORT instead of one started in this process");
  cmd->add_option("--token-file", args->token_file,
                  "Token of that store (default: $COLLIE_STORE_TOKEN)");
  cmd->add_option("--client-spin-us", args->client_spin_us,
                  "Microseconds a blocking client polls for its reply before sleeping")
      ->capture_default_str();
  cmd->add_option("--server-spin-us", args->server_spin_us,
                  "Microseconds the in-process server polls for the next request before sleeping")
      ->capture_default_str();
  cmd->add_flag("--no-rendezvous", args->no_rendezvous, "Skip the rendezvous measurement");
  cmd->add_flag("--json", args->json, "Print the results as JSON instead of a table");
  cmd->footer(
      "ops/s: every client calls the operation back to back for --seconds; p50/p99 are the\n"
      "latencies of single calls. Rendezvous: N asynchronous clients in this process connect,\n"
      "add 1 to a counter and enter a barrier of N; 'released' is when the last one is out.");
  cmd->callback([args] { run_bench(*args); });
}

}  // namespace collie::cli
