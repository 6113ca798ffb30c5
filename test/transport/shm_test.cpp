// What only the shared-memory backend has: mailboxes that strangers cannot
// open or forge, the choice of backend per peer (open_transport), the host
// identity, and messages withdrawn half-way. The contract both backends keep is tested on both in
// tcp_transport_test.cpp; between processes, in p2p_launch_test.cpp and
// collective_launch_test.cpp.
#include <cstdlib>
#include <fcntl.h>
#include <future>
#include <numeric>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/host_cpus.hpp>
#include <collie/transport/open.hpp>
#include <collie/transport/shm.hpp>

#include "support/shm_skip.hpp"
#include "support/store_fixture.hpp"
#include "support/transport_cluster.hpp"

using namespace std::chrono_literals;
using collie::transport::ShmTransport;
using collie::transport::Transport;
using collie::transport::TransportOptions;
namespace tc = collie::test;

namespace {

TransportOptions options(int rank, int world, std::uint64_t id) {
  TransportOptions o;
  o.rank = rank;
  o.world_size = world;
  o.group_id = id;
  o.timeout = 10s;
  return o;
}

// "<pid> <fd> <secret> <address>" of a rank, from the store.
struct Record {
  long pid = 0;
  int fd = -1;
  std::string secret, address;
};
Record record_of(collie::store::Store& store, int rank) {
  std::istringstream in(store.get(fmt::format("world/shm/{}", rank)));
  Record r;
  in >> r.pid >> r.fd >> r.secret >> r.address;
  return r;
}

}  // namespace

TEST_CASE("shm: a rank's mailbox is an anonymous file of mode 0600, nowhere in /dev/shm",
          "[shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  collie::test::StoreFixture fixture;
  ShmTransport t(fixture.shared_client(), options(0, 2, 1), {0, 1});
  const auto r = record_of(*fixture.shared_client(), 0);
  REQUIRE(r.pid == ::getpid());
  const std::string path = fmt::format("/proc/self/fd/{}", r.fd);
  char target[256] = {};
  REQUIRE(::readlink(path.c_str(), target, sizeof target - 1) > 0);
  CHECK_THAT(std::string(target), StartsWith("/memfd:collie-shm"));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // Sealed: nobody can shrink it under the ranks that map it.
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CHECK(::ftruncate(fd, 4096) != 0);
  ::close(fd);
  // The secret is 128 random bits, and the address where TCP reaches it is
  // absent here (no TCP backend beside it).
  CHECK(r.secret.size() == 32);
  CHECK(r.address == "-");
}

TEST_CASE("shm: a forged mailbox record is refused, naming the rank", "[shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  collie::test::StoreFixture fixture;
  auto store = fixture.shared_client();
  const auto id = collie::crypto::random_u64();
  ShmTransport a(fixture.shared_client(), options(0, 2, id), {0, 1});
  ShmTransport b(fixture.shared_client(), options(1, 2, id), {0, 1});
  // Someone who can write the store (it cannot without the token) points
  // rank 0 at rank 1's mailbox with a guessed secret.
  auto r = record_of(*store, 1);
  store->set("world/shm/1", fmt::format("{} {} {} -", r.pid, r.fd, std::string(32, '7')));
  const std::uint32_t word = 42;
  std::string error;
  try {
    a.wait(a.isend(1, 0, &word, sizeof word), 5s);
  } catch (const collie::ConnectionError& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("send to rank 1") &&
                        ContainsSubstring("is not its mailbox for this group"));
}

TEST_CASE("shm: ring stores other than auto, cached and streaming are refused, naming them",
          "[shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  collie::test::StoreFixture fixture;
  auto o = options(0, 1, collie::crypto::random_u64());
  o.settings.shm_stores = "fast";
  CHECK_THROWS_WITH(ShmTransport(fixture.shared_client(), o, {0}),
                    ContainsSubstring("ring stores 'fast'") && ContainsSubstring("choose auto"));
}

