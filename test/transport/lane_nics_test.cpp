// A pair's lanes over a host's second NIC (transport/src/tcp/lane_paths.hpp):
// which paths a rank finds to a peer from what it published, and two
// namespace hosts with two links each, where half of a pair's lanes leave
// from the second and a large message arrives whole both ways; with the
// second link dead, the lanes go over the first, named in a warning, and
// the message still arrives. The hosts are skipped where namespaces cannot
// be made (not root, no iproute2).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <collie/transport/tcp.hpp>

#include "support/catch.hpp"
#include "support/eventually.hpp"
#include "support/netns.hpp"
#include "support/store_fixture.hpp"
#include "support/transport_cluster.hpp"
#include "tcp/lane_paths.hpp"

using namespace collie::test;
using collie::transport::tcp::lane_paths;
using collie::transport::tcp::LanePath;
using collie::transport::tcp::path_of_lane;

namespace {

bool same(const std::vector<LanePath>& got, const std::vector<LanePath>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i].local != want[i].local || got[i].remote != want[i].remote) return false;
  return true;
}

// Two ranks on namespace hosts 0 and 1, each listening on its link 0 and,
// for lanes, its link 1, with `streams` lanes a pair; their store on this
// process's loopback.
struct TwoNicRanks {
  TwoNicRanks(NetworkNamespaces& h, int streams) : hosts(h) {
    const auto group = collie::crypto::random_u64();
    for (int r = 0; r < 2; ++r) {
      MeshOptions o;
      o.rank = r;
      o.world_size = 2;
      o.group_id = group;
      o.token = "lane-nics-test";
      o.timeout = 60s;
      o.handshake_timeout = 3s;  // how long a dead second link holds the lanes' opening
      o.listen_address = NetworkNamespaces::address(r, 0);
      o.lane_addresses = {NetworkNamespaces::address(r, 1)};
      o.settings.streams = streams;
      auto client = fixture.shared_client();
      meshes.push_back(
          hosts.on_host(r, [&] { return std::make_shared<Mesh>(std::move(client), o); }));
    }
  }

  // Each rank sends the other `messages` messages of `n` bytes, both ways
  // at once (each pair's connection also waits on the other's striped
  // messages while confirmations come back), and checks each one it gets,
  // element by element against the sender's pattern; `arrived` counts
  // rank 1's. "" or what went wrong on each rank.
  std::string exchange(std::size_t n, int messages = 1, std::atomic<int>* arrived = nullptr) {
    std::string errors[2];
    std::vector<std::future<void>> done;
    for (int r = 0; r < 2; ++r)
      done.push_back(std::async(std::launch::async, [&, r] {
        try {
          hosts.enter(r);
          auto& m = *meshes[static_cast<std::size_t>(r)];
          for (int k = 0; k < messages; ++k) {
            const auto tag = (static_cast<std::uint64_t>(n) << 8) + static_cast<std::uint64_t>(k);
            const auto mine = pattern(n, r, tag);
            std::vector<std::uint8_t> got(n, 0xEE);
            auto in = m.irecv(1 - r, tag, got.data(), n);
            auto out = m.isend(1 - r, tag, mine.data(), n);
            m.wait(out);
            m.wait(in);
            if (got != pattern(n, 1 - r, tag))
              errors[r] += "message " + std::to_string(k) + " differs; ";
            if (r == 1 && arrived != nullptr) ++*arrived;
          }
        } catch (const std::exception& e) {
          errors[r] += e.what();
        }
      }));
    for (auto& f : done)
      f.get();
    return errors[0].empty() && errors[1].empty()
               ? ""
               : "rank 0: " + errors[0] + " | rank 1: " + errors[1];
  }

  // How many bytes rank `r`'s sending lanes to the other carried from
  // `from` ("": the pair's interface), and how many such lanes it has.
  std::pair<std::uint64_t, int> carried(int r, const std::string& from) const {
    std::uint64_t bytes = 0;
    int lanes = 0;
    for (const auto& l : meshes[static_cast<std::size_t>(r)]->lanes(1 - r)) {
      if (!l.sending || l.from != from) continue;
      bytes += l.bytes;
      ++lanes;
    }
    return {bytes, lanes};
  }

  NetworkNamespaces& hosts;
  StoreFixture fixture;
  std::vector<std::shared_ptr<Mesh>> meshes;
};

}  // namespace

