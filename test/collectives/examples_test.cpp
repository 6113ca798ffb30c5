// The shipped collective examples, run with 4 ranks, print what the
// tutorials promise.
#include "support/build_paths.hpp"
#include "support/catch.hpp"

#include "support/cli.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;

namespace {

using collie::test::kCollie;
const std::string kExamples = collie::test::paths::kExamples;

collie::test::RunResult launch(int ranks, const std::string& example) {
  return collie::test::launch_ranks(kCollie, ranks, {kExamples + "/" + example});
}

void expect_lines(const std::string& example, const std::vector<std::string>& lines) {
  const auto r = launch(4, example);
  INFO(example << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  for (const auto& line : lines) CHECK_THAT(r.out, ContainsSubstring(line + "\n"));
}

}  // namespace

TEST_CASE("collective examples with 4 ranks print what the tutorials print",
          "[examples][launch]") {
  std::vector<std::string> everyone_2, everyone_4, everyone_all;
  for (int r = 0; r < 4; ++r) {
    const auto rank = "[rank " + std::to_string(r) + "] Rank " + std::to_string(r);
    everyone_2.push_back(rank + " has data 2");
    everyone_4.push_back(rank + " has data 4");
    everyone_all.push_back(rank + " has data [1, 1, 1, 1]");
  }
  expect_lines("broadcast", everyone_2);
  expect_lines("scatter", {"[rank 0] Rank 0 has data 1", "[rank 1] Rank 1 has data 2",
                           "[rank 2] Rank 2 has data 3", "[rank 3] Rank 3 has data 4"});
  expect_lines("reduce", {"[rank 0] Rank 0 has data 4"});
  expect_lines("all_reduce", everyone_4);
  expect_lines("gather", {"[rank 0] Rank 0 has data [1, 1, 1, 1]"});
  expect_lines("all_gather", everyone_all);
}

TEST_CASE("linear regression, gradients averaged by all_reduce, matches one process",
          "[examples][launch]") {
  for (int ranks : {1, 3, 4}) {
    const auto r = launch(ranks, "linear_regression");
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE(r.exit_code == 0);
    for (int rank = 0; rank < ranks; ++rank)
      CHECK_THAT(r.out, ContainsSubstring("[rank " + std::to_string(rank) + "] Rank " +
                                        std::to_string(rank) + ": w = 3.0") &&
                            ContainsSubstring("): same\n"));
  }
}
