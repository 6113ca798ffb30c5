// Jobs that meet in etcd (Debian's etcd-server, with certificates made by
// openssl): `collie launch --rdzv-backend etcd` refusing what cannot work,
// two launchers on one host, ranks started by hand (srun's variables) with
// an etcd:// init on two namespace hosts, and the elastic job whose first
// node and one etcd member are lost at the same moment. Each skips, saying why, where etcd,
// network namespaces or torch are missing.
#include <csignal>
#include <fstream>
#include <memory>

#include "support/build_paths.hpp"
#include "support/catch.hpp"
#include <fmt/format.h>

#include "support/cli.hpp"
#include "support/etcd_cluster.hpp"
#include "support/lost_node_job.hpp"
#include "support/eventually.hpp"
#include "support/netns.hpp"
#include "support/read_file.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"
#include "support/torch_hosts.hpp"

using namespace std::chrono_literals;
using collie::test::EtcdCluster;
using collie::test::kCollie;
using collie::test::NetworkNamespaces;
using collie::test::read_file;
using collie::test::Subprocess;

namespace {

const std::string kWorker = collie::test::paths::kCollectiveWorker;

// --rdzv-conf's certificates for a launcher.
std::string tls_conf(const EtcdCluster& etcd) {
  const auto t = etcd.client_tls();
  return fmt::format("cacert={},cert={},key={}", t.cacert, t.cert, t.key);
}

// The environment that gives ranks started by hand etcd's certificates.
std::vector<std::string> tls_env(const EtcdCluster& etcd) {
  const auto t = etcd.client_tls();
  return {"COLLIE_ETCD_CACERT=" + t.cacert, "COLLIE_ETCD_CERT=" + t.cert,
          "COLLIE_ETCD_KEY=" + t.key};
}

}  // namespace

TEST_CASE("launch with etcd: what cannot work is refused, naming why", "[launch][etcd]") {
  const auto refused = [](std::vector<std::string> words, const std::string& says) {
    words.insert(words.begin(), {kCollie, "launch"});
    words.emplace_back("/bin/true");
    const auto r = collie::test::run(words, {"COLLIE_ETCD_CERT=", "COLLIE_ETCD_KEY="});
    INFO(r.err);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, ContainsSubstring(says));
  };
  refused({"--rdzv_backend=etcd"}, "needs --rdzv-endpoint");
  refused({"--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.1:2379"}, "needs --rdzv-id");
  refused({"--rdzv_backend=etcd-v2", "--rdzv_endpoint=10.0.0.1", "--rdzv_id=j"},
          "no client certificate");
  refused({"--rdzv_backend=etcd", "--rdzv_endpoint=http://10.0.0.1:2379", "--rdzv_id=j"},
          "plain HTTP");
  refused({"--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.1:2379", "--rdzv_id=j",
           "--rdzv_conf=protocol=http"},
          "plain HTTP");
  refused({"--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.1:2379", "--rdzv_id=j",
           "--rdzv_conf=protocol=ftp"},
          "http or https");
  refused({"--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.1:2379", "--rdzv_id=a/b"},
          "--rdzv-id 'a/b'");
  refused({"--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.1:2379,", "--rdzv_id=j"},
          "is not host:port");
  refused({"--rdzv_backend=c10d", "--rdzv_conf=cacert=/x"}, "--rdzv-conf cacert");
  refused({"--rdzv_backend=zookeeper"}, "etcd (or etcd-v2");
}

TEST_CASE("launch with etcd: two launchers on one host meet there and run a checked job",
          "[launch][etcd]") {
  collie::test::ScratchDir dir;
  EtcdCluster etcd(dir, EtcdCluster::on_loopback(1, /*tls=*/true));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  const auto env = collie::test::job_secret(dir, "etcd-launch-secret-0123456789abcdef");
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{kCollie, "launch", "--nnodes=2", "--nproc_per_node=2",
                                 // Ignored with a note: the nodes are numbered as they join.
                                 "--node_rank=" + std::to_string(i), "--rdzv_backend=etcd",
                                 "--rdzv_endpoint=" + etcd.endpoint_list(), "--rdzv_id=two-nodes",
                                 "--rdzv_conf=" + tls_conf(etcd), "--", kWorker, "stall", "0"},
        env));
  }
  for (int i = 0; i < 2; ++i) {
    const auto r = nodes[static_cast<std::size_t>(i)]->wait(120s);
    REQUIRE(r);
    INFO("node " << i << ":\n" << r->out << r->err);
    CHECK(r->exit_code == 0);
    CHECK_THAT(r->err, ContainsSubstring("is ignored: with etcd the nodes are numbered as they join") &&
                           ContainsSubstring("round 0: 2 nodes") && ContainsSubstring("4 ranks"));
    // Numbered as they joined: either launcher may hold ranks 0 and 1.
    const int low = r->err.find("this is node 0") != std::string::npos ? 0 : 2;
    CHECK_THAT(r->out, ContainsSubstring(fmt::format("rank {}: ok", low)) &&
                           ContainsSubstring(fmt::format("rank {}: ok", low + 1)));
  }
}

