// The file store's log (file_log.hpp): one file of records under an
// OFD lock, read forward from where this process last looked.
#include "file_log.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "counter.hpp"
#include "protocol.hpp"

namespace collie::store::detail {

FileLog::FileLog(std::string path, std::chrono::milliseconds timeout)
    : path_(std::move(path)), timeout_(timeout) {
  if (timeout_ <= std::chrono::milliseconds::zero()) {
    throw ArgumentError("FileStore: the timeout must be positive");
  }
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    throw Error(fmt::format("file store: cannot open '{}': {}", path_, std::strerror(errno)));
  }
}

FileLog::~FileLog() {
  close(fd_);
}

std::chrono::milliseconds FileLog::limit(Timeout t) const {
  const auto value = t.value_or(timeout_);
  if (value <= std::chrono::milliseconds::zero()) {
    throw ArgumentError("file store: the timeout must be positive");
  }
  return value;
}

void FileLog::append_record(Record type, std::string_view key, std::string_view value) {
  std::vector<std::uint8_t> bytes;
  wire::Writer w(bytes);
  w.u8(static_cast<std::uint8_t>(type));
  w.bytes(key);
  w.bytes(value);
  pending_.insert(pending_.end(), bytes.begin(), bytes.end());
  apply(type, key, value);
}

void FileLog::flush() {
  std::size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      pending_.clear();
      throw Error(fmt::format("file store: cannot write '{}': {}", path_, std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
  }
  offset_ += static_cast<off_t>(pending_.size());
  pending_.clear();
}

void FileLog::lock_file(Clock::time_point deadline) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  auto pause = std::chrono::microseconds(100);
  while (fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EACCES) {
      throw Error(fmt::format("file store: cannot lock '{}': {}", path_, std::strerror(errno)));
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(
          fmt::format("file store '{}': another process held the file's lock "
                      "until the timeout ran out",
                      path_));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(50));
  }
}

void FileLog::unlock_file() {
  struct flock lock {};
  lock.l_type = F_UNLCK;
  lock.l_whence = SEEK_SET;
  fcntl(fd_, F_OFD_SETLK, &lock);  // cannot fail for a lock we hold
}

void FileLog::apply(Record type, std::string_view key, std::string_view value) {
  switch (type) {
    case Record::Set:
      data.insert_or_assign(std::string(key), std::string(value));
      break;
    case Record::Delete:
      data.erase(std::string(key));
      break;
    case Record::Barrier: {
      // value: "<arrivals> <n>"
      const auto space = value.find(' ');
      auto& b = barriers[std::string(key)];
      b.arrivals = parse_counter(value.substr(0, space)).value_or(0);
      b.n = static_cast<std::uint32_t>(parse_counter(value.substr(space + 1)).value_or(0));
      break;
    }
  }
}

void FileLog::catch_up() {
  struct stat info {};
  if (fstat(fd_, &info) != 0) {
    throw Error(fmt::format("file store: cannot stat '{}': {}", path_, std::strerror(errno)));
  }
  if (info.st_size < offset_) {
    throw Error(
        fmt::format("file store: '{}' shrank from {} to {} bytes; was it replaced or "
                    "truncated while in use?",
                    path_, offset_, info.st_size));
  }
  if (info.st_size == offset_) return;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info.st_size - offset_));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n =
        pread(fd_, bytes.data() + got, bytes.size() - got, offset_ + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(fmt::format("file store: cannot read '{}': {}", path_, std::strerror(errno)));
    }
    got += static_cast<std::size_t>(n);
  }
  wire::Reader r(bytes);
  while (r.remaining() > 0) {
    const auto type = r.u8();
    const auto key = r.bytes();
    const auto value = r.bytes();
    if (!r.ok() || type < 1 || type > 3) {
      throw Error(
          fmt::format("file store: '{}' is corrupt after byte {} (not a collie store "
                      "file, or a writer died mid-record)",
                      path_, offset_));
    }
    apply(static_cast<Record>(type), key, value);
  }
  offset_ = info.st_size;
}

}  // namespace collie::store::detail
