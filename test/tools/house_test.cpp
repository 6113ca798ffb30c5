// The house's rules, kept by a test: a file does one job (at most 500 lines
// of source, 1,000 of test), the results page stays a page (at most 500
// lines), and an algorithm is spelled in one table: no other source file
// names more than two of the Algorithm enum's values.
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/build_paths.hpp"
#include "support/catch.hpp"
#include "support/read_file.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = collie::test::paths::kSource;

// The source files under `top` whose extension is one of the sources'.
std::vector<fs::path> sources_under(const fs::path& top) {
  static const std::set<std::string> kinds = {".cpp", ".hpp", ".py", ".sh", ".cmake", ".in"};
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(top))
    if (entry.is_regular_file() && kinds.count(entry.path().extension().string()))
      files.push_back(entry.path());
  return files;
}

std::size_t lines_in(const fs::path& path) {
  const auto text = collie::test::read_file(path);
  std::size_t lines = 0;
  for (const char c : text)
    lines += c == '\n';
  return lines;
}

}  // namespace

TEST_CASE("the house: source files at most 500 lines, test files at most 1,000", "[docs]") {
  std::vector<std::string> long_files;
  std::size_t seen = 0;
  for (const char* layer : {"store", "transport", "collectives", "runtime", "tools", "third_party"})
    for (const auto& f : sources_under(kRoot / layer)) {
      ++seen;
      if (lines_in(f) > 500)
        long_files.push_back(fs::relative(f, kRoot).string() + ": " + std::to_string(lines_in(f)));
    }
  for (const auto& f : sources_under(kRoot / "test")) {
    ++seen;
    if (lines_in(f) > 1000)
      long_files.push_back(fs::relative(f, kRoot).string() + ": " + std::to_string(lines_in(f)));
  }
  CHECK(seen > 300);  // the folders were read
  INFO("files past their length (split by responsibility): "
       << Catch::Detail::stringify(long_files));
  CHECK(long_files.empty());
}

TEST_CASE("the house: no test case's name holds a semicolon (CTest cuts its names there)",
          "[docs]") {
  const std::regex named_with_semicolon(R"re(TEST_CASE\(\s*"[^"]*;[^"]*")re");
  std::vector<std::string> cut;
  for (const auto& f : sources_under(kRoot / "test"))
    if (std::regex_search(collie::test::read_file(f), named_with_semicolon))
      cut.push_back(fs::relative(f, kRoot).string());
  INFO("files with a TEST_CASE named with ';': " << Catch::Detail::stringify(cut));
  CHECK(cut.empty());
}

TEST_CASE("the house: docs/PERFORMANCE.md is at most 500 lines", "[docs]") {
  const auto lines = lines_in(kRoot / "docs/PERFORMANCE.md");
  CHECK(lines > 100);
  CHECK(lines <= 500);
}

TEST_CASE("the house: only the algorithm table names more than two algorithms", "[docs]") {
  const fs::path table = kRoot / "collectives/include/collie/collectives/algorithm_table.hpp";
  const std::regex value(
      R"(\b(?:Algorithm|A)::(Ring|Tree|RecursiveDoubling|HalvingDoubling|RecursiveHalving|)"
      R"(Linear|Pairwise|Dissemination|TwoLevel)\b)");
  std::vector<std::string> spelled;
  bool table_read = false;
  for (const char* layer : {"store", "transport", "collectives", "runtime", "tools"})
    for (const auto& f : sources_under(kRoot / layer)) {
      const auto text = collie::test::read_file(f);
      std::set<std::string> named;
      for (auto it = std::sregex_iterator(text.begin(), text.end(), value);
           it != std::sregex_iterator(); ++it)
        named.insert((*it)[1].str());
      if (fs::equivalent(f, table)) {
        table_read = named.size() == 9;
        continue;
      }
      if (named.size() > 2)
        spelled.push_back(fs::relative(f, kRoot).string() + ": " + std::to_string(named.size()));
    }
  CHECK(table_read);  // the table itself names all nine
  INFO("files that spell out algorithms (derive it from algorithm_table.hpp): "
       << Catch::Detail::stringify(spelled));
  CHECK(spelled.empty());
}
