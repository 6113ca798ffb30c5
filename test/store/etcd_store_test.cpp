// The etcd store against a real etcd (Debian's etcd-server): every call of
// the Store interface with its edge cases, the lease, TLS with client
// certificates, and a cluster of three that loses one member, then its
// quorum. Skips, saying why, where etcd is not installed.
#include <atomic>
#include <future>
#include <thread>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/store/etcd_store.hpp>
#include <collie/store/prefix_store.hpp>

#include "support/etcd_cluster.hpp"
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using collie::store::EtcdStore;
using collie::test::EtcdCluster;

namespace {

// One member on loopback for every section of a case (etcd takes a second
// or two to elect itself); each section works under a prefix of its own.
EtcdCluster& one_member() {
  static collie::test::ScratchDir dir;
  static EtcdCluster cluster(dir, EtcdCluster::on_loopback());
  return cluster;
}

std::string fresh_prefix() {
  static std::atomic<int> n{0};
  return "/collie/test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "/";
}

std::unique_ptr<EtcdStore> store_on(const EtcdCluster& etcd, const std::string& prefix,
                                    std::chrono::milliseconds timeout = 30s) {
  auto o = etcd.store_options(prefix);
  o.timeout = timeout;
  return std::make_unique<EtcdStore>(o);
}

}  // namespace

