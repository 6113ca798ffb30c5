// `collie store ...` as a person or a script uses it.
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <signal.h>
#include <thread>
#include <unistd.h>

#include "support/catch.hpp"

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/raw_connection.hpp"
#include "support/scratch_dir.hpp"
#include "support/store_fixture.hpp"
#include "support/subprocess.hpp"
#include "support/torch_client_py.hpp"
#include "support/torch_query.hpp"

using namespace std::chrono_literals;
using collie::test::run;
using collie::test::RunResult;
using collie::test::Subprocess;

namespace {

using collie::test::kCollie;


std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A `collie store serve` child on a free port, with its address.
struct ServedStore {
  explicit ServedStore(std::vector<std::string> extra = {}, std::vector<std::string> env = {})
      : server(
            [&] {
              std::vector<std::string> argv = {kCollie,  "store",       "serve",
                                               "--host", "127.0.0.1",   "--port",
                                               "0",      "--port-file", dir.file("port")};
              argv.insert(argv.end(), extra.begin(), extra.end());
              return argv;
            }(),
            env) {
    banner = server.read_line(30s).value_or("");
    REQUIRE_THAT(banner, StartsWith("collie store listening on 127.0.0.1:"));
    port = std::stoi(read_file(dir.path() / "port"));
    REQUIRE_THAT(banner, EndsWith("port " + std::to_string(port)) ||
                             ContainsSubstring("port " + std::to_string(port) + " "));
    addr = "127.0.0.1:" + std::to_string(port);
  }

  RunResult cli(std::vector<std::string> args, std::vector<std::string> env = {},
                const std::string& input = {}) const {
    // --addr right after the subcommand, so that a "--" later still works.
    args.insert(args.begin() + 1, {"--addr", addr});
    return collie::test::collie_cli("store", args, env, std::chrono::seconds(60), input);
  }

  collie::test::ScratchDir dir;
  Subprocess server;
  std::string banner;
  int port = 0;
  std::string addr;
};

}  // namespace