TEST_CASE("shm: a process of another user cannot open a rank's mailbox", "[shm][security]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  if (::geteuid() != 0) {
    WARN("skipped: needs root, to run the stranger as another user (nobody)");
    return;
  }
  const passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) {
    WARN("skipped: this machine has no user 'nobody'");
    return;
  }
  collie::test::StoreFixture fixture;
  ShmTransport t(fixture.shared_client(), options(0, 2, 1), {0, 1});
  const auto r = record_of(*fixture.shared_client(), 0);
  const std::string path = fmt::format("/proc/{}/fd/{}", r.pid, r.fd);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(nobody->pw_gid) != 0 || ::setuid(nobody->pw_uid) != 0) ::_exit(2);
    const int fd = ::open(path.c_str(), O_RDWR);
    ::_exit(fd < 0 ? 0 : 1);  // 0: refused, as it must be
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("open_transport: shared memory between ranks of one host, TCP between hosts",
          "[shm][router]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  // Four ranks; ranks 0 and 1 say they are on host "a", 2 and 3 on "b".
  collie::test::StoreFixture fixture;
  const auto id = collie::crypto::random_u64();
  std::vector<std::future<std::shared_ptr<Transport>>> opening;
  for (int r = 0; r < 4; ++r) {
    opening.push_back(std::async(std::launch::async, [&, r] {
      auto o = options(r, 4, id);
      o.host_id.assign(1, r < 2 ? 'a' : 'b');
      return collie::transport::open_transport(fixture.shared_client(), o);
    }));
  }
  std::vector<std::shared_ptr<Transport>> t;
  for (auto& f : opening)
    t.push_back(f.get());
  CHECK_THAT(t[0]->describe(), StartsWith("tcp on 127.0.0.1:") &&
                                   EndsWith("(ranks 2-3); shm (ranks 0-1)"));
  CHECK_THAT(t[3]->describe(), EndsWith("(ranks 0-1); shm (ranks 2-3)"));
  CHECK_THAT(t[0]->describe_peer(1), ContainsSubstring("(shared memory)"));
  CHECK_THAT(t[0]->describe_peer(2), !ContainsSubstring("(shared memory)"));
  // Every pair moves bytes, each through its own backend.
  std::vector<std::future<void>> done;
  for (int r = 0; r < 4; ++r) {
    done.push_back(std::async(std::launch::async, [&, r] {
      std::vector<collie::transport::RequestPtr> reqs;
      std::vector<std::vector<int>> in(4, std::vector<int>(1000));
      std::vector<int> out(1000);
      std::iota(out.begin(), out.end(), r * 1000);
      for (int p = 0; p < 4; ++p) {
        reqs.push_back(t[static_cast<std::size_t>(r)]->isend(p, 7, out.data(), 4000));
        reqs.push_back(t[static_cast<std::size_t>(r)]->irecv(
            p, 7, in[static_cast<std::size_t>(p)].data(), 4000));
      }
      for (auto& q : reqs)
        t[static_cast<std::size_t>(r)]->wait(q, 20s);
      for (int p = 0; p < 4; ++p)
        for (int i = 0; i < 1000; ++i)
          if (in[static_cast<std::size_t>(p)][static_cast<std::size_t>(i)] != p * 1000 + i)
            throw std::runtime_error(fmt::format("rank {}: from rank {}, element {} is wrong", r,
                                                 p, i));
    }));
  }
  for (auto& f : done)
    f.get();
}

TEST_CASE("open_transport: shm forced with a rank on another host says which", "[shm][router]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  collie::test::StoreFixture fixture;
  const auto id = collie::crypto::random_u64();
  std::vector<std::future<std::string>> opening;
  for (int r = 0; r < 2; ++r) {
    opening.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      auto o = options(r, 2, id);
      o.settings.backend = "shm";
      o.host_id = r == 0 ? "a" : "b";
      try {
        collie::transport::open_transport(fixture.shared_client(), o);
      } catch (const collie::Error& e) {
        return e.what();
      }
      return "no error";
    }));
  }
  CHECK_THAT(opening[0].get(), ContainsSubstring("rank 0: the transport is shm") &&
                                   ContainsSubstring("rank 1 runs on another host ('b'"));
  CHECK_THAT(opening[1].get(), ContainsSubstring("rank 0 runs on another host ('a'"));
  auto o = options(0, 1, id);
  o.settings.backend = "udp";
  CHECK_THROWS_WITH(collie::transport::open_transport(fixture.shared_client(), o),
                    ContainsSubstring("transport 'udp': choose auto"));
}

