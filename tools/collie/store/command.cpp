// `collie store`: run the rendezvous store, and talk to it from a shell.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <signal.h>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/error.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>

#include "store_address.hpp"
#include "commands.hpp"

namespace collie::cli {

namespace {

std::chrono::milliseconds seconds_option(double seconds, const char* name) {
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw Error(fmt::format("{} must be a positive number of seconds, not {}", name, seconds));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

struct ServeArgs {
  std::string host;
  std::string port = "0";
  std::string port_file;
  std::string token_file;
  bool insecure = false;
  bool torch = false;
  double max_memory_mib = 128;
  std::size_t max_connections = 8192;
  std::size_t max_connections_per_address = 2048;
  std::size_t max_waits = 65536;
  double idle_timeout_s = 600;
  double handshake_timeout_s = 10;
};

void serve(const ServeArgs& args) {
  // Block the stop signals in every thread (the server thread inherits the
  // mask) and take them synchronously here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  store::ServerOptions options;
  options.host = args.host;
  options.port = parse_port(args.port, "--port");
  options.token = store_token(args.token_file);
  options.seal = store::seal_from_environment();
  options.certificates = store::certificates_from_environment();
  if (!(args.max_memory_mib >= 1) || !std::isfinite(args.max_memory_mib)) {
    throw Error(fmt::format("--max-memory must be at least 1 (MiB), not {}", args.max_memory_mib));
  }
  options.max_memory_bytes = static_cast<std::size_t>(args.max_memory_mib * 1024 * 1024);
  if (args.max_connections == 0 || args.max_connections_per_address == 0 || args.max_waits == 0) {
    throw Error(
        "--max-connections, --max-connections-per-address and --max-waits must be at "
        "least 1");
  }
  options.max_connections = args.max_connections;
  options.max_connections_per_address = args.max_connections_per_address;
  options.max_waits = args.max_waits;
  if (args.idle_timeout_s < 0 || !std::isfinite(args.idle_timeout_s)) {
    throw Error(fmt::format("--idle-timeout must be 0 (never) or a number of seconds, not {}",
                            args.idle_timeout_s));
  }
  options.idle_timeout = args.idle_timeout_s == 0
                             ? std::chrono::milliseconds::zero()
                             : seconds_option(args.idle_timeout_s, "--idle-timeout");
  options.handshake_timeout = seconds_option(args.handshake_timeout_s, "--handshake-timeout");
  const bool beyond_loopback = !is_loopback_host(args.host);
  if (options.token.empty() && beyond_loopback) {
    if (!args.insecure) {
      throw Error(fmt::format(
          "refusing to serve {} without a token: anyone who can reach it could read and change "
          "every job's keys, and stop its jobs. Give the store a secret (--token-file FILE, or "
          "COLLIE_STORE_TOKEN / COLLIE_STORE_TOKEN_FILE) and the same to its clients; or listen "
          "on loopback only (--host 127.0.0.1); or pass --insecure if every host that can reach "
          "this port is trusted",
          args.host.empty() ? std::string("every interface") : "'" + args.host + "'"));
    }
    std::fprintf(stderr,
                 "collie store: WARNING: --insecure: serving %s without a token; anyone who can "
                 "reach this port can read and change its keys\n",
                 args.host.empty() ? "every interface" : args.host.c_str());
  }
  if (args.torch) {
    // torch's TCPStore protocol has no authentication: a client that speaks
    // it is served without the token.
    if (beyond_loopback && !args.insecure) {
      throw Error(fmt::format(
          "refusing to serve torch's TCPStore clients on {}: torch's protocol has no "
          "authentication, so anyone who can reach the port could read and change every key, "
          "token or not. Listen on loopback only (--host 127.0.0.1), or pass --insecure if "
          "every host that can reach this port is trusted",
          args.host.empty() ? std::string("every interface") : "'" + args.host + "'"));
    }
    if (beyond_loopback) {
      std::fprintf(stderr,
                   "collie store: WARNING: --torch --insecure: torch's clients are served on %s "
                   "without authentication\n",
                   args.host.empty() ? "every interface" : args.host.c_str());
    }
    options.torch_clients = true;
  }
  store::raise_open_file_limit();
  store::StoreServer server(options);

  if (!args.port_file.empty()) write_port_file(args.port_file, server.port());
  std::string addresses;
  for (const auto& address : server.addresses()) {
    addresses += (addresses.empty() ? "" : " ") + address;
  }
  std::printf("collie store listening on %s port %u%s%s\n", addresses.c_str(), server.port(),
              options.token.empty() ? "" : " (token required)",
              options.torch_clients ? " (and torch's TCPStore clients, without a token)" : "");
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server.stop();
  std::printf("collie store stopped (%s)\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
}

// Options every client subcommand shares.
struct ClientArgs {
  std::string addr;
  std::string token_file;
  double timeout_s = 300;
  double connect_timeout_s = 10;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--addr", addr, "Store address HOST:PORT (default: $MASTER_ADDR:$MASTER_PORT)");
    cmd->add_option("--token-file", token_file,
                    "File holding the store's token (default: $COLLIE_STORE_TOKEN)");
    cmd->add_option("--timeout", timeout_s, "Seconds to wait for the answer")
        ->capture_default_str();
    cmd->add_option("--connect-timeout", connect_timeout_s,
                    "Seconds to keep retrying while the store is not up")
        ->capture_default_str();
  }

  std::unique_ptr<store::StoreClient> connect() const {
    const auto address = store_address(addr);
    store::ClientOptions options;
    options.timeout = seconds_option(timeout_s, "--timeout");
    options.connect_timeout = seconds_option(connect_timeout_s, "--connect-timeout");
    options.token = store_token(token_file);
    options.seal = store::seal_from_environment();
    options.certificates = store::certificates_from_environment();
    return std::make_unique<store::StoreClient>(address.host, address.port, options);
  }
};

void print_line(std::string_view bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void add_store_command(CLI::App& app) {
  auto* store_cmd = app.add_subcommand(
      "store", "Run the rendezvous key-value store, or query one from the shell");
  store_cmd->require_subcommand(1);

  {
    auto* cmd = store_cmd->add_subcommand("serve", "Run a store server until SIGINT or SIGTERM");
    auto args = std::make_shared<ServeArgs>();
    cmd->add_option("--host", args->host,
                    "Address or name to listen on (default: every interface, IPv6 and IPv4)");
    cmd->add_option("--port", args->port, "Port to listen on; 0 picks a free one")
        ->capture_default_str();
    cmd->add_option("--port-file", args->port_file,
                    "Write the real port to this file once listening (written atomically)");
    cmd->add_option("--token-file", args->token_file,
                    "Require clients to prove they know the token in this file "
                    "(default: $COLLIE_STORE_TOKEN, $COLLIE_STORE_TOKEN_FILE)");
    cmd->add_flag("--insecure", args->insecure,
                  "Serve beyond loopback without a token (refused otherwise)");
    cmd->add_flag("--torch", args->torch,
                  "Also serve torch.distributed's TCPStore clients (torch 1.x and 2.x), which "
                  "cannot authenticate: loopback only unless --insecure (docs/torch.md)");
    cmd->add_option("--max-memory", args->max_memory_mib,
                    "MiB the server may hold for its clients: values, blocked requests, buffers")
        ->capture_default_str();
    cmd->add_option("--max-connections", args->max_connections, "Connections served at once")
        ->capture_default_str();
    cmd->add_option("--max-connections-per-address", args->max_connections_per_address,
                    "Connections served at once from one address")
        ->capture_default_str();
    cmd->add_option("--max-waits", args->max_waits,
                    "Blocked requests (get, wait, barrier) of all clients together")
        ->capture_default_str();
    cmd->add_option("--idle-timeout", args->idle_timeout_s,
                    "Seconds after which a connection that sends nothing is closed (0: never)")
        ->capture_default_str();
    cmd->add_option("--handshake-timeout", args->handshake_timeout_s,
                    "Seconds a new connection has to finish its handshake, and a request under "
                    "way to keep arriving, before it is closed")
        ->capture_default_str();
    cmd->footer(
        "Prints one line on stdout once it listens:\n"
        "  collie store listening on ADDRESS... port PORT\n"
        "and stops cleanly on SIGINT or SIGTERM; clients blocked in a call get an error.\n"
        "Without a token it serves only loopback (--host 127.0.0.1), unless --insecure.\n"
        "A client that reaches a limit gets an error naming it; the server serves on.\n"
        "Failed authentication slows its address down; refusals are logged at most once\n"
        "per address every 10 s, with a count of the rest.");
    cmd->callback([args] { serve(*args); });
  }

  {
    auto* cmd = store_cmd->add_subcommand("set", "Set KEY to VALUE ('-' reads VALUE from stdin)");
    auto args = std::make_shared<ClientArgs>();
    auto key = std::make_shared<std::string>();
    auto value = std::make_shared<std::string>();
    cmd->add_option("key", *key, "Key")->required();
    cmd->add_option("value", *value, "Value, or - for standard input")->required();
    args->add_to(cmd);
    cmd->callback([=] {
      std::string data = *value;
      if (data == "-") data.assign(std::istreambuf_iterator<char>(std::cin), {});
      args->connect()->set(*key, data);
    });
  }

  {
    auto* cmd = store_cmd->add_subcommand(
        "get", "Print KEY's value, waiting until it is set (up to --timeout)");
    auto args = std::make_shared<ClientArgs>();
    auto key = std::make_shared<std::string>();
    auto no_wait = std::make_shared<bool>(false);
    cmd->add_option("key", *key, "Key")->required();
    cmd->add_flag("--no-wait", *no_wait, "Fail at once (exit 3) if the key is missing");
    args->add_to(cmd);
    cmd->callback([=] {
      auto client = args->connect();
      if (*no_wait) {
        auto value = client->try_get(*key);
        if (!value) {
          std::fprintf(stderr, "collie: key '%s' is not set\n", key->c_str());
          throw Exit{3};
        }
        return print_line(*value);
      }
      print_line(client->get(*key));
    });
  }

  {
    auto* cmd = store_cmd->add_subcommand("add", "Add DELTA to the counter KEY; print the result");
    auto args = std::make_shared<ClientArgs>();
    auto key = std::make_shared<std::string>();
    auto delta = std::make_shared<std::int64_t>(1);
    cmd->add_option("key", *key, "Key")->required();
    cmd->add_option("delta", *delta, "Amount to add")->capture_default_str();
    args->add_to(cmd);
    cmd->callback(
        [=] { std::printf("%lld\n", static_cast<long long>(args->connect()->add(*key, *delta))); });
  }

  {
    auto* cmd = store_cmd->add_subcommand("wait", "Wait until every KEY is set (up to --timeout)");
    auto args = std::make_shared<ClientArgs>();
    auto keys = std::make_shared<std::vector<std::string>>();
    cmd->add_option("keys", *keys, "Keys")->required();
    args->add_to(cmd);
    cmd->callback([=] { args->connect()->wait(*keys); });
  }

  {
    auto* cmd = store_cmd->add_subcommand("check", "Print 1 if every KEY is set now, else 0");
    auto args = std::make_shared<ClientArgs>();
    auto keys = std::make_shared<std::vector<std::string>>();
    cmd->add_option("keys", *keys, "Keys")->required();
    args->add_to(cmd);
    cmd->callback([=] { std::printf("%d\n", args->connect()->check(*keys) ? 1 : 0); });
  }

  {
    auto* cmd = store_cmd->add_subcommand("delete", "Delete KEY; print 1 if it existed, else 0");
    auto args = std::make_shared<ClientArgs>();
    auto key = std::make_shared<std::string>();
    cmd->add_option("key", *key, "Key")->required();
    args->add_to(cmd);
    cmd->callback([=] { std::printf("%d\n", args->connect()->delete_key(*key) ? 1 : 0); });
  }

  {
    auto* cmd =
        store_cmd->add_subcommand("keys", "List the keys that start with PREFIX, one per line");
    auto args = std::make_shared<ClientArgs>();
    auto prefix = std::make_shared<std::string>();
    auto count = std::make_shared<bool>(false);
    cmd->add_option("prefix", *prefix, "Prefix (default: every key)");
    cmd->add_flag("--count", *count, "Print only how many keys match");
    args->add_to(cmd);
    cmd->callback([=] {
      auto client = args->connect();
      if (*count) {
        std::printf("%lld\n", static_cast<long long>(client->count_keys(*prefix)));
        return;
      }
      for (const auto& key : client->list_keys(*prefix))
        print_line(key);
    });
  }
}

}  // namespace collie::cli