TEST_CASE("collie store: set, get, add, check, keys, delete from the shell", "[cli]") {
  ServedStore s;
  CHECK(s.cli({"set", "greeting", "hello world"}).exit_code == 0);
  auto r = s.cli({"get", "greeting"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "hello world\n");
  CHECK(s.cli({"add", "n", "5"}).out == "5\n");
  CHECK(s.cli({"add", "n", "--", "-7"}).out == "-2\n");
  CHECK(s.cli({"add", "n", "-1"}).out == "-3\n");
  CHECK(s.cli({"add", "n"}).out == "-2\n");
  CHECK(s.cli({"check", "greeting", "n"}).out == "1\n");
  CHECK(s.cli({"check", "greeting", "missing"}).out == "0\n");
  CHECK(s.cli({"keys"}).out == "greeting\nn\n");
  CHECK(s.cli({"keys", "gr"}).out == "greeting\n");
  CHECK(s.cli({"keys", "--count"}).out == "2\n");
  CHECK(s.cli({"delete", "greeting"}).out == "1\n");
  CHECK(s.cli({"delete", "greeting"}).out == "0\n");
  CHECK(s.cli({"set", "piped", "-"}, {}, "from stdin").exit_code == 0);
  CHECK(s.cli({"get", "piped"}).out == "from stdin\n");
}

TEST_CASE("collie store get: --no-wait, timeouts and errors exit non-zero with a reason", "[cli]") {
  ServedStore s;
  auto r = s.cli({"get", "absent", "--no-wait"});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, ContainsSubstring("'absent' is not set"));
  r = s.cli({"get", "absent", "--timeout", "0.3"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("get('absent') timed out after 300 ms"));
  r = s.cli({"add", "x", "notanumber"});
  CHECK(r.exit_code != 0);
  s.cli({"set", "text", "abc"});
  r = s.cli({"add", "text", "1"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("not a decimal int64"));
}

TEST_CASE("collie store wait returns once another client sets the keys", "[cli]") {
  ServedStore s({}, {"COLLIE_LOG_LEVEL=debug"});
  Subprocess waiter({kCollie, "store", "wait", "a", "b", "--addr", s.addr, "--timeout", "30"});
  REQUIRE(s.server.wait_for_stderr("wait(['a', 'b']) waits", 60s));  // the waiter is in
  s.cli({"set", "a", "1"});
  s.cli({"set", "b", "2"});
  auto result = waiter.wait(30s);
  REQUIRE(result);
  CHECK(result->exit_code == 0);
}

TEST_CASE("collie store serve stops cleanly on SIGTERM and SIGINT", "[cli]") {
  for (int sig : {SIGTERM, SIGINT}) {
    ServedStore s({}, {"COLLIE_LOG_LEVEL=debug"});
    Subprocess waiter({kCollie, "store", "get", "never", "--addr", s.addr, "--timeout", "60"});
    // The server logs each request that blocks: only then is the waiter
    // surely blocked in this server (a busy machine may start it late).
    REQUIRE(s.server.wait_for_stderr("get(['never']) waits", 60s));
    s.server.signal(sig);
    auto stopped = s.server.wait(10s);
    REQUIRE(stopped);
    CHECK(stopped->exit_code == 0);
    CHECK_THAT(stopped->out, ContainsSubstring("collie store stopped"));
    // The blocked client learns at once, not after its 60 s timeout.
    auto client = waiter.wait(10s);
    REQUIRE(client);
    CHECK(client->exit_code == 1);
    CHECK_THAT(client->err, ContainsSubstring("closed the connection"));
  }
}

TEST_CASE("collie store with a token file: right token in, no token out", "[cli][auth]") {
  const collie::test::ScratchDir dir;
  std::ofstream(dir.file("token")) << "tok-123\n";
  ServedStore s({"--token-file", dir.file("token")}, {"COLLIE_STORE_TOKEN="});
  CHECK_THAT(s.banner, ContainsSubstring("(token required)"));
  CHECK(s.cli({"set", "k", "v", "--token-file", dir.file("token")}).exit_code == 0);
  CHECK(s.cli({"get", "k"}, {"COLLIE_STORE_TOKEN=tok-123"}).out == "v\n");
  auto r = s.cli({"get", "k"}, {"COLLIE_STORE_TOKEN="});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("authentication failed"));
  r = s.cli({"get", "k"}, {"COLLIE_STORE_TOKEN=wrong"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("refused this client's token"));
}

TEST_CASE("collie store serve beyond loopback needs a token, or --insecure", "[cli][auth]") {
  auto r = run({kCollie, "store", "serve", "--port", "0"}, {"COLLIE_STORE_TOKEN="});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("refusing to serve every interface without a token") &&
                        ContainsSubstring("--token-file") && ContainsSubstring("--host 127.0.0.1") &&
                        ContainsSubstring("--insecure"));
  r = run({kCollie, "store", "serve", "--host", "0.0.0.0", "--port", "0"}, {"COLLIE_STORE_TOKEN="});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("refusing to serve '0.0.0.0' without a token"));
  // --insecure serves, and says so.
  Subprocess open_store(
      {kCollie, "store", "serve", "--host", "0.0.0.0", "--port", "0", "--insecure"},
      {"COLLIE_STORE_TOKEN="});
  CHECK(open_store.wait_for_stderr("WARNING: --insecure", 30s));
  CHECK_THAT(open_store.read_line(30s).value_or(""),
             StartsWith("collie store listening on 0.0.0.0:"));
  // Limits that make no sense are refused.
  r = run({kCollie, "store", "serve", "--host", "127.0.0.1", "--max-memory", "0"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("--max-memory must be at least 1"));
}

TEST_CASE("collie store clients find the store through MASTER_ADDR and MASTER_PORT", "[cli]") {
  ServedStore s;
  const std::vector<std::string> env = {"MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(s.port)};
  CHECK(run({kCollie, "store", "set", "via", "env"}, env).exit_code == 0);
  CHECK(run({kCollie, "store", "get", "via"}, env).out == "env\n");
  auto r = run({kCollie, "store", "get", "via"}, {"MASTER_ADDR=", "MASTER_PORT="});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("set MASTER_ADDR and MASTER_PORT"));
  r = run({kCollie, "store", "get", "via", "--addr", "localhost"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("host:port"));
}

TEST_CASE("collie store client with no server gives up after --connect-timeout", "[cli]") {
  const collie::test::RefusingPort nobody;
  const auto addr = nobody.addr();
  const auto start = std::chrono::steady_clock::now();
  auto r = run({kCollie, "store", "get", "k", "--addr", addr, "--connect-timeout", "0.5"});
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("could not connect to the store at " + addr));
}

TEST_CASE("collie --help and --version describe the tool", "[cli][device]") {
  auto r = run({kCollie, "--help"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("store") && ContainsSubstring("bench") &&
                        ContainsSubstring("COLLIE_LOG_LEVEL"));
  r = run({kCollie, "store", "serve", "--help"});
  CHECK_THAT(r.out, ContainsSubstring("--port-file") && ContainsSubstring("--token-file") &&
                        ContainsSubstring("SIGTERM"));
  CHECK_THAT(r.out, ContainsSubstring("--insecure") && ContainsSubstring("--max-memory") &&
                        ContainsSubstring("--max-connections-per-address") &&
                        ContainsSubstring("--max-waits") && ContainsSubstring("--idle-timeout"));
  r = run({kCollie, "--version"});
  CHECK_THAT(r.out, StartsWith("collie "));
  r = run({kCollie, "store", "serve", "--host", "127.0.0.1", "--port", "99999"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("not a port number"));
  r = run({kCollie});
  CHECK(r.exit_code != 0);
}

TEST_CASE("collie bench store runs a short measurement and prints JSON", "[cli][bench][volume]") {
  auto r = run({kCollie, "bench", "store", "--seconds", "0.1", "--clients", "2", "--rendezvous",
                "8,32", "--json"},
               {}, {}, 120s);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("\"ops\"") && ContainsSubstring("\"op\": \"add\"") &&
                        ContainsSubstring("\"clients\": 32"));
  r = run({kCollie, "bench", "store", "--seconds", "0.1", "--clients", "1", "--no-rendezvous"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("ops/s") && ContainsSubstring("   get        1"));
}

namespace {

// Debian's python3 with its python3-torch, or nullopt (and why) without it.
std::optional<std::string> torch_python() {
  const std::string python = "/usr/bin/python3";
  if (!std::filesystem::exists(python)) return std::nullopt;
  const auto r = run({python, "-c", "import torch.distributed"}, {}, {}, 120s);
  if (r.exit_code != 0) return std::nullopt;
  return python;
}

}  // namespace

TEST_CASE("collie store serve --torch: torch's own TCPStore client, and gloo's rendezvous", "[cli]") {
  const auto python = torch_python();
  if (!python) {
    WARN("skipped: Debian's python3 with python3-torch is not installed here");
    return;
  }
  ServedStore s({"--torch"});
  CHECK_THAT(s.banner, ContainsSubstring("and torch's TCPStore clients, without a token"));
  // torch's TCPStore API against collie's server; its keys are collie's
  // keys with torch's "/" in front.
  const std::string api = std::string(collie::test::kTorchClientPy) + R"(
import datetime, sys, torch.distributed as dist
s = torch_client("127.0.0.1", int(sys.argv[1]), datetime.timedelta(seconds=30))
s.set("a", "hello")
assert s.get("a") == b"hello"
assert s.add("n", 5) == 5 and s.add("n", -2) == 3
assert s.compare_set("c", "", "first") == b"first"
assert s.compare_set("c", "wrong", "x") == b"first"
assert s.compare_set("c", "first", "second") == b"second"
s.wait(["a", "n"])
assert s.num_keys() == 3, s.num_keys()
assert s.delete_key("a") and not s.delete_key("a")
try:
    s.wait(["never"], datetime.timedelta(seconds=1))
    raise SystemExit("a wait for a missing key returned")
except RuntimeError:
    pass
s2 = torch_client("127.0.0.1", int(sys.argv[1]), datetime.timedelta(seconds=30))
s2.set("from_torch", "yes")
print("api ok")
)";
  auto r = run({*python, "-c", api, std::to_string(s.port)}, {}, {}, 120s);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "api ok\n");
  CHECK(s.cli({"get", "/c"}).out == "second\n");
  CHECK(s.cli({"get", "/n"}).out == "3\n");
  CHECK(s.cli({"get", "/from_torch"}).out == "yes\n");
  // Three processes rendezvous for gloo through the store (torch's
  // recipe with an outside store) and all_reduce.
  const std::string gloo = std::string(collie::test::kTorchClientPy) + R"(
import datetime, sys, torch, torch.distributed as dist
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = torch_client("127.0.0.1", port, datetime.timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
t = torch.arange(7, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(7, dtype=torch.float32) * 6), t
dist.barrier()
dist.destroy_process_group()
print("rank", rank, "ok")
)";
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int rank = 0; rank < 3; ++rank)
    ranks.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
        *python, "-c", gloo, std::to_string(rank), "3", std::to_string(s.port)}));
  for (int rank = 0; rank < 3; ++rank) {
    auto done = ranks[static_cast<std::size_t>(rank)]->wait(180s);
    REQUIRE(done);
    INFO("rank " << rank << " stdout:\n" << done->out << "\nstderr:\n" << done->err);
    CHECK(done->exit_code == 0);
    CHECK(done->out == "rank " + std::to_string(rank) + " ok\n");
  }
}