TEST_CASE("etcd store: every call of the Store interface", "[etcd]") {
  auto& etcd = one_member();
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  const auto prefix = fresh_prefix();
  auto s = store_on(etcd, prefix);

  SECTION("set, get, try_get; binary keys and values, empty ones") {
    s->set("k", "v1");
    CHECK(s->get("k") == "v1");
    s->set("k", "v2");
    CHECK(s->get("k") == "v2");
    std::string binary;
    for (int i = 0; i < 256; ++i)
      binary.push_back(static_cast<char>(i));
    const std::string binary_key("\0key\xff", 5);
    s->set(binary_key, binary);
    s->set("", "value of the empty key");
    s->set("empty", "");
    CHECK(s->get(binary_key) == binary);
    CHECK(s->get("") == "value of the empty key");
    CHECK(s->try_get("empty") == std::optional<std::string>(""));
    CHECK(s->try_get("missing") == std::nullopt);
    CHECK(s->num_keys() == 4);
  }

  SECTION("get waits for a set from another store, and times out naming the key") {
    auto other = store_on(etcd, prefix);
    auto got = std::async(std::launch::async, [&] { return s->get("later"); });
    CHECK(got.wait_for(100ms) == std::future_status::timeout);
    other->set("later", "here");
    CHECK(got.get() == "here");
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(s->get("never", 300ms), collie::TimeoutError);
    CHECK_THROWS_WITH(s->get("never", 300ms), ContainsSubstring("'never'") && ContainsSubstring("etcd"));
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  }

  SECTION("add counts from zero, both ways, as decimal text; refuses what is not a number") {
    CHECK(s->add("n", 5) == 5);
    CHECK(s->add("n", -7) == -2);
    CHECK(s->get("n") == "-2");
    s->set("text", "abc");
    CHECK_THROWS_AS(s->add("text", 1), collie::RequestError);
    s->set("big", std::to_string(INT64_MAX));
    CHECK_THROWS_AS(s->add("big", 1), collie::RequestError);
    CHECK(s->get("big") == std::to_string(INT64_MAX));
  }

  SECTION("adds from many threads and stores are atomic") {
    constexpr int kThreads = 4, kEach = 25;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto mine = t % 2 == 0 ? store_on(etcd, prefix) : nullptr;
        for (int i = 0; i < kEach; ++i)
          (mine ? *mine : *s).add("count", 1);
      });
    }
    for (auto& t : threads)
      t.join();
    CHECK(s->get("count") == std::to_string(kThreads * kEach));
  }

  SECTION("compare_set swaps only on a match; a missing key matches empty") {
    auto r = s->compare_set("c", "", "first");
    CHECK(r.swapped);
    CHECK(r.current == std::optional<std::string>("first"));
    r = s->compare_set("c", "", "second");
    CHECK_FALSE(r.swapped);
    CHECK(r.current == std::optional<std::string>("first"));
    r = s->compare_set("c", "first", "second");
    CHECK(r.swapped);
    CHECK(s->get("c") == "second");
    r = s->compare_set("absent", "something", "x");
    CHECK_FALSE(r.swapped);
    CHECK(r.current == std::nullopt);
    CHECK_FALSE(s->check({"absent"}));
    s->set("blank", "");
    r = s->compare_set("blank", "", "filled");
    CHECK(r.swapped);
  }

  SECTION("wait, check, multi_get wait for every key; wait's timeout names the missing ones") {
    s->set("a", "1");
    CHECK(s->check({"a"}));
    CHECK_FALSE(s->check({"a", "b"}));
    auto other = store_on(etcd, prefix);
    auto waited = std::async(std::launch::async, [&] { s->wait({"a", "b", "c"}); });
    auto values = std::async(std::launch::async, [&] { return s->multi_get({"c", "a", "b"}); });
    other->set("b", "2");
    CHECK(waited.wait_for(100ms) == std::future_status::timeout);
    other->set("c", "3");
    waited.get();
    CHECK(values.get() == std::vector<std::string>{"3", "1", "2"});
    CHECK_THROWS_WITH(s->wait({"a", "x", "y"}, 300ms),
                      ContainsSubstring("'x', 'y'") && ContainsSubstring("timed out"));
  }

  SECTION("delete says whether the key was there") {
    s->set("d", "v");
    CHECK(s->delete_key("d"));
    CHECK_FALSE(s->delete_key("d"));
    CHECK(s->try_get("d") == std::nullopt);
  }

  SECTION("count_keys and list_keys see this prefix's keys only, in byte order") {
    auto neighbour = store_on(etcd, fresh_prefix());
    neighbour->set("a/1", "elsewhere");
    for (const auto* k : {"a/2", "a/1", "b", "a/\xff"})
      s->set(k, "v");
    CHECK(s->count_keys("a/") == 3);
    CHECK(s->list_keys("a/") == std::vector<std::string>{"a/1", "a/2", "a/\xff"});
    CHECK(s->list_keys("") == std::vector<std::string>{"a/1", "a/2", "a/\xff", "b"});
    CHECK(neighbour->num_keys() == 1);
    CHECK(s->count_keys("zzz") == 0);
  }

  SECTION("multi_set is seen whole, also beyond etcd's 128 operations") {
    std::vector<std::string> keys, values;
    for (int i = 0; i < 300; ++i) {
      keys.push_back("m/" + std::to_string(i));
      values.push_back(std::string(static_cast<std::size_t>(i), static_cast<char>('a' + i % 26)));
    }
    s->multi_set(keys, values);
    CHECK(s->multi_get(keys) == values);
    CHECK(s->count_keys("m/") == 300);
    CHECK_THROWS_AS(s->multi_set(std::vector<std::string>{"x"}, std::vector<std::string>{}),
                    collie::ArgumentError);
  }

  SECTION("append creates, then extends") {
    s->append("log", "one");
    s->append("log", ",two");
    CHECK(s->get("log") == "one,two");
  }

  SECTION("values up to etcd's request size pass; one over is refused before sending") {
    std::string big(1u << 20, 'x');
    big.front() = 'a';
    big.back() = 'z';
    s->set("big", big);
    CHECK(s->get("big") == big);
    CHECK_THROWS_WITH(s->set("big", std::string(2u << 20, 'y')),
                      ContainsSubstring("max-request-bytes"));
    CHECK(s->get("big") == big);
  }

  SECTION("barrier: n of 1 passes, 0 is refused, n callers go together, and again") {
    s->barrier("one", 1);
    CHECK_THROWS_AS(s->barrier("zero", 0), collie::RequestError);
    constexpr int kCallers = 4;
    for (int round = 0; round < 3; ++round) {
      std::atomic<int> entered{0}, left{0}, early{0};
      std::vector<std::thread> callers;
      for (int c = 0; c < kCallers; ++c) {
        callers.emplace_back([&] {
          auto mine = store_on(etcd, prefix);
          entered++;
          mine->barrier("b", kCallers);
          // Nobody leaves before everybody entered (checked in this
          // thread: Catch's assertions are the test thread's alone).
          if (entered.load() != kCallers) early++;
          left++;
        });
      }
      for (auto& t : callers)
        t.join();
      CHECK(early.load() == 0);
      CHECK(left.load() == kCallers);
    }
  }

  SECTION("a barrier caller that times out is taken back out of the count") {
    CHECK_THROWS_AS(s->barrier("t", 2, 300ms), collie::TimeoutError);
    // Had it stayed counted, this pair would be let through by one caller.
    auto other = store_on(etcd, prefix);
    auto first = std::async(std::launch::async, [&] { other->barrier("t", 2); });
    CHECK(first.wait_for(300ms) == std::future_status::timeout);
    s->barrier("t", 2);
    first.get();
  }

  SECTION("a barrier entered with another n is refused, naming both") {
    auto other = store_on(etcd, prefix);
    auto waiting = std::async(std::launch::async, [&] { other->barrier("mix", 3, 5s); });
    // Whichever of the two comes second is refused; until the other is
    // in, this one times out alone (and leaves).
    bool refused_here = false;
    REQUIRE(collie::test::eventually(
        [&] {
          if (waiting.wait_for(0ms) == std::future_status::ready) return true;
          try {
            s->barrier("mix", 2, 200ms);
          } catch (const collie::RequestError& e) {
            CHECK_THAT(e.what(), ContainsSubstring("n=2") && ContainsSubstring("n=3"));
            refused_here = true;
            return true;
          } catch (const collie::TimeoutError&) {
          }
          return false;
        },
        30s));
    // The other was refused too (both in before either counted), or timed out.
    try {
      waiting.get();
      FAIL("a barrier of 3 passed with 2 callers");
    } catch (const collie::RequestError& e) {
      CHECK_THAT(e.what(), ContainsSubstring("n=2") && ContainsSubstring("n=3"));
    } catch (const collie::TimeoutError&) {
      CHECK(refused_here);
    }
  }

  SECTION("a prefix view works over it") {
    collie::store::PrefixStore view(std::shared_ptr<EtcdStore>(store_on(etcd, prefix)), "job");
    view.set("x", "1");
    CHECK(s->get("job/x") == "1");
    CHECK(view.add("n", 2) == 2);
  }
}