// (Launcher logic on one thread: [volume], left to the presets but TSan's.)
TEST_CASE("launch with etcd: a launcher that dies is named once its lease expires",
          "[launch][etcd][volume]") {
  collie::test::ScratchDir dir;
  EtcdCluster etcd(dir, EtcdCluster::on_loopback(1, /*tls=*/true));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  const auto env = collie::test::job_secret(dir, "etcd-lease-secret-0123456789abcdef");
  // Ranks that never talk to each other: only the launchers' heartbeats
  // can tell that a node went.
  auto node = [&] {
    return std::make_unique<Subprocess>(
        std::vector<std::string>{kCollie, "launch", "--nnodes=2", "--nproc_per_node=1",
                                 "--rdzv_backend=etcd", "--rdzv_endpoint=" + etcd.endpoint_list(),
                                 "--rdzv_id=lease-job", "--rdzv_conf=" + tls_conf(etcd), "--",
                                 "/bin/sh", "-c", "echo started; exec sleep 600"},
        env);
  };
  auto a = node();
  auto b = node();
  // Both ranks run ("[rank R] started", R as their launchers joined).
  for (auto* n : {a.get(), b.get()}) {
    const auto line = n->read_line(60s);
    REQUIRE(line);
    CHECK_THAT(*line, EndsWith("] started"));
  }
  const auto killed = std::chrono::steady_clock::now();
  a->signal(SIGKILL);
  a->wait(30s);
  // The node timeout (--node-timeout) is 60 s; the lease, 10 s.
  const auto r = b->wait(45s);
  REQUIRE(r);
  INFO(r->err);
  CHECK(r->exit_code != 0);
  CHECK_THAT(r->err, ContainsSubstring("is gone (its launcher's lease in etcd expired"));
  CHECK(std::chrono::steady_clock::now() - killed < 40s);
}

TEST_CASE("launch with etcd: an etcd without a quorum stops the job, naming etcd's members",
          "[launch][etcd][volume]") {
  collie::test::ScratchDir dir;
  EtcdCluster etcd(dir, EtcdCluster::on_loopback(3, /*tls=*/true));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  const auto env = collie::test::job_secret(dir, "etcd-quorum-secret-0123456789abcdef");
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{kCollie, "launch", "--nnodes=2", "--nproc_per_node=1",
                                 "--rdzv_backend=etcd",
                                 "--rdzv_endpoint=" + etcd.endpoint_list(), "--rdzv_id=quorum-job",
                                 "--rdzv_conf=" + tls_conf(etcd), "--", "/bin/sh", "-c",
                                 "echo started; exec sleep 600"},
        env));
  }
  for (auto& n : nodes)
    REQUIRE(n->read_line(60s).has_value());
  etcd.stop(0);
  etcd.stop(1);
  // Every launcher ends (nothing hangs), saying that etcd lost its quorum.
  for (auto& n : nodes) {
    const auto r = n->wait(120s);
    REQUIRE(r);
    INFO(r->err);
    CHECK(r->exit_code != 0);
    CHECK_THAT(r->err, ContainsSubstring("has no quorum") && ContainsSubstring(etcd.endpoints()[2]));
  }
}

TEST_CASE("etcd:// init: the stall inspector names a rank busy elsewhere", "[etcd][stall]") {
  collie::test::ScratchDir dir;
  EtcdCluster etcd(dir, EtcdCluster::on_loopback(1, /*tls=*/true));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  // Rank 2 sleeps 5 s before its fourth all_reduce; the stall time is 1 s.
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = tls_env(etcd);
    env.insert(env.end(), {"RANK=" + std::to_string(rank), "WORLD_SIZE=3",
                           "COLLIE_INIT_METHOD=etcd://" + etcd.endpoint_list() + "/stall-job",
                           "COLLIE_STALL_TIME=1", "COLLIE_TIMEOUT=120", "COLLIE_LOG_LEVEL=warn"});
    ranks.push_back(
        std::make_unique<Subprocess>(std::vector<std::string>{kWorker, "stall", "5000"}, env));
  }
  REQUIRE(ranks[2]->read_line(60s) == "rank 2: busy");
  for (int rank : {0, 1}) {
    auto& r = *ranks[static_cast<std::size_t>(rank)];
    CHECK(r.wait_for_stderr("has not reached it: it last finished #2 ", 30s));
    CHECK(r.wait_for_stderr("it is in no collective call (its program is busy elsewhere)", 1s));
  }
  for (int rank : {0, 1, 2})
    CHECK(ranks[static_cast<std::size_t>(rank)]->read_line(60s) ==
          "rank " + std::to_string(rank) + ": ok");
}

