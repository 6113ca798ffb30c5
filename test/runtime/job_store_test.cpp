// Who hosts a job's store, and what the others see when the host goes away.
#include <arpa/inet.h>
#include <future>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/catch.hpp"

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/server.hpp>

#include "group/job_store.hpp"
#include "support/eventually.hpp"
#include "support/log_capture.hpp"
#include "support/name_resolution.hpp"
#include "support/scratch_dir.hpp"
#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using collie::JobConfig;
using collie::JobStore;

namespace {

JobConfig config(int rank, int world, std::uint16_t port) {
  JobConfig c;
  c.rank = rank;
  c.world_size = world;
  c.master_addr = "127.0.0.1";
  c.master_port = port;
  c.timeout = 20s;
  return c;
}

}  // namespace

TEST_CASE("rank 0 hosts the store and the others reach it, even when they start first",
          "[job_store]") {
  // The only way to give rank 0 a port before it listens is to pick one.
  const auto port = collie::test::momentarily_free_port();
  collie::test::LogCapture log(spdlog::level::debug);
  auto rank1 = std::async(std::launch::async, [&] {
    JobStore job(config(1, 2, port));
    const bool hosts = job.hosts_server();
    job.store().set("hello/1", "from 1");
    return std::make_pair(hosts, job.store().get("hello/0"));
  });
  // Rank 0 starts once rank 1 has tried to reach the store and been refused.
  REQUIRE(collie::test::eventually([&] {
    return !log.containing(fmt::format("connecting to 127.0.0.1:{} failed", port)).empty();
  }));
  JobStore rank0(config(0, 2, port));
  CHECK(rank0.hosts_server());
  rank0.store().set("hello/0", "from 0");
  CHECK(rank0.store().get("hello/1") == "from 1");
  const auto [rank1_hosts, said] = rank1.get();
  CHECK_FALSE(rank1_hosts);
  CHECK(said == "from 0");
}

TEST_CASE("when the launcher hosts the store, rank 0 does not", "[job_store]") {
  collie::test::StoreFixture launcher;
  auto c = config(0, 1, launcher.server.port());
  c.store_hosted_by_launcher = true;
  JobStore job(c);
  CHECK_FALSE(job.hosts_server());
  job.store().set("k", "v");
  CHECK(launcher.client()->get("collie/run/0/k") == "v");
}

TEST_CASE("each restart of a job sees only its own keys", "[job_store]") {
  collie::test::StoreFixture launcher;
  auto c = config(0, 1, launcher.server.port());
  c.store_hosted_by_launcher = true;
  JobStore first(c);
  first.store().set("ready", "attempt 0");
  c.restart_count = 1;
  JobStore second(c);
  CHECK_FALSE(second.store().try_get("ready").has_value());
  CHECK(second.store().num_keys() == 0);
}

TEST_CASE("a rank that makes its group again gets a namespace of its own, once the first joined",
          "[job_store]") {
  collie::test::StoreFixture launcher;
  auto c = config(0, 1, launcher.server.port());
  c.store_hosted_by_launcher = true;
  {
    JobStore failed(c);  // never joined: the next one takes the same namespace
    CHECK(failed.prefix() == "collie/run/0");
  }
  {
    JobStore first(c);
    CHECK(first.prefix() == "collie/run/0");
    first.store().set("world/rank/0/claimed", "1");
    first.joined();
  }
  JobStore second(c);
  CHECK(second.prefix() == "collie/run/0/gen/1");
  CHECK_FALSE(second.store().try_get("world/rank/0/claimed").has_value());
  second.store().set("k", "v");
  CHECK(launcher.client()->get("collie/run/0/gen/1/k") == "v");
  // Another rank, or another store, counts on its own.
  auto other = c;
  other.rank = 1;
  other.world_size = 2;
  JobStore rank1(other);
  CHECK(rank1.prefix() == "collie/run/0");
}

