// Which ranks can share memory: this host's identity as its ranks tell each
// other apart, and whether this process can use the backend at all (shm.hpp).
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fcntl.h>
#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/transport/shm.hpp>

#include "layout.hpp"

namespace collie::transport {

namespace {

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_of(const char* path) {
  char buf[128] = {};
  const auto n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
}

}  // namespace

std::string shared_memory_unusable() {
  const int fd = ::memfd_create("collie-shm-probe", MFD_CLOEXEC);
  if (fd < 0) return fmt::format("memfd_create failed: {}", std::strerror(errno));
  std::string why;
  if (::ftruncate(fd, static_cast<off_t>(shm::kPage)) != 0) {
    why = fmt::format("a memory file cannot be sized: {}", std::strerror(errno));
  } else if (const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
             pidfd < 0) {
    why = fmt::format("pidfd_open failed: {}", std::strerror(errno));
  } else {
    ::close(pidfd);
    const std::string path = fmt::format("/proc/{}/fd/{}", ::getpid(), fd);
    const int again = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (again < 0) {
      why = fmt::format("{} cannot be opened: {}", path, std::strerror(errno));
    } else {
      void* m = ::mmap(nullptr, shm::kPage, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0);
      if (m == MAP_FAILED)
        why = fmt::format("a memory file cannot be mapped: {}", std::strerror(errno));
      else
        ::munmap(m, shm::kPage);
      ::close(again);
    }
  }
  ::close(fd);
  return why;
}

std::string host_identity() {
  if (auto forced = environment::get(environment::kHostId)) return *forced;
  std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) boot = std::string("host:") + host;
  }
  return fmt::format("{} uid {} {} {}", boot, ::getuid(), namespace_of("/proc/self/ns/pid"),
                     namespace_of("/proc/self/ns/net"));
}

}  // namespace collie::transport
