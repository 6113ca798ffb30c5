// The COLLIE_* variables are one table (collie/environment.hpp): the page
// that documents them is that table, row for row; every COLLIE_* name the
// sources read is in it; and what init makes of an empty environment is
// what the table says the defaults are.
#include <cctype>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/build_paths.hpp"
#include "support/catch.hpp"

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/job_config.hpp>

#include "support/read_file.hpp"

namespace fs = std::filesystem;
namespace env = collie::environment;

namespace {

const fs::path kRoot = collie::test::paths::kSource;

std::string read_text(const fs::path& path) {
  REQUIRE(fs::exists(path));
  return collie::test::read_file(path);
}

// The rows of the page's settings table, as written.
std::vector<std::string> settings_rows(const std::string& page) {
  std::vector<std::string> rows;
  std::istringstream in(page);
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (!in_table) {
      in_table = line.rfind("| variable | type | default | accepts | meaning |", 0) == 0;
      continue;
    }
    if (line.rfind("|---", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;
    rows.push_back(line);
  }
  return rows;
}

// The variables of the page's table of test hooks.
std::set<std::string> test_hooks(const std::string& page) {
  std::set<std::string> hooks;
  const auto at = page.find("## Test hooks");
  if (at == std::string::npos) return hooks;
  const std::regex row(R"re(\n\| `(COLLIE_[A-Z_]+)` \|)re");
  const auto section = page.substr(at);
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it)
    hooks.insert((*it)[1].str());
  return hooks;
}

}  // namespace

TEST_CASE("docs/environment.md's settings are the table of collie/environment.hpp", "[docs]") {
  const auto rows = settings_rows(read_text(kRoot / "docs/environment.md"));
  std::string expected;
  for (const auto* v : env::kVariables)
    expected += env::markdown_row(*v) + "\n";
  std::string written;
  for (const auto& row : rows)
    written += row + "\n";
  INFO("the table's rows, in order (paste them under the page's settings header):\n" << expected);
  CHECK(written == expected);
}

TEST_CASE("every COLLIE_* variable the sources read is in the settings table", "[docs]") {
  std::set<std::string> table;
  for (const auto* v : env::kVariables)
    table.emplace(v->name);
  // A variable is read or set by its name in quotes (getenv("COLLIE_X"),
  // "COLLIE_X=1"); the test hooks are not settings (one spoils a rank's
  // result to prove the checker sees it): the page lists them apart.
  const std::set<std::string> not_settings = test_hooks(read_text(kRoot / "docs/environment.md"));
  CHECK(not_settings.count("COLLIE_BENCH_SPOIL_RANK") == 1);
  const std::regex name(R"re("(COLLIE_[A-Z][A-Z_]*[A-Z]))re");
  std::set<std::string> unknown;
  for (const char* layer : {"store", "transport", "collectives", "runtime", "tools"}) {
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / layer)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".py") continue;
      const auto text = read_text(entry.path());
      for (auto it = std::sregex_iterator(text.begin(), text.end(), name);
           it != std::sregex_iterator(); ++it) {
        const auto found = (*it)[1].str();
        if (!table.count(found) && !not_settings.count(found))
          unknown.insert(found + " (" + fs::relative(entry.path(), kRoot).string() + ")");
      }
    }
  }
  INFO("read by the sources but not in collie/environment.hpp's table: "
       << Catch::Detail::stringify(unknown));
  CHECK(unknown.empty());
}

TEST_CASE("every variable of the settings table is read somewhere", "[docs]") {
  // The table's variables are read through their entries (env::kTimeout,
  // ...), or by name: each must be named outside the table's own files.
  const std::regex entry(R"re(inline constexpr Variable (k[A-Za-z]+)\{\s*"(COLLIE_[A-Z_]+)")re");
  const auto table = read_text(kRoot / "store/base/include/collie/environment.hpp");
  std::vector<std::pair<std::string, std::string>> variables;  // (entry, name)
  for (auto it = std::sregex_iterator(table.begin(), table.end(), entry);
       it != std::sregex_iterator(); ++it)
    variables.emplace_back((*it)[1].str(), (*it)[2].str());
  CHECK(variables.size() == std::size(env::kVariables));
  std::string sources;
  for (const char* layer : {"store", "transport", "collectives", "runtime", "tools"})
    for (const auto& file : fs::recursive_directory_iterator(kRoot / layer)) {
      const auto ext = file.path().extension();
      if ((ext != ".cpp" && ext != ".hpp" && ext != ".py") ||
          file.path().filename() == "environment.hpp" || file.path().filename() == "environment.cpp")
        continue;
      sources += read_text(file.path());
    }
  // Whether `word` is in the sources as a whole word.
  const auto has_word = [&](const std::string& word) {
    const auto part = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (auto at = sources.find(word); at != std::string::npos; at = sources.find(word, at + 1))
      if ((at == 0 || !part(sources[at - 1])) &&
          (at + word.size() == sources.size() || !part(sources[at + word.size()])))
        return true;
    return false;
  };
  std::vector<std::string> unread;
  for (const auto& [name_of_entry, name] : variables)
    if (!has_word(name_of_entry) && sources.find("\"" + name + "\"") == std::string::npos)
      unread.push_back(name);
  INFO("in the table but read nowhere: " << Catch::Detail::stringify(unread));
  CHECK(unread.empty());
}

