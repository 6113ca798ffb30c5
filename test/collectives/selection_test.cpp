// The selection rules' grammar alone (collectives/selection.hpp): what each
// rule covers, the first covering rule deciding, Auto in the gaps, the map,
// and every refusal naming the token it cannot read.
#include <algorithm>
#include <limits>
#include <string>

#include <collie/collectives/cost.hpp>
#include <collie/collectives/selection.hpp>
#include <collie/environment.hpp>
#include <collie/error.hpp>

#include "support/catch.hpp"

using namespace collie::collectives;

namespace {

constexpr auto kNoEnd = std::numeric_limits<std::size_t>::max();

// The error parse_selection throws for `text`, or "" when it reads it.
std::string refusal(const std::string& text) {
  try {
    (void)parse_selection(text, "COLLIE_ALGO");
  } catch (const collie::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("selection: a rule with no range covers every size and every group", "[selection]") {
  const auto rules = parse_selection("all_reduce:ring,broadcast:tree", "COLLIE_ALGO");
  REQUIRE(rules.size() == 2);
  CHECK(rules[0].collective == Collective::AllReduce);
  CHECK(rules[0].algorithm == Algorithm::Ring);
  CHECK(rules[0].min_bytes == 0);
  CHECK(rules[0].max_bytes == kNoEnd);
  CHECK(rules[1].collective == Collective::Broadcast);
  CHECK(rules[1].algorithm == Algorithm::Tree);
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{1} << 40, kNoEnd})
    for (const int ranks : {1, 2, 1000}) {
      REQUIRE(rule_for(rules, Collective::AllReduce, bytes, ranks) == &rules[0]);
      REQUIRE(rule_for(rules, Collective::Broadcast, bytes, ranks) == &rules[1]);
      REQUIRE(rule_for(rules, Collective::Reduce, bytes, ranks) == nullptr);
    }
}

TEST_CASE("selection: sizes are LOW in, HIGH out, with K, M and G, and may have no end",
          "[selection]") {
  const auto rules = parse_selection(
      "all_reduce:recursive_doubling:0-64K,all_reduce:halving_doubling:64k-1M,"
      "all_reduce:ring:1M-,all_gather:ring:3-5",
      "COLLIE_ALGO");
  REQUIRE(rules.size() == 4);
  CHECK(rules[0].max_bytes == 65536);
  CHECK(rules[1].min_bytes == 65536);
  CHECK(rules[1].max_bytes == 1048576);
  CHECK(rules[2].min_bytes == 1048576);
  CHECK(rules[2].max_bytes == kNoEnd);
  const auto chosen = [&](Collective c, std::size_t bytes) {
    const auto* rule = rule_for(rules, c, bytes, 4);
    return rule ? rule->algorithm : Algorithm::Auto;
  };
  CHECK(chosen(Collective::AllReduce, 0) == Algorithm::RecursiveDoubling);
  CHECK(chosen(Collective::AllReduce, 65535) == Algorithm::RecursiveDoubling);
  CHECK(chosen(Collective::AllReduce, 65536) == Algorithm::HalvingDoubling);
  CHECK(chosen(Collective::AllReduce, 1048575) == Algorithm::HalvingDoubling);
  CHECK(chosen(Collective::AllReduce, 1048576) == Algorithm::Ring);
  CHECK(chosen(Collective::AllReduce, std::size_t{1} << 40) == Algorithm::Ring);
  CHECK(chosen(Collective::AllGather, 2) == Algorithm::Auto);
  CHECK(chosen(Collective::AllGather, 3) == Algorithm::Ring);
  CHECK(chosen(Collective::AllGather, 4) == Algorithm::Ring);
  CHECK(chosen(Collective::AllGather, 5) == Algorithm::Auto);
  const auto g = parse_selection("all_reduce:tree:1G-2G", "x");
  CHECK(g[0].min_bytes == std::size_t{1} << 30);
  CHECK(g[0].max_bytes == std::size_t{2} << 30);
}

TEST_CASE("selection: ranks ranges hold both ends, and the first covering rule decides",
          "[selection]") {
  const auto rules = parse_selection(
      "all_reduce:tree:ranks=2-8,all_reduce:auto:0-1K,all_reduce:ring:ranks=9-,"
      "all_reduce:halving_doubling",
      "COLLIE_ALGO");
  REQUIRE(rules.size() == 4);
  const auto chosen = [&](std::size_t bytes, int ranks) {
    return rule_for(rules, Collective::AllReduce, bytes, ranks)->algorithm;
  };
  CHECK(chosen(1 << 20, 2) == Algorithm::Tree);
  CHECK(chosen(1 << 20, 8) == Algorithm::Tree);
  CHECK(chosen(100, 9) == Algorithm::Auto);  // the second rule, before the third
  CHECK(chosen(1 << 20, 9) == Algorithm::Ring);
  CHECK(chosen(1 << 20, 500) == Algorithm::Ring);
  CHECK(chosen(1 << 20, 1) == Algorithm::HalvingDoubling);
  const auto one = parse_selection("broadcast:ring:ranks=3", "x");
  CHECK(one[0].min_ranks == 3);
  CHECK(one[0].max_ranks == 3);
  // Names as parse_collective and parse_algorithm take them.
  const auto spelled = parse_selection("All-Reduce:Recursive-Doubling", "x");
  CHECK(spelled[0].collective == Collective::AllReduce);
  CHECK(spelled[0].algorithm == Algorithm::RecursiveDoubling);
  CHECK(parse_selection("", "x").empty());
  CHECK(parse_selection(",,all_reduce:ring,", "x").size() == 1);
}

TEST_CASE("selection: every token it cannot read is refused by name", "[selection]") {
  CHECK(refusal("all_reduce") ==
        "COLLIE_ALGO: 'all_reduce' is not a rule: rules are "
        "COLLECTIVE:ALGORITHM[:LOW-HIGH bytes][:ranks=LOW-HIGH], for example "
        "all_reduce:recursive_doubling:0-64K,all_reduce:ring:64K-");
  CHECK(refusal("all_redux:ring")
            .rfind("COLLIE_ALGO: in 'all_redux:ring', 'all_redux' is no collective; collectives: "
                   "broadcast, reduce, all_reduce,",
                   0) == 0);
  CHECK(refusal("broadcast:ring_of_fire:0-4K") ==
        "COLLIE_ALGO: in 'broadcast:ring_of_fire:0-4K': broadcast has no algorithm "
        "'ring_of_fire'; it has: auto, tree, ring, two_level");
  CHECK(
      refusal("gather:ring") ==
      "COLLIE_ALGO: in 'gather:ring': gather has no algorithm 'ring'; it has: auto, tree, linear");
  for (const char* sizes :
       {"64K-1K", "4K-4K", "x-4K", "4K-y", "4Q-", "-", "12", "1K--2K", "99999999999999999G-"}) {
    INFO(sizes);
    const auto rule = std::string("all_reduce:ring:") + sizes;
    CHECK(refusal(rule).rfind(
              "COLLIE_ALGO: in '" + rule + "', '" + sizes + "' is not a range of sizes", 0) == 0);
  }
  for (const char* ranks : {"ranks=0-4", "ranks=5-2", "ranks=", "ranks=a", "ranks=-3"}) {
    INFO(ranks);
    const auto rule = std::string("all_reduce:ring:") + ranks;
    CHECK(refusal(rule) == "COLLIE_ALGO: in '" + rule + "', '" + ranks +
                               "' is not a range of ranks: ranks=LOW-HIGH (both in, LOW at least "
                               "1), ranks=LOW- or ranks=N");
  }
  CHECK(refusal("all_reduce:ring:0-1K:2K-") ==
        "COLLIE_ALGO: in 'all_reduce:ring:0-1K:2K-', '2K-' is a second range of sizes");
  CHECK(refusal("all_reduce:ring:ranks=2:ranks=3") ==
        "COLLIE_ALGO: in 'all_reduce:ring:ranks=2:ranks=3', 'ranks=3' is a second ranks range");
}

TEST_CASE("selection: the map joins the rules and Auto's choices into size ranges", "[selection]") {
  // Auto (a stand-in here): tree below 4K, ring from there.
  const auto automatic = [](std::size_t bytes) {
    return bytes < 4096 ? Algorithm::Tree : Algorithm::Ring;
  };
  const auto none = selection_map({}, Collective::AllReduce, 4, automatic);
  REQUIRE(none.size() == 2);
  CHECK(none[0].from == 0);
  CHECK(none[0].to == 4096);
  CHECK(none[0].algorithm == Algorithm::Tree);
  CHECK_FALSE(none[0].by_rule);
  CHECK(none[1].from == 4096);
  CHECK(none[1].to == kNoEnd);
  CHECK(none[1].algorithm == Algorithm::Ring);
  CHECK(describe(none, "COLLIE_ALGO") == "0-4K tree, 4K- ring");

  const auto rules = parse_selection(
      "all_reduce:recursive_doubling:100-1000,all_reduce:ring:1M-,broadcast:ring", "x");
  const auto map = selection_map(rules, Collective::AllReduce, 4, automatic);
  CHECK(describe(map, "COLLIE_ALGO") ==
        "0-100 tree, 100-1000 recursive_doubling (COLLIE_ALGO), 1000-4K tree, 4K-1M ring, "
        "1M- ring (COLLIE_ALGO)");
  // A rule for other ranks leaves the map to Auto.
  const auto other = parse_selection("all_reduce:recursive_doubling:ranks=8-", "x");
  CHECK(describe(selection_map(other, Collective::AllReduce, 4, automatic), "R") ==
        "0-4K tree, 4K- ring");
  CHECK(describe(selection_map(other, Collective::AllReduce, 8, automatic), "R") ==
        "0- recursive_doubling (R)");
  CHECK(bytes_text(3 << 20) == "3M");
  CHECK(bytes_text(1536) == "1536");
  CHECK(bytes_text(0) == "0");
}

TEST_CASE("selection: sizes are read as the settings read them", "[selection]") {
  namespace env = collie::environment;
  CHECK(env::size_in_bytes("0") == 0);
  CHECK(env::size_in_bytes("64K") == 65536);
  CHECK(env::size_in_bytes("64k") == 65536);
  CHECK(env::size_in_bytes("64KiB") == 65536);
  CHECK(env::size_in_bytes("3m") == std::size_t{3} << 20);
  CHECK(env::size_in_bytes("2GiB") == std::size_t{2} << 30);
  CHECK(env::size_in_bytes("12B") == 12);
  for (const char* bad : {"", "K", "-1", "+1", " 1", "1 K", "1KB", "4Q", "1.5K",
                          "18446744073709551616", "17179869184G"}) {
    INFO(bad);
    CHECK_FALSE(env::size_in_bytes(bad).has_value());
  }
  // A rule's bounds and a setting agree on every spelling (within
  // COLLIE_SEGMENT_BYTES's range, 1K to 1G).
  for (const char* size : {"1K", "64k", "3M", "1GiB", "2048"}) {
    INFO(size);
    const auto rules = parse_selection(std::string("all_reduce:ring:") + size + "-", "x");
    CHECK(rules[0].min_bytes == env::bytes(env::kSegmentBytes, size, "t"));
  }
}

TEST_CASE("selection: a group's map at a shape is the rules, and auto_algorithm in the gaps",
          "[selection]") {
  const CostModel model;
  const auto rules = parse_selection("all_reduce:ring:1M-", "x");
  // One rank: Auto's only answer is the first algorithm, up to the rule.
  const auto alone =
      auto_selection_map(rules, Collective::AllReduce, 1, 4, 1 << 18, model, nullptr);
  REQUIRE(alone.size() == 2);
  CHECK(alone[0].algorithm == algorithms_for(Collective::AllReduce).front());
  CHECK(alone[0].to == std::size_t{1} << 20);
  CHECK(alone[1].by_rule);
  // On 8 ranks every range Auto fills is what auto_algorithm says at its
  // first size, and the rule's range is the rule's.
  const auto map = auto_selection_map(rules, Collective::AllReduce, 8, 4, 1 << 18, model, nullptr);
  REQUIRE_FALSE(map.empty());
  CHECK(map.back().algorithm == Algorithm::Ring);
  CHECK(map.back().by_rule);
  CHECK(map.back().from == std::size_t{1} << 20);
  for (const auto& range : map) {
    if (range.by_rule) continue;
    INFO(range.from);
    CHECK(range.algorithm == auto_algorithm(Collective::AllReduce, 8,
                                            std::max<std::size_t>(range.from / 4, 1), 4, 1 << 18,
                                            model, nullptr));
  }
}