TEST_CASE("etcd store: a key put with the lease vanishes with its store", "[etcd]") {
  auto& etcd = one_member();
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  const auto prefix = fresh_prefix();
  auto s = store_on(etcd, prefix);
  {
    auto owner = store_on(etcd, prefix);
    owner->put_with_lease("alive/0", "yes");
    owner->set("kept", "yes");
    CHECK(s->get("alive/0") == "yes");
  }
  CHECK(s->try_get("alive/0") == std::nullopt);
  CHECK(s->get("kept") == "yes");
}

TEST_CASE("etcd store: options that cannot work are refused, saying why", "[etcd]") {
  collie::store::EtcdOptions o;
  CHECK_THROWS_WITH(EtcdStore(o), ContainsSubstring("no endpoint"));
  o.endpoints = {"127.0.0.1:2379"};
  CHECK_THROWS_WITH(EtcdStore(o), ContainsSubstring("client certificate") &&
                                      ContainsSubstring("--insecure"));
  o.endpoints = {"http://127.0.0.1:2379"};
  CHECK_THROWS_WITH(EtcdStore(o), ContainsSubstring("plain HTTP"));
  o.insecure = true;
  o.prefix = "/no-slash";
  CHECK_THROWS_WITH(EtcdStore(o), ContainsSubstring("must end in '/'"));
  CHECK_THROWS_AS(collie::store::parse_etcd_endpoints("a:1,,b:2"), collie::ArgumentError);
  CHECK_THROWS_WITH(collie::store::parse_etcd_endpoints("a:1,b"), ContainsSubstring("'b'"));
  CHECK(collie::store::parse_etcd_endpoints("a:1, https://b:2/,[::1]:3") ==
        std::vector<std::string>{"a:1", "https://b:2/", "[::1]:3"});
}

TEST_CASE("etcd store: no member to reach fails at the timeout, naming the members",
          "[etcd]") {
  collie::test::RefusingPort nobody;
  collie::store::EtcdOptions o;
  o.endpoints = {nobody.addr()};
  o.insecure = true;
  o.timeout = 500ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    EtcdStore s(o);
    FAIL("a store on nothing");
  } catch (const collie::ConnectionError& e) {
    CHECK_THAT(e.what(), ContainsSubstring(nobody.addr()) && ContainsSubstring("quorum"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("etcd store: TLS with client certificates, and a stranger's certificate is refused",
          "[etcd]") {
  collie::test::ScratchDir dir;
  EtcdCluster etcd(dir, EtcdCluster::on_loopback(1, /*tls=*/true));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  auto s = store_on(etcd, "/collie/tls/");
  s->set("secret", "42");
  CHECK(s->get("secret") == "42");

  auto o = etcd.store_options("/collie/tls/");
  o.timeout = 2s;
  o.tls = etcd.stranger_tls();
  CHECK_THROWS_AS(EtcdStore(o), collie::Error);
  // Without a certificate at all, even when told to go without TLS.
  o.tls = {};
  o.insecure = true;
  CHECK_THROWS_AS(EtcdStore(o), collie::Error);
  CHECK(s->get("secret") == "42");
}

TEST_CASE("etcd store: three members lose one unnoticed, then the quorum with an error",
          "[etcd]") {
  collie::test::ScratchDir dir;
  EtcdCluster etcd(dir, EtcdCluster::on_loopback(3));
  if (!etcd.ok()) {
    WARN("skipped: " << etcd.why());
    return;
  }
  auto s = store_on(etcd, "/collie/three/", 5s);
  s->set("before", "1");
  for (int member = 0; member < 3; ++member) {
    etcd.stop(member);
    // Every kind of call goes on, through the two others.
    CHECK(s->add("count", 1) == member + 1);
    CHECK(s->get("before") == "1");
    s->barrier("b" + std::to_string(member), 1);
    REQUIRE(etcd.start(member));
  }
  etcd.stop(0);
  etcd.stop(1);
  const auto start = std::chrono::steady_clock::now();
  try {
    s->set("after", "2", 2s);
    FAIL("a write without a quorum");
  } catch (const collie::ConnectionError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("no quorum") && ContainsSubstring(etcd.endpoints()[2]) &&
                             ContainsSubstring(etcd.endpoints()[0]));
  }
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  // A call that waits (a watch) ends the same way: nothing hangs.
  const auto waited = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(s->get("never", 2s), ContainsSubstring("no quorum"));
  CHECK(std::chrono::steady_clock::now() - waited < 4s);
}
