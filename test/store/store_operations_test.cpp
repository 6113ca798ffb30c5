// Every store operation through a real server and client, with its edge cases.
#include <future>
#include <thread>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/store/prefix_store.hpp>

#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using collie::store::StoreClient;
using collie::test::StoreFixture;

TEST_CASE("set then get returns the value, and set again replaces it", "[store]") {
  StoreFixture f;
  auto c = f.client();
  c->set("k", "v1");
  CHECK(c->get("k") == "v1");
  c->set("k", "v2");
  CHECK(c->get("k") == "v2");
  CHECK(c->num_keys() == 1);
}

TEST_CASE("empty keys, empty values and binary bytes are kept exactly", "[store]") {
  StoreFixture f;
  auto c = f.client();
  c->set("", "value of the empty key");
  c->set("empty", "");
  std::string binary;
  for (int i = 0; i < 256; ++i)
    binary.push_back(static_cast<char>(i));
  const std::string binary_key("\0key\xff", 5);
  c->set(binary_key, binary);
  CHECK(c->get("") == "value of the empty key");
  CHECK(c->get("empty").empty());
  CHECK(c->get(binary_key) == binary);
  CHECK(c->try_get("empty") == std::optional<std::string>(""));
  CHECK(c->num_keys() == 3);
}

TEST_CASE("values at the limit pass, one byte over fails, and the client stays usable", "[store][volume]") {
  StoreFixture f;
  auto c = f.client();
  const auto limits = c->limits();
  std::string at_limit(limits.max_value_bytes, 'x');
  at_limit.front() = 'a';
  at_limit.back() = 'z';
  c->set("big", at_limit);
  CHECK(c->get("big") == at_limit);

  const std::string over(limits.max_value_bytes + 1, 'y');
  CHECK_THROWS_AS(c->set("big", over), collie::RequestError);
  CHECK_THROWS_WITH(c->set("big", over), ContainsSubstring("exceeds the store's limit"));
  const std::string long_key(limits.max_key_bytes + 1, 'k');
  CHECK_THROWS_AS(c->set(long_key, "v"), collie::RequestError);
  const std::string key_at_limit(limits.max_key_bytes, 'k');
  c->set(key_at_limit, "fits");
  CHECK(c->get(key_at_limit) == "fits");
  // Appending past the limit is refused by the server.
  CHECK_THROWS_AS(c->append("big", "!"), collie::RequestError);
  CHECK(c->get("big") == at_limit);
}

TEST_CASE("get waits for a set from another client", "[store]") {
  StoreFixture f;
  auto waiter = f.client();
  auto writer = f.client();
  // The set comes once the get is parked at the server.
  auto later = std::async(std::launch::async, [&] {
    const bool parked = f.blocked(1);
    writer->set("late", "here");
    return parked;
  });
  CHECK(waiter->get("late", 10s) == "here");
  CHECK(later.get());
}

TEST_CASE("a timed-out get leaves the connection clean for the next call", "[store][timeout]") {
  StoreFixture f;
  auto c = f.client();
  auto other = f.client();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c->get("missing", 200ms), collie::TimeoutError);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 200ms);
  CHECK(took < 5s);
  CHECK_THROWS_WITH(c->get("missing", 100ms), ContainsSubstring("get('missing')") &&
                                                  ContainsSubstring("timed out after 100 ms") &&
                                                  ContainsSubstring(c->address()));
  // The abandoned gets were cancelled on the server: setting the key now
  // must not deliver a stale reply to the next call.
  other->set("missing", "stale");
  other->set("fresh", "right");
  CHECK(c->get("fresh") == "right");
  CHECK(c->try_get("missing") == std::optional<std::string>("stale"));
  CHECK(c->add("n", 1) == 1);
}

TEST_CASE("try_get answers at once", "[store]") {
  StoreFixture f;
  auto c = f.client();
  CHECK_FALSE(c->try_get("nope").has_value());
  c->set("yes", "1");
  CHECK(c->try_get("yes") == std::optional<std::string>("1"));
}

TEST_CASE("add counts atomically, from zero, both ways, as decimal text", "[store]") {
  StoreFixture f;
  auto c = f.client();
  CHECK(c->add("n", 5) == 5);
  CHECK(c->add("n", -8) == -3);
  CHECK(c->add("n", 0) == -3);
  CHECK(c->get("n") == "-3");
  c->set("text", "hello");
  CHECK_THROWS_AS(c->add("text", 1), collie::RequestError);
  CHECK_THROWS_WITH(c->add("text", 1), ContainsSubstring("not a decimal int64"));
  c->set("max", std::to_string(INT64_MAX));
  CHECK_THROWS_WITH(c->add("max", 1), ContainsSubstring("overflows"));
  CHECK(c->get("max") == std::to_string(INT64_MAX));
  CHECK(c->add("min", INT64_MIN) == INT64_MIN);
}

