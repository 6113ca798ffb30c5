// Master-worker mode's messages (master_worker.hpp), between ranks of one
// program on one kind of machine: plain structs, sent as they are.
//
// Master -> worker, in the worker's stream order:
//   Command (tag kCommand)        one operation, fixed size
//   its body (tag kBody)          when body_bytes > 0: a kernel's name and
//                                 arguments, or a small write's data
//   a large write's data (kData, seq) once the worker asked for it
// Worker -> master:
//   Completions (kDone)           a batch of finished operations
//   their body (kDoneBody)        the records, then their error texts
//   Ready (kReady)                "send the data of write #seq now"
//   a read's data (kData, seq)    into the buffer the master posted at the call
// Worker -> worker: a copy's data (kCopy, the copy's number); from a
// poisoned source, no bytes, then its cause (kCopyWhy, the copy's number).
//
// A large write's data waits on the master until the worker reaches it, so
// no payload sits in a worker's queue ahead of commands; the window
// (Options) bounds the commands there.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <collie/error.hpp>

namespace collie::mw::wire {

enum Kind : unsigned { kCommand = 1, kBody, kDone, kDoneBody, kReady, kData, kCopy, kCopyWhy };

// Why a copy's source was poisoned: its first cause, cut to fit.
struct CopyWhy {
  char text[1024] = {};
};

enum class Op : std::uint32_t {
  Alloc,
  Free,
  Fill,
  Scale,
  Axpy,
  Binary,
  Reduce,
  WriteInline,
  Write,
  Read,
  CopySend,
  CopyRecv,
  CopyLocal,
  Call,
  AllReduce,
  Broadcast,
  AllGather,
  Memory,
  Shutdown
};

// Writes up to this size travel in the command's body.
inline constexpr std::size_t kInlineWriteBytes = 64 * 1024;

struct Command {
  Op op = Op::Shutdown;
  std::uint8_t dtype = 0;
  std::uint8_t reduce = 0;  // ReduceOp
  std::uint16_t reserved = 0;
  std::uint64_t seq = 0;  // the operation's number on this worker, from 1
  std::uint64_t buffer[3] = {0, 0, 0};
  std::uint64_t count = 0;
  double scalar = 0;
  std::int32_t peer = 0;      // a copy's other worker; a broadcast's root; alloc: its device
  std::uint32_t body_bytes = 0;
  std::uint64_t transfer = 0;  // a copy's number
};

struct CompletionsHeader {
  std::uint32_t records = 0;
  std::uint32_t body_bytes = 0;
};

struct Record {
  std::uint64_t seq = 0;
  double value = 0;
  std::uint32_t failed = 0;
  std::uint32_t message_bytes = 0;  // its text, after every record
};

// A body under construction, and one being read (a short one throws
// ProtocolError: both ends are one program, so it means corruption).
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    bytes.insert(bytes.end(), p, p + n);
  }
  void put_string(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    put_bytes(s.data(), s.size());
  }
  std::vector<std::byte> bytes;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : bytes_(b) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string get_string() {
    const auto n = get<std::uint32_t>();
    const auto* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  const std::byte* take(std::size_t n) {
    if (n > bytes_.size() - at_) throw ProtocolError("master-worker: a message body is short");
    const auto* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

}  // namespace collie::mw::wire