TEST_CASE("lane paths: a peer's lane address pairs with the interface the kernel routes it from",
          "[lanes][nics]") {
  // This host: 10.0.0.4 advertised, lanes may leave from 10.1.0.4 (a
  // second NIC) and 172.17.0.1 (a private bridge every host has alike).
  const std::string primary = "10.0.0.4";
  const std::vector<std::string> mine{"10.1.0.4", "172.17.0.1"};
  const auto route = [](const std::string& host) -> std::string {
    if (host.rfind("10.1.", 0) == 0) return "10.1.0.4";
    if (host.rfind("10.2.", 0) == 0) return "10.9.9.9";  // an address that is not a lane's
    if (host == "10.3.0.5") return "";                   // no route
    return "10.0.0.4";                                   // the default route: the primary's NIC
  };
  using Paths = std::vector<LanePath>;
  // One address published: the pair's path alone.
  CHECK(same(lane_paths({"10.0.0.5:4100"}, primary, mine, route), Paths{{"", "10.0.0.5:4100"}}));
  // Its second NIC, reached from ours; its private bridge (an address of
  // this host too), one the default route reaches, one from an address
  // that is not a lane's, one without a route and one malformed: left out.
  CHECK(same(lane_paths({"10.0.0.5:4100", "172.17.0.1:4101", "10.1.0.5:4102", "192.168.7.5:4103",
                         "10.2.0.5:4104", "10.3.0.5:4105", "no port"},
                        primary, mine, route),
             Paths{{"", "10.0.0.5:4100"}, {"10.1.0.4", "10.1.0.5:4102"}}));
  // Two of its addresses reached from the same interface of ours: one path.
  CHECK(same(lane_paths({"10.0.0.5:4100", "10.1.0.5:4102", "10.1.0.6:4103"}, primary, mine, route),
             Paths{{"", "10.0.0.5:4100"}, {"10.1.0.4", "10.1.0.5:4102"}}));
  // A rank with no lane address of its own uses none of the peer's.
  CHECK(same(lane_paths({"10.0.0.5:4100", "10.1.0.5:4102"}, primary, {}, route),
             Paths{{"", "10.0.0.5:4100"}}));
  CHECK(lane_paths({}, primary, mine, route).empty());
  // Lanes 1, 2, 3, ... take the paths in turn.
  CHECK(path_of_lane(1, 2) == 0);
  CHECK(path_of_lane(2, 2) == 1);
  CHECK(path_of_lane(3, 2) == 0);
  CHECK(path_of_lane(4, 2) == 1);
  CHECK(path_of_lane(5, 1) == 0);
}

TEST_CASE("lanes over two NICs: half leave from the second, and messages arrive whole both ways",
          "[mesh][lanes][nics][multihost]") {
  NetworkNamespaces hosts(2, 2);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  TwoNicRanks job(hosts, 4);
  CHECK_THAT(job.meshes[0]->describe(),
             ContainsSubstring("lanes also from " + NetworkNamespaces::address(0, 1)));
  for (const std::size_t n : {std::size_t{1}, std::size_t{(8 << 20) + 3}, std::size_t{(1 << 20)}})
    CHECK(job.exchange(n) == "");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << job.meshes[static_cast<std::size_t>(r)]->describe_lanes(1 - r));
    const auto [first_bytes, first_lanes] = job.carried(r, "");
    const auto [second_bytes, second_lanes] = job.carried(r, NetworkNamespaces::address(r, 1));
    CHECK(first_lanes == 2);
    CHECK(second_lanes == 2);
    CHECK(first_bytes > 0);
    CHECK(second_bytes > 0);
    CHECK(first_bytes + second_bytes == (std::uint64_t{8} << 20) + 3 + (1 << 20));
    CHECK_THAT(job.meshes[static_cast<std::size_t>(r)]->describe_lanes(1 - r),
               ContainsSubstring("lane 2 from " + NetworkNamespaces::address(r, 1)));
  }
}

TEST_CASE("lanes over two NICs: a dead second link leaves the lanes to the first",
          "[mesh][lanes][nics][multihost]") {
  NetworkNamespaces hosts(2, 2);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  REQUIRE(hosts.cut(1, 1));  // host 1's second link: silent, no error on either side
  TwoNicRanks job(hosts, 2);
  CHECK(job.exchange((4 << 20) + 1) == "");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << job.meshes[static_cast<std::size_t>(r)]->describe_lanes(1 - r));
    CHECK(job.carried(r, "") == std::pair<std::uint64_t, int>{(4 << 20) + 1, 2});
  }
}

TEST_CASE(
    "lanes over two NICs: a second link cut mid-transfer loses its lanes, not the pair, "
    "and every message arrives whole",
    "[mesh][lanes][nics][multihost]") {
  NetworkNamespaces hosts(2, 2);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  // Slow enough that the cut lands while chunks are on their way.
  for (int i = 0; i < 2; ++i)
    for (int link = 0; link < 2; ++link)
      if (!hosts.shape(i, "100mbit", link)) {
        WARN("skipped: " << hosts.why());
        return;
      }
  TwoNicRanks job(hosts, 4);
  std::atomic<int> arrived{0};
  auto run =
      std::async(std::launch::async, [&] { return job.exchange((4 << 20) + 7, 10, &arrived); });
  // Once two messages are in, host 1's second link goes silent.
  REQUIRE(eventually([&] { return arrived.load() >= 2; }, 120s));
  REQUIRE(hosts.cut(1, 1));
  CHECK(run.get() == "");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << job.meshes[static_cast<std::size_t>(r)]->describe_lanes(1 - r));
    // The cut link's two lanes lost, and opened again over the first link.
    int lost = 0, open = 0, reopened = 0;
    for (const auto& l : job.meshes[static_cast<std::size_t>(r)]->lanes(1 - r)) {
      if (!l.sending) continue;
      if (l.lost) {
        ++lost;
        CHECK(l.from == NetworkNamespaces::address(r, 1));  // only the cut link's
      } else {
        ++open;
        if ((l.number == 2 || l.number == 4) && l.from.empty()) ++reopened;
      }
    }
    CHECK(lost == 2);
    CHECK(open == 4);
    CHECK(reopened == 2);
  }
}