TEST_CASE("compare_set swaps only on a match, and a missing key matches empty", "[store]") {
  StoreFixture f;
  auto c = f.client();
  auto r = c->compare_set("k", "something", "new");
  CHECK_FALSE(r.swapped);
  CHECK_FALSE(r.current.has_value());
  CHECK_FALSE(c->try_get("k").has_value());

  r = c->compare_set("k", "", "first");
  CHECK(r.swapped);
  CHECK(r.current == std::optional<std::string>("first"));

  r = c->compare_set("k", "", "second");
  CHECK_FALSE(r.swapped);
  CHECK(r.current == std::optional<std::string>("first"));

  r = c->compare_set("k", "first", "third");
  CHECK(r.swapped);
  CHECK(c->get("k") == "third");
}

TEST_CASE("compare_set wakes a get waiting on the key", "[store]") {
  StoreFixture f;
  auto waiter = f.client();
  auto writer = f.client();
  auto later = std::async(std::launch::async, [&] {
    const bool parked = f.blocked(1);
    writer->compare_set("cas", "", "made");
    return parked;
  });
  CHECK(waiter->get("cas", 10s) == "made");
  CHECK(later.get());
}

TEST_CASE("wait returns when every key exists, and times out naming them", "[store][timeout]") {
  StoreFixture f;
  auto c = f.client();
  auto writer = f.client();
  c->wait(std::vector<std::string>{});
  // Each key once the wait is parked, waiting for it.
  auto later = std::async(std::launch::async, [&] {
    const bool parked = f.blocked(1);
    writer->set("a", "1");
    writer->set("b", "2");
    return parked;
  });
  c->wait({"a", "b"}, 10s);
  CHECK(later.get());
  CHECK_THROWS_AS(c->wait({"a", "b", "c"}, 150ms), collie::TimeoutError);
  CHECK_THROWS_WITH(c->wait({"a", "zz"}, 100ms), ContainsSubstring("wait(['a', 'zz'])"));
}

TEST_CASE("check tells whether every key exists now", "[store]") {
  StoreFixture f;
  auto c = f.client();
  CHECK(c->check(std::vector<std::string>{}));
  CHECK_FALSE(c->check({"a"}));
  c->set("a", "");
  CHECK(c->check({"a"}));
  CHECK_FALSE(c->check({"a", "b"}));
}

TEST_CASE("delete removes a key and says whether it was there", "[store]") {
  StoreFixture f;
  auto c = f.client();
  c->set("k", "v");
  CHECK(c->delete_key("k"));
  CHECK_FALSE(c->delete_key("k"));
  CHECK_FALSE(c->try_get("k").has_value());
  CHECK(c->num_keys() == 0);
}

TEST_CASE("num_keys, count_keys and list_keys see the same keys", "[store]") {
  StoreFixture f;
  auto c = f.client();
  CHECK(c->num_keys() == 0);
  CHECK(c->list_keys("").empty());
  for (const char* k : {"job/b", "job/a", "jobs", "other"})
    c->set(k, "x");
  CHECK(c->num_keys() == 4);
  CHECK(c->count_keys("job") == 3);
  CHECK(c->count_keys("job/") == 2);
  CHECK(c->list_keys("job/") == std::vector<std::string>{"job/a", "job/b"});
  CHECK(c->list_keys("") == std::vector<std::string>{"job/a", "job/b", "jobs", "other"});
  CHECK(c->count_keys("zzz") == 0);
}

TEST_CASE("multi_set then multi_get, and multi_get waits for all", "[store]") {
  StoreFixture f;
  auto c = f.client();
  auto writer = f.client();
  CHECK(c->multi_get(std::vector<std::string>{}).empty());
  c->multi_set({"a", "b", "c"}, {"1", "", "3"});
  CHECK(c->multi_get({"c", "a", "b"}) == std::vector<std::string>{"3", "1", ""});
  auto later = std::async(std::launch::async, [&] {
    const bool parked = f.blocked(1);
    writer->multi_set({"x", "y"}, {"10", "20"});
    return parked;
  });
  CHECK(c->multi_get({"a", "x", "y"}, 10s) == std::vector<std::string>{"1", "10", "20"});
  CHECK(later.get());
  CHECK_THROWS_AS(c->multi_set({"a", "b"}, {"1"}), collie::ArgumentError);
  CHECK_THROWS_AS(c->multi_get({"a", "never"}, 100ms), collie::TimeoutError);
}

TEST_CASE("append creates, then extends", "[store]") {
  StoreFixture f;
  auto c = f.client();
  c->append("log", "a");
  c->append("log", "");
  c->append("log", std::string("\0b", 2));
  CHECK(c->get("log") == std::string("a\0b", 3));
}