TEST_CASE("host_identity: the boot, the user and the namespaces, unless COLLIE_HOST_ID is set",
          "[shm]") {
  const auto here = collie::transport::host_identity();
  CHECK_THAT(here, ContainsSubstring(fmt::format(" uid {} pid:[", ::getuid())) &&
                       ContainsSubstring(" net:["));
  ::setenv("COLLIE_HOST_ID", "rack7-node3", 1);
  CHECK(collie::transport::host_identity() == "rack7-node3");
  ::unsetenv("COLLIE_HOST_ID");
  CHECK(collie::transport::host_identity() == here);
}

TEST_CASE("shm: a send that times out half-way is withdrawn, and the pair goes on", "[shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  // The receiver holds 64 KiB of unexpected messages at most: a 4 MiB one
  // with no receive waits in the ring (1 MiB), half-written, until its
  // sender's wait gives up on it.
  tc::Cluster c(2, [](tc::MeshOptions& o) { o.max_unexpected_bytes = 64 << 10; }, "shm");
  const std::size_t n = std::size_t{4} << 20;
  auto gone = std::make_unique<std::vector<std::uint8_t>>(tc::pattern(n, 0, 5));
  auto s = c[0].isend(1, 5, gone->data(), n);
  std::string error;
  try {
    c[0].wait(s, 100ms);
  } catch (const collie::TimeoutError& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("send to rank 1") &&
                        ContainsSubstring("the part already written was withdrawn"));
  gone.reset();  // the caller's buffer is its own again: nothing reads it (ASan says so)
  // The next message under another tag comes whole; the withdrawn one is
  // dropped, so a receive under its tag gets the next message sent there.
  const auto next = tc::pattern(8, 0, 6);
  tc::send(c[0], 1, 6, next);
  CHECK(tc::recv(c[1], 0, 6, 8) == next);
  std::vector<std::uint8_t> again(n, 0xEE);
  auto r = c[1].irecv(0, 5, again.data(), n);
  const auto real = tc::pattern(n, 0, 7);
  tc::send(c[0], 1, 5, real);
  c[1].wait(r);
  CHECK(again == real);
  // Back the other way too.
  tc::send(c[1], 0, 8, next);
  CHECK(tc::recv(c[0], 1, 8, 8) == next);
}

TEST_CASE("shm: a receive under way when its sender withdraws the message fails, naming why",
          "[shm]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  tc::Cluster c(2, "shm");
  const std::size_t n = std::size_t{4} << 20;
  // Rank 1's receive holds its reader on the first piece until the sender
  // has given up: the message is half-way on both sides.
  std::promise<void> given_up;
  auto release = given_up.get_future().share();
  std::atomic<std::size_t> seen{0};
  auto r = c[1].irecv_consume(0, 5, n, [&](std::size_t, std::span<const std::byte> piece) {
    if (seen.fetch_add(piece.size()) == 0) release.wait();
  });
  auto big = tc::pattern(n, 0, 5);
  auto s = c[0].isend(1, 5, big.data(), n);
  CHECK_THROWS_AS(c[0].wait(s, 200ms), collie::TimeoutError);
  given_up.set_value();
  std::string error;
  try {
    c[1].wait(r, 10s);
  } catch (const collie::Error& e) {
    error = e.what();
  }
  CHECK_THAT(error, ContainsSubstring("withdrew its message half-way"));
  CHECK(seen.load() < n);  // the filler never reached the consumer whole
  const auto next = tc::pattern(1000, 0, 6);
  tc::send(c[0], 1, 6, next);
  CHECK(tc::recv(c[1], 0, 6, 1000) == next);
}

TEST_CASE("shm: a machine is busy when work outside the job fills its processors",
          "[shm][load]") {
  // The kernel's count includes the task that asks.
  const int runnable = collie::runnable_tasks();
  CHECK(runnable >= 1);
  CHECK(collie::online_cpus() >= 1);
  // 2 processors, this job's 2 ranks: six other tasks (hogs) fill them,
  // one does not; 2 others do (each has a processor of its own).
  CHECK(collie::machine_busy(1 + 2 + 6, 2, 2));
  CHECK(collie::machine_busy(1 + 2 + 2, 2, 2));
  CHECK_FALSE(collie::machine_busy(1 + 2 + 1, 2, 2));
  // The job's own ranks never make it busy, however many.
  CHECK_FALSE(collie::machine_busy(1 + 256, 256, 2));
  // Unknown load: not busy.
  CHECK_FALSE(collie::machine_busy(-1, 2, 2));
  CHECK_FALSE(collie::machine_busy(0, 0, 0));
  CHECK(collie::machine_busy(3, 0, 0));  // no processor counted: one
}
