// collie::init over etcd:// (ranks as threads of this process, a real etcd
// of one member on loopback): every collective runs on the group, and a
// second job under the same name is told why it cannot join. Skips, saying
// why, where etcd is not installed.
#include <atomic>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/process_group.hpp>

#include "collective_check.hpp"
#include "support/etcd_cluster.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;

namespace {

std::string job_name() {
  static std::atomic<int> n{0};
  return "job-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

}  // namespace

TEST_CASE("init over etcd:// runs every collective, and a job name taken is named", "[etcd]") {
  collie::test::ScratchDir dir;
  collie::test::EtcdCluster etcd(dir, collie::test::EtcdCluster::on_loopback(1, /*tls=*/true));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  const auto tls = etcd.client_tls();
  const auto url = "etcd://" + etcd.endpoint_list() + "/" + job_name();
  const auto on_etcd = [&](collie::InitOptions& o) {
    o.init_method = url;
    o.etcd_cacert = tls.cacert;
    o.etcd_cert = tls.cert;
    o.etcd_key = tls.key;
  };
  constexpr int kWorld = 3;
  std::atomic<std::size_t> cases{0};
  collie::test::run_ranks(
      kWorld,
      [&](collie::ProcessGroup& pg) {
        for (const auto& c : collie::check::matrix(pg.size(), false)) {
          std::string first;
          const auto wrong = collie::check::run_and_check(pg, c, first);
          collie::test::expect(wrong == 0, collie::check::describe(c) + ": " + first);
          if (pg.rank() == 0) ++cases;
        }
      },
      60s, on_etcd);
  CHECK(cases.load() > 50);

  // Two jobs under one name by mistake: the second is told, at once.
  collie::InitOptions o;
  on_etcd(o);
  o.init_method = "etcd://" + etcd.endpoint_list() + "/" + job_name();
  o.rank = 0;
  o.world_size = 1;
  o.timeout = 10s;
  auto job_a = collie::init(o);
  CHECK_THROWS_WITH(collie::init(o), ContainsSubstring("rank 0 is already taken in etcd") &&
                                         ContainsSubstring("etcdctl del --prefix"));
  std::vector<int> v{3};
  job_a.all_reduce(std::span(v));
  CHECK(v[0] == 3);
}

TEST_CASE("init over etcd:// without certificates or insecure is refused, saying how", "[etcd]") {
  collie::InitOptions o;
  o.init_method = "etcd://127.0.0.1:2379/job";
  o.rank = 0;
  o.world_size = 1;
  o.etcd_cacert = "";
  o.etcd_cert = "";
  o.etcd_key = "";
  o.etcd_insecure = false;
  CHECK_THROWS_WITH(collie::init(o), ContainsSubstring("client certificate") &&
                                         ContainsSubstring("COLLIE_ETCD_CERT") &&
                                         ContainsSubstring("--insecure"));
}
