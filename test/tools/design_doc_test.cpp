// docs/design.md stays the map of the code: every path it names exists, its
// Transport table names every call of transport.hpp, its key table is
// the keys headers', and its list of errors is error.hpp's. The README's and the
// guides' relative links lead somewhere too.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/build_paths.hpp"
#include "support/catch.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = collie::test::paths::kSource;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& by) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (auto at = s.find(by); at != std::string::npos; at = s.find(by, start)) {
    parts.push_back(s.substr(start, at - start));
    start = at + by.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

// Whether `name` exists in `dir`: "x.*" stands for any file "x.<ext>".
bool exists_in(const fs::path& dir, const std::string& name) {
  if (name.size() > 2 && name.ends_with(".*")) {
    const auto stem = name.substr(0, name.size() - 2);
    if (!fs::is_directory(dir)) return false;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const auto file = entry.path().filename().string();
      if (file.rfind(stem + ".", 0) == 0) return true;
    }
    return false;
  }
  return fs::exists(dir / name);
}

// Every file name under the source folders, for a name given alone.
const std::set<std::string>& source_file_names() {
  static const std::set<std::string> names = [] {
    std::set<std::string> all;
    for (const auto& entry : fs::directory_iterator(kRoot))
      if (entry.is_regular_file()) all.insert(entry.path().filename().string());
    for (const char* top : {"store", "transport", "collectives", "runtime", "tools", "test",
                            "third_party", "docs"}) {
      for (const auto& entry : fs::recursive_directory_iterator(kRoot / top)) {
        if (entry.is_regular_file()) all.insert(entry.path().filename().string());
      }
    }
    return all;
  }();
  return names;
}

const std::vector<fs::path> kIncludeDirs = {
    kRoot / "store/base/include", kRoot / "store/include", kRoot / "transport/include",
    kRoot / "collectives/include", kRoot / "runtime/include"};

bool looks_like_file(const std::string& s) {
  static const std::regex file(R"([A-Za-z0-9_.*-]+\.(cpp|hpp|md|txt|sh|html|in|cmake|py|c|json))");
  return std::regex_match(s, file);
}

// What a backquoted token of design.md names, if it names a file: why it
// does not exist, or empty.
std::string check_token(const std::string& token) {
  if (token.size() > 2 && token.front() == '<' && token.back() == '>') {
    const auto header = token.substr(1, token.size() - 2);
    if (header.find('/') == std::string::npos || !header.ends_with(".hpp")) return {};
    for (const auto& dir : kIncludeDirs)
      if (fs::exists(dir / header)) return {};
    return "no public header " + token;
  }
  static const std::regex path(R"([A-Za-z0-9_.*/<>-]+)");
  if (!std::regex_match(token, path)) return {};
  if (token.find("...") != std::string::npos) return {};  // a store key, not a path
  if (token.find('/') == std::string::npos) {
    if (!looks_like_file(token)) return {};
    if (token.ends_with(".*")) return {};
    return source_file_names().count(token) ? "" : "no file named " + token + " in the sources";
  }
  // A pattern (`collectives/src/<family>.cpp`): its folder must exist.
  auto p = token;
  if (const auto angle = p.find('<'); angle != std::string::npos) {
    p = p.substr(0, p.rfind('/', angle) + 1);
  }
  const auto slash = p.rfind('/', p.size() - 2);
  const fs::path dir = slash == std::string::npos ? kRoot : kRoot / p.substr(0, slash);
  const auto name = slash == std::string::npos ? p : p.substr(slash + 1);
  if (name.empty() || name == "/") return fs::is_directory(dir) ? "" : token + " does not exist";
  const auto bare = name.ends_with("/") ? name.substr(0, name.size() - 1) : name;
  return exists_in(dir, bare) ? "" : token + " does not exist";
}