TEST_CASE("collie store serve --torch: torch's client has no busy thread once its handshake time is over",
          "[cli]") {
  const auto python = torch_python();
  if (!python) {
    WARN("skipped: Debian's python3 with python3-torch is not installed here");
    return;
  }
  // torch 1.x's client opens a second connection and sends nothing on it;
  // had the store closed it, torch 1.13's store thread would spin on it.
  // Its first connection is as silent until the program's first query,
  // here twice the handshake time later.
  ServedStore s({"--torch", "--handshake-timeout", "0.5"}, {"COLLIE_LOG_LEVEL=debug"});
  const std::string client = std::string(collie::test::kTorchClientPy) + R"(
import datetime, signal, sys, time, torch.distributed as dist
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
s = torch_client("127.0.0.1", int(sys.argv[1]), datetime.timedelta(seconds=30))
time.sleep(1)
s.set("a", "1")
assert s.get("a") == b"1"
print("ready", flush=True)
signal.sigwait([signal.SIGUSR1])
t, c = time.monotonic(), time.process_time()
time.sleep(2)
print(f"{(time.process_time() - c) / (time.monotonic() - t):.3f}", flush=True)
assert s.get("a") == b"1"
)";
  Subprocess torch_client({*python, "-c", client, std::to_string(s.port)});
  const auto ready = torch_client.read_line(120s);
  if (ready != std::optional<std::string>("ready")) {
    const auto ended = torch_client.wait(60s);
    s.server.signal(SIGTERM);
    const auto served = s.server.wait(30s);
    FAIL("torch's client said " << ready.value_or("nothing") << " instead of ready; stderr:\n"
                                << (ended ? ended->err : "(still running)") << "\nthe store's:\n"
                                << (served ? served->err : "(still running)"));
  }
  // The store has decided about the silent connection (kept or closed):
  // torch 1.x's alone; torch 2's client opens no second connection.
  const auto major = run({*python, "-c", "import torch; print(torch.__version__.split('.')[0])"},
                         {}, {}, 120s);
  const bool silent_connection = major.out == "1\n";
  if (silent_connection) REQUIRE(s.server.wait_for_stderr("sent nothing", 30s));
  torch_client.signal(SIGUSR1);
  const auto share = torch_client.read_line(60s);
  REQUIRE(share);
  INFO("CPU time of torch's client over 2 s while it sleeps, as a share of one core: " << *share);
  CHECK(std::stod(*share) < 0.2);
  auto done = torch_client.wait(60s);
  REQUIRE(done);
  INFO("stderr:\n" << done->err);
  CHECK(done->exit_code == 0);
  if (silent_connection)
    CHECK(s.server.wait_for_stderr("kept open as a torch client's silent connection", 1s));
}

