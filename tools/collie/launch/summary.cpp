// What `collie launch` says when an attempt fails (launch/summary.hpp).
#include "summary.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "child_process.hpp"
#include "rank_error_file.hpp"

namespace collie::cli {

namespace {

constexpr const char* kLaunchDirPrefix = "collie-launch-";
constexpr const char* kLaunchDirLock = ".lock";  // appears only once locked (ErrorFiles())

// Removes the directories of this user's launchers that are gone: those
// whose lock file this process can lock.
void remove_orphaned_launch_dirs(const std::filesystem::path& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(kLaunchDirPrefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
      continue;
    const int fd = ::open((entry.path() / kLaunchDirLock).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // no lock file: not made by this version; left alone
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code removed;
      std::filesystem::remove_all(entry.path(), removed);
    }
    ::close(fd);
  }
}

}  // namespace

ErrorFiles::ErrorFiles() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp != nullptr && *tmp != '\0' ? std::string(tmp) : std::string("/tmp");
  remove_orphaned_launch_dirs(base);
  std::string pattern = base + "/" + kLaunchDirPrefix + "XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return;
  dir_ = pattern;
  // Locked under another name, then renamed: another launcher's sweep
  // never finds the lock file unlocked while this one lives.
  const auto fresh = dir_ + "/.lock-new";
  lock_ = ::open(fresh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (lock_ >= 0 && (::flock(lock_, LOCK_EX) != 0 ||
                     ::rename(fresh.c_str(), (dir_ + "/" + kLaunchDirLock).c_str()) != 0)) {
    ::close(lock_);
    lock_ = -1;
  }
}

ErrorFiles::~ErrorFiles() {
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  if (lock_ >= 0) ::close(lock_);
}

std::string ErrorFiles::path(int attempt, int rank) const {
  if (dir_.empty()) return "";
  const auto dir =
      std::filesystem::path(dir_) / fmt::format("attempt-{}", attempt) / std::to_string(rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return (dir / "error.json").string();
}

std::string root_cause(const ErrorFiles& files, int attempt, const LocalRanks& ranks,
                       const LocalRank* first_failure) {
  std::optional<RankError> first;
  int who = -1;
  for (const auto& r : ranks.ranks()) {
    auto e = read_rank_error(files.path(attempt, r.rank));
    if (!e) continue;
    const bool earlier = !first || (e->timestamp != 0 && e->timestamp < first->timestamp) ||
                         (e->timestamp == first->timestamp && &r == first_failure);
    if (earlier) {
      first = std::move(e);
      who = r.rank;
    }
  }
  if (!first) return "";
  std::string text = fmt::format("rank {} raised {} (its error file, torch's @record)", who,
                                 first->message);
  if (!first->traceback.empty()) {
    // The traceback's last lines: where it was raised.
    std::vector<std::string> lines;
    std::size_t at = 0;
    while (at < first->traceback.size()) {
      const auto nl = std::min(first->traceback.find('\n', at), first->traceback.size());
      lines.push_back(first->traceback.substr(at, nl - at));
      at = nl + 1;
    }
    constexpr std::size_t kLines = 12;
    text += ":";
    for (std::size_t i = lines.size() > kLines ? lines.size() - kLines : 0; i < lines.size(); ++i)
      text += "\n  " + lines[i];
  }
  return text;
}

std::string rank_table(int node_rank, const LocalRanks& ranks, const LocalRank* first_failure,
                       int blamed) {
  std::string table = fmt::format("collie launch: ranks on node {}:\n", node_rank);
  for (const auto& r : ranks.ranks()) {
    std::string how = describe_wait_status(*r.status);
    if (r.stopped_by_launcher) how = "stopped by collie launch (" + how + ")";
    if (r.replaces >= 0) how += fmt::format(" (replaced pid {})", r.replaces);
    const char* mark = r.rank == blamed && r.replaces < 0 ? "   <- blamed by the others"
                       : &r != first_failure   ? ""
                       : blamed >= 0           ? "   <- exited first"
                                               : "   <- failed first";
    table += fmt::format("  rank {:>3}  pid {:>7}  {}{}\n", r.rank, r.pid, how, mark);
  }
  return table;
}

}  // namespace collie::cli
