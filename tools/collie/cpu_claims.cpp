// Claims on this machine's processors between collie launchers
// (cpu_claims.hpp).
#include "cpu_claims.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/environment.hpp>

namespace collie::cli {
namespace {

// A descriptor holding processor `cpu`'s claim in `dir`, or -1 where another
// holds it or the file cannot serve.
int claim_one(const std::string& dir, int cpu) {
  const std::string path = fmt::format("{}/collie-cpu-{}", dir, cpu);
  // O_NOFOLLOW and O_NONBLOCK: a link or a FIFO planted under that name
  // neither redirects the open nor blocks it.
  constexpr int kFlags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | kFlags, 0644);
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | kFlags);  // another user's file
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

CpuClaims::CpuClaims(CpuClaims&& other) noexcept
    : cpus_(std::move(other.cpus_)), fds_(std::move(other.fds_)) {
  other.cpus_.clear();
  other.fds_.clear();
}

CpuClaims& CpuClaims::operator=(CpuClaims&& other) noexcept {
  if (this != &other) {
    release();
    cpus_ = std::move(other.cpus_);
    fds_ = std::move(other.fds_);
    other.cpus_.clear();
    other.fds_.clear();
  }
  return *this;
}

CpuClaims::~CpuClaims() {
  release();
}

void CpuClaims::release() {
  for (int fd : fds_)
    ::close(fd);
  fds_.clear();
  cpus_.clear();
}

CpuClaims CpuClaims::take(const std::vector<int>& cpus, int want, const std::string& dir) {
  CpuClaims c;
  if (want <= 0 || dir.empty()) return c;
  for (int cpu : cpus) {
    if (static_cast<int>(c.cpus_.size()) == want) break;
    if (const int fd = claim_one(dir, cpu); fd >= 0) {
      c.cpus_.push_back(cpu);
      c.fds_.push_back(fd);
    }
  }
  if (static_cast<int>(c.cpus_.size()) < want) c.release();
  return c;
}

std::string CpuClaims::default_dir() {
  if (const auto dir = environment::get(environment::kCpuClaims)) return *dir;
  return "/dev/shm";
}

}  // namespace collie::cli