TEST_CASE("barrier: n of 1 passes, n of 0 is refused, a mismatch names both", "[store]") {
  StoreFixture f;
  auto a = f.client();
  auto b = f.client();
  a->barrier("solo", 1);
  CHECK_THROWS_AS(a->barrier("zero", 0), collie::RequestError);
  auto first = std::async(std::launch::async, [&] { a->barrier("mixed", 3, 2s); });
  REQUIRE(f.blocked(1));
  CHECK_THROWS_WITH(b->barrier("mixed", 2, 5s), ContainsSubstring("n=2") && ContainsSubstring("n=3"));
  CHECK_THROWS_AS(first.get(), collie::TimeoutError);
}

TEST_CASE("a barrier caller that times out is taken back out of the count", "[store][timeout]") {
  StoreFixture f;
  auto early = f.client();
  CHECK_THROWS_AS(early->barrier("b", 2, 100ms), collie::TimeoutError);
  // Had the timed-out arrival stayed, this single caller would pass.
  auto late = f.client();
  CHECK_THROWS_AS(late->barrier("b", 2, 200ms), collie::TimeoutError);
  auto other = std::async(std::launch::async, [&] { early->barrier("b", 2, 10s); });
  late->barrier("b", 2, 10s);
  other.get();
}

TEST_CASE("per-call timeouts override the client default", "[store][timeout]") {
  StoreFixture f;
  collie::store::ClientOptions options;
  options.timeout = 150ms;
  auto c = f.client(options);
  CHECK(c->timeout() == 150ms);
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c->get("x"), collie::TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  c->set_timeout(300ms);
  CHECK_THROWS_WITH(c->get("x"), ContainsSubstring("300 ms"));
  CHECK_THROWS_WITH(c->get("x", 50ms), ContainsSubstring("50 ms"));
  CHECK_THROWS_AS(c->get("x", 0ms), collie::ArgumentError);
}

TEST_CASE("ping measures a round trip", "[store]") {
  StoreFixture f;
  auto c = f.client();
  const auto rtt = c->ping();
  CHECK(rtt > std::chrono::nanoseconds(0));
  CHECK(rtt < 5s);
}

TEST_CASE("prefix stores are isolated from each other and from the root", "[store][prefix]") {
  StoreFixture f;
  std::shared_ptr<collie::store::Store> root = f.shared_client();
  collie::store::PrefixStore a(root, "a");
  collie::store::PrefixStore b(root, "b");
  a.set("k", "in a");
  b.set("k", "in b");
  root->set("k", "in root");
  CHECK(a.get("k") == "in a");
  CHECK(b.get("k") == "in b");
  CHECK(root->get("a/k") == "in a");
  CHECK(a.num_keys() == 1);
  CHECK(root->num_keys() == 3);
  CHECK(a.list_keys("") == std::vector<std::string>{"k"});
  CHECK(a.add("n", 2) == 2);
  CHECK_FALSE(b.try_get("n").has_value());
  CHECK(b.compare_set("n", "", "b's").swapped);
  CHECK(a.get("n") == "2");
  a.multi_set({"x", "y"}, {"1", "2"});
  CHECK(a.multi_get({"x", "y"}) == std::vector<std::string>{"1", "2"});
  CHECK(a.check({"x", "y"}));
  CHECK_FALSE(b.check({"x"}));
  a.wait({"x"});
  CHECK_THROWS_AS(b.wait({"x"}, 100ms), collie::TimeoutError);
  a.append("x", "+");
  CHECK(root->get("a/x") == "1+");
  CHECK(a.delete_key("x"));
  CHECK(root->try_get("a/x") == std::nullopt);
  CHECK(a.count_keys("y") == 1);
  CHECK(b.count_keys("y") == 0);
  CHECK(a.timeout() == root->timeout());

  // Nested views compose their prefixes; barriers are namespaced too.
  auto a_shared = std::make_shared<collie::store::PrefixStore>(root, "a");
  collie::store::PrefixStore inner(a_shared, "inner");
  inner.set("deep", "1");
  CHECK(root->get("a/inner/deep") == "1");
  CHECK(inner.num_keys() == 1);
  CHECK(a_shared->num_keys() == 4);  // k, n, y, inner/deep
  auto a2 = f.client();
  collie::store::PrefixStore b2(std::shared_ptr<collie::store::Store>(std::move(a2)), "b");
  auto other = std::async(std::launch::async, [&] { b2.barrier("bar", 2, 200ms); });
  CHECK_THROWS_AS(a.barrier("bar", 2, 200ms), collie::TimeoutError);
  CHECK_THROWS_AS(other.get(), collie::TimeoutError);
  CHECK_THROWS_AS(collie::store::PrefixStore(nullptr, "x"), collie::ArgumentError);
}