TEST_CASE("the settings' defaults are the table's, and every refusal names the variable",
          "[docs]") {
  // An environment with a rank and nothing else: the table's defaults.
  const auto config = collie::resolve_job_config(
      collie::InitOptions{}, [](std::string_view v) -> std::optional<std::string> {
        if (v == "RANK") return "0";
        if (v == "WORLD_SIZE") return "1";
        if (v == "MASTER_ADDR") return "h";
        if (v == "MASTER_PORT") return "1";
        return std::nullopt;
      });
  // The structs' defaults are read off the table at compile time.
  static_assert(env::default_bytes(env::kSegmentBytes) == 256 * 1024);
  static_assert(env::default_bytes(env::kStageChunkBytes) == 4 << 20);
  static_assert(env::kHostLink.fallback.empty());  // unset: measured (link_probe.hpp)
  const collie::JobConfig plain;  // the struct's own defaults agree
  CHECK(config.timeout == plain.timeout);
  CHECK(config.timeout == std::chrono::seconds(300));
  CHECK(config.stall_time == plain.stall_time);
  CHECK(config.segment_bytes == plain.segment_bytes);
  CHECK(config.segment_bytes == env::bytes(env::kSegmentBytes, env::kSegmentBytes.fallback, "t"));
  CHECK(config.stage_whole_bytes == plain.stage_whole_bytes);
  CHECK(config.stage_chunk_bytes == plain.stage_chunk_bytes);
  CHECK(config.host_link_gbits == plain.host_link_gbits);
  CHECK(config.host_link_latency_us == plain.host_link_latency_us);
  CHECK(config.transport.spin == plain.transport.spin);
  CHECK(config.transport.backend == plain.transport.backend);
  CHECK(config.transport.shm_single_copy_from == plain.transport.shm_single_copy_from);
  CHECK(config.transport.shm_stores == plain.transport.shm_stores);
  CHECK(config.restart_count == plain.restart_count);
  CHECK_FALSE(config.store_hosted_by_launcher);

  for (const auto* v : env::kVariables) {
    INFO(v->name);
    // Each default is one the variable accepts.
    switch (v->kind) {
      case env::Kind::Seconds:
        CHECK_NOTHROW(env::seconds_in_ms(*v, v->fallback, "t"));
        break;
      case env::Kind::Bytes:
        CHECK_NOTHROW(env::bytes(*v, v->fallback, "t"));
        break;
      case env::Kind::Integer:
        if (!v->fallback.empty()) CHECK_NOTHROW(env::integer(*v, v->fallback, "t"));
        break;
      case env::Kind::Choice:
        CHECK_NOTHROW(env::choice(*v, v->fallback, "t"));
        break;
      case env::Kind::Text:
        break;
    }
    CHECK_THROWS_WITH(env::refuse(*v, "x", "who"),
                      StartsWith("who: " + std::string(v->name) + "='x': takes "));
  }
  // The numeric bounds hold at both ends.
  CHECK(env::bytes(env::kSegmentBytes, "1K", "t") == 1024);
  CHECK(env::bytes(env::kSegmentBytes, "1G", "t") == std::size_t{1} << 30);
  CHECK_THROWS_WITH(env::bytes(env::kSegmentBytes, "1023", "t"),
                    ContainsSubstring("takes bytes, 1K to 1G; default 256K"));
  CHECK_THROWS(env::bytes(env::kSegmentBytes, "1025M", "t"));
  CHECK_THROWS(env::bytes(env::kSegmentBytes, "M", "t"));
  CHECK_THROWS(env::bytes(env::kSegmentBytes, "99999999999999999999K", "t"));
  CHECK(env::seconds_in_ms(env::kTimeout, "0.0005", "t") == 1);
  CHECK_THROWS(env::seconds_in_ms(env::kTimeout, "0", "t"));
  CHECK(env::seconds_in_ms(env::kStallTime, "0", "t") == 0);
  CHECK_THROWS(env::seconds_in_ms(env::kStallTime, "-1", "t"));
  CHECK_THROWS(env::seconds_in_ms(env::kStallTime, "inf", "t"));
  CHECK(env::integer(env::kSpinUs, "1000000", "t") == 1000000);
  CHECK_THROWS(env::integer(env::kSpinUs, "1000001", "t"));
  CHECK_THROWS(env::integer(env::kSpinUs, "-1", "t"));
  CHECK(env::choice(env::kShmStores, "streaming", "t") == "streaming");
  CHECK_THROWS(env::choice(env::kShmStores, "stream", "t"));
}