TEST_CASE("etcd:// init: ranks started by hand, as srun starts them, on two hosts run every "
          "collective",
          "[multihost][etcd]") {
  NetworkNamespaces hosts(3);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  collie::test::ScratchDir dir;
  EtcdCluster::Options o;
  o.members = 3;
  o.tls = true;
  o.hosts = &hosts;
  o.on_hosts = {0, 1, 2};
  EtcdCluster etcd(dir, o);
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  constexpr int kWorld = 4;
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    auto env = tls_env(etcd);
    env.insert(env.end(), {"SLURM_PROCID=" + std::to_string(r),
                           "SLURM_NTASKS=" + std::to_string(kWorld),
                           "SLURM_LOCALID=" + std::to_string(r % 2), "SLURM_JOB_ID=4242",
                           "COLLIE_INIT_METHOD=etcd://" + etcd.endpoint_list() + "/srun-4242",
                           "COLLIE_STORE_TOKEN=etcd-init-secret-0123456789abcdef",
                           "COLLIE_LOG_LEVEL=warn"});
    ranks.push_back(
        std::make_unique<Subprocess>(hosts.exec(r / 2, {kWorker, "matrix", "smoke"}), env));
  }
  for (int r = 0; r < kWorld; ++r) {
    const auto result = ranks[static_cast<std::size_t>(r)]->wait(300s);
    REQUIRE(result);
    INFO("rank " << r << ":\n" << result->out << result->err);
    CHECK(result->exit_code == 0);
    CHECK_THAT(result->out, ContainsSubstring(fmt::format("rank {}: matrix ok (", r)));
  }
}

namespace {

// The job on etcd: three hosts, each with an etcd member (3, TLS
// and client certificates) and a launcher of 2 ranks, elastic from 2 to 3
// nodes, running kCheckpointedSteps; round 0's node 0 is lost as `loss`
// says, and with it an etcd member: killed, another host's member is
// stopped at that moment; cut off, its host's own member goes with the link.
void lose_first_node_on_etcd(collie::test::Loss loss) {
  NetworkNamespaces hosts(3);
  if (const auto missing = collie::test::torch_hosts_missing(hosts); !missing.empty()) {
    WARN("skipped: " << missing);
    return;
  }
  collie::test::ScratchDir dir;
  EtcdCluster::Options o;
  o.members = 3;
  o.tls = true;
  o.hosts = &hosts;
  o.on_hosts = {0, 1, 2};
  EtcdCluster etcd(dir, o);
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  std::ofstream(dir.file("train.py")) << collie::test::kCheckpointedSteps;
  const auto env = collie::test::job_secret(dir, "etcd-elastic-secret-0123456789abcdef");
  const auto ckpt = dir.file("ckpt.json");
  constexpr int kSteps = 40;
  // torchrun's elastic line on etcd, the same on every node.
  auto node = [&](int i) {
    return std::make_unique<Subprocess>(
        hosts.exec(i, {kCollie, "launch", "--nnodes=2:3", "--nproc_per_node=2",
                       "--max_restarts=3", "--rdzv_backend=etcd",
                       "--rdzv_endpoint=" + etcd.endpoint_list(), "--rdzv_id=elastic-job",
                       "--rdzv_conf=last_call_timeout=5,join_timeout=60," + tls_conf(etcd),
                       dir.file("train.py"), ckpt, std::to_string(kSteps)}),
        env);
  };
  collie::test::Nodes nodes;
  for (int i = 0; i < 3; ++i)
    nodes.push_back(node(i));
  // Round 0's node 0 hosts the ranks' store.
  if (loss == collie::test::Loss::kKilled) {
    collie::test::lose_first_node(nodes, ckpt, kSteps, [&](std::size_t lost) {
      etcd.stop(static_cast<int>(lost + 1) % 3);
    });
  } else {
    collie::test::lose_first_node(nodes, ckpt, kSteps, {}, loss,
                                  [&](std::size_t lost) { return hosts.cut(static_cast<int>(lost)); });
  }
}

}  // namespace

TEST_CASE("launch with etcd: losing the first node and an etcd member, the others finish",
          "[multihost][elastic][etcd]") {
  lose_first_node_on_etcd(collie::test::Loss::kKilled);
}

TEST_CASE("launch with etcd: the first node's host cut off with its etcd member, the others "
          "finish",
          "[multihost][elastic][etcd]") {
  lose_first_node_on_etcd(collie::test::Loss::kCut);
}