TEST_CASE("when rank 0 leaves, the others fail at once instead of waiting", "[job_store]") {
  const auto port = collie::test::momentarily_free_port();
  auto rank0 = std::make_unique<JobStore>(config(0, 2, port));
  JobStore rank1(config(1, 2, port));
  auto blocked = std::async(std::launch::async, [&] { return rank1.store().get("never", 60s); });
  REQUIRE(collie::test::eventually([&] { return rank0->server()->stats().blocked >= 1; }));
  const auto start = std::chrono::steady_clock::now();
  rank0.reset();
  CHECK_THROWS_AS(blocked.get(), collie::ConnectionError);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("rank 0's store outlives a group that formed, and its next group takes it over",
          "[job_store]") {
  // destroy, then init again by hand: the others may still be leaving the
  // first group, or already joining the second, on rank 0's store.
  const auto port = collie::test::momentarily_free_port();
  auto rank0 = std::make_unique<JobStore>(config(0, 2, port));
  auto rank1 = std::make_unique<JobStore>(config(1, 2, port));
  const auto* server = rank0->server();
  rank0->joined();
  rank1->joined();
  rank0.reset();
  // Rank 1, still in the first group, is served on.
  rank1->store().set("late", "1");
  CHECK(rank1->store().get("late") == "1");
  rank1.reset();
  // Rank 1 is first in the second group; rank 0 takes its store over.
  JobStore again1(config(1, 2, port));
  again1.store().set("early", "1");
  JobStore again0(config(0, 2, port));
  CHECK(again0.server() == server);
  CHECK(again0.prefix() == "collie/run/0/gen/1");
  CHECK(again0.store().get("early") == "1");
  CHECK(again1.prefix() == again0.prefix());
}

TEST_CASE("rank 0 says which port it could not host the store on", "[job_store]") {
  collie::test::StoreFixture other_job;
  CHECK_THROWS_WITH(JobStore(config(0, 2, other_job.server.port())),
                    ContainsSubstring("MASTER_PORT=" + std::to_string(other_job.server.port())) &&
                        ContainsSubstring("another job"));
}

TEST_CASE("file:// jobs share the store through the file", "[job_store]") {
  const collie::test::ScratchDir dir;
  const auto path = dir.file("store");
  JobConfig c;
  c.method = JobConfig::Method::File;
  c.file_path = path;
  c.world_size = 2;
  JobStore rank0(c);
  c.rank = 1;
  JobStore rank1(c);
  rank1.store().set("x", "1");
  CHECK(rank0.store().get("x") == "1");
}

TEST_CASE("rank 0 whose master is on loopback hosts the store on loopback only",
          "[job_store][security]") {
  const std::string outside = collie::test::non_loopback_ipv4();
  if (outside.empty()) {
    WARN("skipped: this host has no non-loopback IPv4 address");
    return;
  }
  auto reachable = [](const std::string& host, std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  };
  // Rank 0 must host on MASTER_PORT itself: a port that was free a moment
  // ago, tried again if a test running beside this one took it meanwhile.
  auto hosted = [](JobConfig c) {
    for (int attempt = 0;; ++attempt) {
      c.master_port = collie::test::momentarily_free_port();
      try {
        return std::make_pair(std::make_unique<JobStore>(c), c.master_port);
      } catch (const collie::Error& e) {
        if (attempt == 4 || std::string(e.what()).find("in use") == std::string::npos) throw;
      }
    }
  };
  const auto [rank0, port] = hosted(config(0, 1, 0));
  REQUIRE(rank0->hosts_server());
  CHECK(reachable("127.0.0.1", port));
  CHECK_FALSE(reachable(outside, port));
  // A master beyond loopback: other hosts must reach it.
  auto wide = config(0, 1, 0);
  wide.master_addr = outside;
  wide.token = "a secret";
  const auto [host, wide_port] = hosted(wide);
  CHECK(host->hosts_server());
  CHECK(reachable(outside, wide_port));
}
