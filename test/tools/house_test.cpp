// The house's rules, kept by a test: a file does one job (at most 500 lines
// of source, 1,000 of test), the results page stays a page (at most 500
// lines), and an algorithm is spelled in one table: no other source file
// names more than two of the Algorithm enum's values; in runtime/src, no
// room includes a file of the top and the rooms' arrows go one way.
#include <filesystem>
#include <functional>
#include <map>
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

// The arrows between runtime/src's rooms (its folders; "" is the top): for
// each room, the rooms its files include by a quoted path, resolved from
// the file's folder and then from runtime/src as the compiler does.
using Arrows = std::map<std::string, std::set<std::string>>;
Arrows room_arrows(const fs::path& src) {
  Arrows arrows;
  const auto room_of = [&](const fs::path& f) {
    const auto rel = fs::relative(f, src);
    return std::distance(rel.begin(), rel.end()) > 1 ? rel.begin()->string() : std::string();
  };
  static const std::regex quoted(R"re(#include "([^"]+)")re");
  for (const auto& f : sources_under(src)) {
    const auto text = collie::test::read_file(f);
    for (std::sregex_iterator it(text.begin(), text.end(), quoted), end; it != end; ++it) {
      const fs::path named = (*it)[1].str();
      fs::path target = f.parent_path() / named;
      if (!fs::exists(target)) target = src / named;
      if (!fs::exists(target)) continue;  // another layer's
      const auto from = room_of(f), to = room_of(fs::weakly_canonical(target));
      if (from != to) arrows[from].insert(to);
    }
  }
  return arrows;
}

// What is wrong with the arrows: a room that includes the top, and each
// room that is on a cycle.
std::vector<std::string> arrow_faults(const Arrows& arrows) {
  std::vector<std::string> faults;
  for (const auto& [from, tos] : arrows)
    if (!from.empty() && tos.count("")) faults.push_back(from + "/ includes the top");
  for (const auto& [start, tos] : arrows) {
    std::set<std::string> seen;
    const std::function<bool(const std::string&)> reaches_start = [&](const std::string& room) {
      if (room == start) return true;
      if (!seen.insert(room).second || !arrows.count(room)) return false;
      for (const auto& next : arrows.at(room))
        if (reaches_start(next)) return true;
      return false;
    };
    for (const auto& next : tos)
      if (!start.empty() && reaches_start(next)) {
        faults.push_back(start + "/ is on a cycle through " +
                         (next.empty() ? std::string("the top") : next + "/"));
        break;
      }
  }
  return faults;
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

TEST_CASE(
    "the house: runtime/src's rooms include no file of the top, and no two include each other",
    "[docs]") {
  const auto arrows = room_arrows(kRoot / "runtime/src");
  CHECK(arrows.size() > 5);  // the rooms were read
  CHECK(arrows.at("").count("executor"));
  INFO("runtime/src: " << Catch::Detail::stringify(arrow_faults(arrows)));
  CHECK(arrow_faults(arrows).empty());
  // The check finds what it is for.
  const Arrows bad = {{"a", {"b"}}, {"b", {"a", "c"}}, {"c", {""}}, {"", {"a"}}};
  CHECK(arrow_faults(bad) == std::vector<std::string>{"c/ includes the top",
                                                      "a/ is on a cycle through b/",
                                                      "b/ is on a cycle through a/",
                                                      "c/ is on a cycle through the top"});
}