TEST_CASE("collie store serve --torch: a query that comes as the handshake time ends is served",
          "[cli]") {
  // Its bytes and the handshake timer's expiry can be handled in one turn
  // of the server's loop, the bytes first: the timer must then let the torch
  // client be. Stopping the server across its handshake time makes that
  // turn (both ready when it runs again).
  ServedStore s({"--torch", "--handshake-timeout", "0.5"});
  const auto open_files = [&] {
    const auto fds = std::filesystem::path("/proc") / std::to_string(s.server.pid()) / "fd";
    return std::distance(std::filesystem::directory_iterator(fds), {});
  };
  const auto before = open_files();
  collie::test::RawConnection torch_client(static_cast<std::uint16_t>(s.port));
  // Accepted: its handshake time runs from now.
  REQUIRE(collie::test::eventually([&] { return open_files() == before + 1; }));
  s.server.signal(SIGSTOP);
  std::this_thread::sleep_for(1s);  // time itself is the point: twice the handshake time
  // torch 1.x's SET /a "x", then GET /a, in the stopped server's socket.
  namespace v1 = collie::test::v1;
  auto queries = collie::test::TorchQuery(v1::SET).str("/a").str("x").b;
  const auto get = collie::test::TorchQuery(v1::GET).str("/a").b;
  queries.insert(queries.end(), get.begin(), get.end());
  torch_client.send(queries);
  s.server.signal(SIGCONT);
  const auto reply = torch_client.read_exactly(9, 30000ms);
  REQUIRE(reply);
  CHECK(*reply == std::vector<std::uint8_t>{1, 0, 0, 0, 0, 0, 0, 0, 'x'});
}

TEST_CASE("collie store serve --torch beyond loopback needs --insecure, and says why", "[cli]") {
  // With a token: collie's clients would authenticate, torch's cannot.
  const auto r = run({kCollie, "store", "serve", "--host", "0.0.0.0", "--port", "0", "--torch"},
                     {"COLLIE_STORE_TOKEN=s3cret"}, {}, 30s);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, ContainsSubstring("torch's protocol has no authentication"));
}