// The file trees of design.md's ``` blocks: a line is "names   what they
// do", names separated by ", "; a name ending in "/" is a folder whose
// entries follow, indented deeper.
std::vector<std::string> check_trees(const std::vector<std::string>& doc, int& named) {
  std::vector<std::string> missing;
  bool in_block = false;
  std::vector<std::pair<std::size_t, fs::path>> folders;
  for (const auto& line : doc) {
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      folders.clear();
      continue;
    }
    if (!in_block || trim(line).empty()) continue;
    const auto indent = line.find_first_not_of(' ');
    while (!folders.empty() && folders.back().first >= indent) folders.pop_back();
    const fs::path base = folders.empty() ? kRoot : folders.back().second;
    const auto column = split(line.substr(indent), "  ").front();
    for (auto name : split(column, ", ")) {
      name = trim(name);
      ++named;
      if (name.ends_with("/")) {
        const auto folder = base / name.substr(0, name.size() - 1);
        if (!fs::is_directory(folder)) missing.push_back(fs::relative(folder, kRoot).string() + "/");
        folders.emplace_back(indent, folder);
      } else if (!exists_in(base, name)) {
        missing.push_back(fs::relative(base, kRoot).string() + "/" + name);
      }
    }
  }
  return missing;
}

// The rows of the markdown table whose header starts with `header`, each
// row's cells trimmed.
std::vector<std::vector<std::string>> table_rows(const std::vector<std::string>& lines,
                                                 const std::string& header,
                                                 const std::string& prefix = "") {
  std::vector<std::vector<std::string>> rows;
  bool in_table = false;
  for (auto line : lines) {
    if (!prefix.empty()) {
      if (line.rfind(prefix, 0) != 0) {
        if (in_table) break;
        continue;
      }
      line = line.substr(prefix.size());
    }
    if (!in_table) {
      in_table = line.rfind(header, 0) == 0;
      continue;
    }
    if (line.rfind("|", 0) != 0) break;
    if (line.rfind("|--", 0) == 0 || line.rfind("|---", 0) == 0) continue;
    auto cells = split(line, "|");
    std::vector<std::string> row;
    for (std::size_t i = 1; i + 1 < cells.size(); ++i) row.push_back(trim(cells[i]));
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("docs/design.md: every path it names exists", "[docs]") {
  const auto text = read_text(kRoot / "docs/design.md");
  const auto doc = lines_of(text);
  int named = 0;
  const auto missing_in_trees = check_trees(doc, named);
  INFO("design.md's file trees name what is not there: " << Catch::Detail::stringify(missing_in_trees));
  CHECK(missing_in_trees.empty());
  CHECK(named > 100);  // the trees were read

  std::vector<std::string> missing;
  int tokens = 0;
  bool in_block = false;
  for (const auto& line : doc) {
    if (line.rfind("```", 0) == 0) in_block = !in_block;
    if (in_block) continue;
    static const std::regex code("`([^`]+)`");
    for (std::sregex_iterator it(line.begin(), line.end(), code), end; it != end; ++it) {
      ++tokens;
      if (auto why = check_token((*it)[1].str()); !why.empty()) missing.push_back(why);
    }
  }
  INFO("design.md names what is not there: " << Catch::Detail::stringify(missing));
  CHECK(missing.empty());
  CHECK(tokens > 100);
}

TEST_CASE("the checks of design.md's paths catch a path that is not there", "[docs]") {
  CHECK(check_token("runtime/src/plan/flow_graph.hpp").empty());
  CHECK(check_token("runtime/src/executor.cpp") == "runtime/src/executor.cpp does not exist");
  CHECK(check_token("transport/src/shm/").empty());
  CHECK_FALSE(check_token("transport/src/rdma/").empty());
  CHECK(check_token("collectives/src/<family>.cpp").empty());
  CHECK_FALSE(check_token("collectives/lib/<family>.cpp").empty());
  CHECK(check_token("<collie/error.hpp>").empty());
  CHECK_FALSE(check_token("<collie/tcp.hpp>").empty());
  CHECK(check_token("flow_run.cpp").empty());
  CHECK_FALSE(check_token("collie_torch.cpp").empty());
  CHECK(exists_in(kRoot / "transport/src/tcp", "connections.*"));
  CHECK_FALSE(exists_in(kRoot / "transport/src/tcp", "tag_queues.*"));

  int named = 0;
  const std::vector<std::string> tree = {"```", "transport/src/", "  tcp/  the backend",
                                         "    peer_stream.*, gone.cpp   two", "  open.cpp",
                                         "```"};
  CHECK(check_trees(tree, named) == std::vector<std::string>{"transport/src/tcp/gone.cpp"});
  CHECK(named == 5);
}

TEST_CASE("docs/design.md: the Transport table names every call of transport.hpp", "[docs]") {
  const auto header = read_text(kRoot / "transport/include/collie/transport/transport.hpp");
  const auto iface = header.substr(header.find("class Transport"));
  std::set<std::string> virtuals;
  static const std::regex decl(R"(virtual\s+[^;{(]*?\b([a-z_]+)\s*\()");
  for (std::sregex_iterator it(iface.begin(), iface.end(), decl), end; it != end; ++it)
    virtuals.insert((*it)[1].str());
  REQUIRE(virtuals.size() > 15);
  REQUIRE(virtuals.count("isend"));

  std::set<std::string> listed;
  const auto rows = table_rows(lines_of(read_text(kRoot / "docs/design.md")), "| call |");
  REQUIRE(!rows.empty());
  static const std::regex name("`([a-z_]+)");
  for (const auto& row : rows) {
    for (std::sregex_iterator it(row[0].begin(), row[0].end(), name), end; it != end; ++it)
      listed.insert((*it)[1].str());
  }
  std::vector<std::string> unlisted, unknown;
  std::set_difference(virtuals.begin(), virtuals.end(), listed.begin(), listed.end(),
                      std::back_inserter(unlisted));
  std::set_difference(listed.begin(), listed.end(), virtuals.begin(), virtuals.end(),
                      std::back_inserter(unknown));
  INFO("calls of transport.hpp missing from design.md's table: " << Catch::Detail::stringify(unlisted));
  CHECK(unlisted.empty());
  INFO("calls in design.md's table that transport.hpp lacks: " << Catch::Detail::stringify(unknown));
  CHECK(unknown.empty());
}

TEST_CASE("docs/design.md: the key table is the keys headers' tables", "[docs]") {
  // Each component spells its keys beside its code, with its part of the
  // table; design.md gathers them all, each row once.
  std::multiset<std::vector<std::string>> in_headers;
  for (const char* header :
       {"runtime/include/collie/keys.hpp", "transport/include/collie/transport/keys.hpp",
        "tools/collie/launch/keys.hpp", "tools/collie/bench/keys.hpp",
        "runtime/torch/torch_keys.hpp"}) {
    const auto rows = table_rows(lines_of(read_text(kRoot / header)), "| key", "// ");
    INFO(header);
    CHECK(!rows.empty());
    in_headers.insert(rows.begin(), rows.end());
  }
  const auto doc_rows = table_rows(lines_of(read_text(kRoot / "docs/design.md")), "| key");
  const std::multiset<std::vector<std::string>> in_doc(doc_rows.begin(), doc_rows.end());
  REQUIRE(in_headers.size() > 20);
  CHECK(in_doc == in_headers);
  // Nothing else spells a key's prefix (the launcher once did by hand).
  for (const auto& entry : fs::recursive_directory_iterator(kRoot / "tools/collie")) {
    if (entry.path().extension() != ".cpp") continue;
    INFO(entry.path().string());
    CHECK(read_text(entry.path()).find("\"collie/run/") == std::string::npos);
  }
}

TEST_CASE("docs/design.md: the errors it lists are error.hpp's", "[docs]") {
  const auto header = read_text(kRoot / "store/base/include/collie/error.hpp");
  const auto doc = read_text(kRoot / "docs/design.md");
  static const std::regex error_class(R"(class (\w+Error) : public Error)");
  int classes = 0;
  for (std::sregex_iterator it(header.begin(), header.end(), error_class), end; it != end; ++it) {
    ++classes;
    std::string quoted = "`";
    quoted.append((*it)[1].str()).push_back('`');
    INFO(quoted);
    CHECK(doc.find(quoted) != std::string::npos);
  }
  CHECK(classes >= 8);
}

TEST_CASE("README and docs: every relative link leads to a file", "[docs]") {
  std::vector<fs::path> pages = {kRoot / "README.md"};
  for (const auto& entry : fs::directory_iterator(kRoot / "docs"))
    if (entry.path().extension() == ".md") pages.push_back(entry.path());
  std::vector<std::string> broken;
  int links = 0;
  static const std::regex link(R"(\]\(([^)\s]+)\))");
  for (const auto& page : pages) {
    const auto text = read_text(page);
    for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
      auto target = (*it)[1].str();
      if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
      target = target.substr(0, target.find('#'));
      if (target.empty()) continue;
      ++links;
      if (!fs::exists(page.parent_path() / target))
        broken.push_back(fs::relative(page, kRoot).string() + " → " + target);
    }
  }
  INFO("broken links: " << Catch::Detail::stringify(broken));
  CHECK(broken.empty());
  CHECK(links > 20);
}

// The walk of one all_reduce names functions beside the files they are in:
// within each numbered step, every `name()` (or `ns::name(...)`) must be
// declared or called in one of the files (or folders) that step names, or
// in the .cpp/.hpp beside one. A function renamed or gone fails here.
TEST_CASE("docs/design.md: the walk of a call names functions that exist", "[docs]") {
  const auto text = read_text(kRoot / "docs/design.md");
  const auto begin = text.find("## One all_reduce, from the call to the socket and back");
  REQUIRE(begin != std::string::npos);
  const auto end = text.find("\n## ", begin + 4);
  const auto walk = text.substr(begin, end - begin);
  // The numbered steps (the last runs on to the section's end).
  const std::regex step_start(R"(\n(\d+)\. \*\*)");
  std::vector<std::pair<std::string, std::size_t>> starts;
  for (auto it = std::sregex_iterator(walk.begin(), walk.end(), step_start);
       it != std::sregex_iterator(); ++it)
    starts.emplace_back((*it)[1].str(), static_cast<std::size_t>(it->position()));
  REQUIRE(starts.size() >= 10);
  const std::regex token("`([^`]+)`");
  const std::regex file_token(R"([A-Za-z0-9_./-]+/([A-Za-z0-9_.-]+\.(cpp|hpp))?)");
  const std::regex function_token(R"(([A-Za-z_][A-Za-z0-9_:]*)\(.*\))");
  std::vector<std::string> missing;
  int functions = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const auto to = i + 1 < starts.size() ? starts[i + 1].second : walk.size();
    const auto step = walk.substr(starts[i].second, to - starts[i].second);
    std::vector<fs::path> files;
    std::vector<std::string> names;
    for (auto it = std::sregex_iterator(step.begin(), step.end(), token);
         it != std::sregex_iterator(); ++it) {
      std::string t;  // the token on one line
      for (const char c : (*it)[1].str()) t += c == '\n' ? ' ' : c;
      while (t.find("  ") != std::string::npos) t.erase(t.find("  "), 1);
      std::smatch m;
      if (std::regex_match(t, file_token)) {
        const auto p = kRoot / t;
        if (fs::is_directory(p)) {
          for (const auto& entry : fs::directory_iterator(p))
            if (entry.is_regular_file()) files.push_back(entry.path());
        } else {
          files.push_back(p);
          for (const char* ext : {".cpp", ".hpp"}) {
            auto sibling = p;
            sibling.replace_extension(ext);
            if (sibling != p && fs::exists(sibling)) files.push_back(sibling);
          }
        }
      } else if (std::regex_match(t, m, function_token)) {
        auto name = m[1].str();
        if (const auto colons = name.rfind("::"); colons != std::string::npos)
          name = name.substr(colons + 2);
        names.push_back(name);
      }
    }
    std::string sources;
    for (const auto& f : files)
      if (fs::is_regular_file(f)) sources += read_text(f);
    for (const auto& name : names) {
      ++functions;
      const std::regex use("\\b" + name + "\\s*\\(");
      if (!std::regex_search(sources, use))
        missing.push_back("step " + starts[i].first + ": " + name + "()");
    }
  }
  CHECK(functions >= 15);  // the steps were read
  INFO("functions the walk names that none of their step's files has: "
       << Catch::Detail::stringify(missing));
  CHECK(missing.empty());
}

// The glossary defines the words the rest of the page (and the code's
// comments) use without saying what they are.
TEST_CASE("docs/design.md: the glossary defines the house's words", "[docs]") {
  const auto doc = lines_of(read_text(kRoot / "docs/design.md"));
  std::set<std::string> defined;
  for (const auto& row : table_rows(doc, "| word |"))
    if (!row.empty()) defined.insert(row.front());
  for (const char* word : {"slot", "board", "fingerprint", "ticket", "notice", "blame", "second-hand",
                           "Whole, Segments, Chunks", "crowded", "site", "shape"}) {
    INFO(word);
    CHECK(defined.count(word) == 1);
  }
}
