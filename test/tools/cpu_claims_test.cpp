// CpuClaims (tools/collie/cpu_claims.hpp): the processors one collie
// launcher binds its ranks to are not handed to the next one while it runs.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "collie/cpu_claims.hpp"  // tools/collie/
#include "support/scratch_dir.hpp"

using collie::cli::CpuClaims;

TEST_CASE("cpu claims: a claimed processor is skipped until its holder lets go", "[launch]") {
  const collie::test::ScratchDir dir;
  const std::string d = dir.path().string();
  auto first = CpuClaims::take({0, 1, 2, 3}, 2, d);
  CHECK(first.cpus() == std::vector<int>{0, 1});
  auto second = CpuClaims::take({0, 1, 2, 3}, 2, d);
  CHECK(second.cpus() == std::vector<int>{2, 3});
  SECTION("fewer free than wanted: none held") {
    const auto third = CpuClaims::take({0, 1, 2, 3}, 1, d);
    CHECK(third.cpus().empty());
    // The failed take let go of what it had found.
    first = CpuClaims();
    CHECK(CpuClaims::take({0, 3, 1}, 2, d).cpus() == std::vector<int>{0, 1});
  }
  SECTION("a claim moved is still held; destroyed, it is free") {
    CpuClaims moved = std::move(second);
    CHECK(second.cpus().empty());
    CHECK(CpuClaims::take({2}, 1, d).cpus().empty());
    moved = CpuClaims();
    CHECK(CpuClaims::take({2}, 1, d).cpus() == std::vector<int>{2});
  }
  SECTION("another process's claim, held until that process exits") {
    first = CpuClaims();
    int ready[2];
    int go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(go[1]);  // so that the parent's close is an end of file here
      const auto held = CpuClaims::take({0}, 1, d);
      const char c = held.cpus().empty() ? 'n' : 'y';
      (void)!::write(ready[1], &c, 1);
      char wait_for;
      (void)!::read(go[0], &wait_for, 1);
      ::_exit(0);
    }
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    CHECK(c == 'y');
    CHECK(CpuClaims::take({0}, 1, d).cpus().empty());
    ::close(go[1]);  // the child reads end of file and exits
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(CpuClaims::take({0}, 1, d).cpus() == std::vector<int>{0});
    for (int fd : {ready[0], ready[1], go[0]})
      ::close(fd);
  }
  SECTION("a name that is not a plain file counts as claimed; a missing directory claims none") {
    REQUIRE(::mkfifo((dir.path() / "collie-cpu-7").c_str(), 0600) == 0);
    CHECK(CpuClaims::take({7}, 1, d).cpus().empty());
    CHECK(CpuClaims::take({8}, 1, d).cpus() == std::vector<int>{8});
    CHECK(CpuClaims::take({9}, 1, (dir.path() / "absent").string()).cpus().empty());
  }
}
