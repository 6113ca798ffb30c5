// place_ranks (tools/collie/cpu_binding.hpp): which processors each of a
// node's ranks gets, on processor lists this machine may not have.
#include "support/catch.hpp"

#include "collie/cpu_binding.hpp"  // tools/collie/

using collie::cli::Binding;
using collie::cli::place_ranks;
using Cpus = std::vector<std::vector<int>>;

TEST_CASE("bind auto: a slice of the processors each, every processor in one slice", "[launch]") {
  std::vector<int> sixty_four(64);
  for (int i = 0; i < 64; ++i) sixty_four[static_cast<std::size_t>(i)] = i;
  const auto p = place_ranks(Binding::Auto, 8, sixty_four);
  REQUIRE(p.cpus.size() == 8);
  for (int r = 0; r < 8; ++r) {
    std::vector<int> want;
    for (int c = 8 * r; c < 8 * r + 8; ++c) want.push_back(c);
    CHECK(p.cpus[static_cast<std::size_t>(r)] == want);
  }
  CHECK(p.shared == 64);
  CHECK(p.describe() == ", bound auto to processors 0-7 8-15 16-23 24-31 32-39 40-47 48-55 56-63");
  cpu_set_t set;
  REQUIRE(p.set_of(3, set));
  CHECK(CPU_COUNT(&set) == 8);
  CHECK(CPU_ISSET(24, &set));
  CHECK_FALSE(CPU_ISSET(32, &set));
  CHECK_FALSE(p.set_of(8, set));

  // Uneven: slices differ by one at most, in the affinity's own numbers.
  const auto q = place_ranks(Binding::Auto, 3, {1, 3, 4, 5, 9, 11, 12});
  CHECK(q.cpus == Cpus{{1, 3}, {4, 5}, {9, 11, 12}});
  CHECK(q.shared == 7);
  CHECK(q.describe() == ", bound auto to processors 1,3 4-5 9,11,12");
}

TEST_CASE("bind auto: one rank is left alone, and more ranks than processors are packed",
          "[launch]") {
  const auto one = place_ranks(Binding::Auto, 1, {0, 1, 2, 3});
  CHECK(one.cpus == Cpus{{}});
  CHECK(one.shared == 0);
  CHECK(one.describe().empty());
  cpu_set_t set;
  CHECK_FALSE(one.set_of(0, set));

  const auto five = place_ranks(Binding::Auto, 5, {0, 1});
  CHECK(five.cpus == Cpus{{0}, {0}, {0}, {1}, {1}});
  CHECK(five.shared == 2);
  CHECK(five.describe() == ", bound auto to processors 0 0 0 1 1");
}

TEST_CASE("bind packed and none: as asked, whatever the count", "[launch]") {
  CHECK(place_ranks(Binding::Packed, 2, {0, 1, 2, 3}).cpus == Cpus{{0}, {2}});
  CHECK(place_ranks(Binding::Packed, 1, {5, 6}).cpus == Cpus{{5}});
  const auto none = place_ranks(Binding::None, 4, {0, 1});
  CHECK(none.cpus == Cpus{{}, {}, {}, {}});
  CHECK(none.shared == 0);
  CHECK(place_ranks(Binding::Auto, 2, {}).shared == 0);  // no affinity known
}
