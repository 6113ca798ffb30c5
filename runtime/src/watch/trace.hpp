// Tracing (COLLIE_TRACE=DIR or InitOptions::trace_dir): every rank writes
// DIR/collie-trace-rank<R>.json, Chrome trace-event JSON (the array form,
// which chrome://tracing and Perfetto open, even cut short by a crash):
//   each collective: a span (op, dtype, count, algorithm, group, sequence),
//   inside it each schedule step: a span, and inside the step
//     copy      a local copy (bytes)
//     send      handing one transfer to the transport (peer, bytes)
//     recv      from waiting for one transfer's first segment to its last
//               segment's arrival and reduction (peer, bytes, combine)
//       reduce  one segment reduced into the buffer (bytes)
//     wait sends  until the step's sends have left
// and a label per rank: the transport that carries its messages.
// Events are recorded as fixed-size records (no formatting, no allocation
// once the buffer has grown) and written out every 64 Ki events and when the
// world goes away. Off, the runtime pays one pointer test per event site.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <collie/collectives/algorithms.hpp>
#include <collie/dtype.hpp>
#include <collie/reduce.hpp>

namespace collie {

class Tracer {
 public:
  enum class Kind : std::uint8_t { Collective, Step, Copy, Send, Recv, Reduce, WaitSends };

  // Opens DIR/collie-trace-rank<rank>.json (creating DIR). Throws
  // collie::Error naming the file when it cannot.
  static std::unique_ptr<Tracer> open(const std::string& dir, int rank, int world_size);
  ~Tracer();  // writes what is left and closes the array
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  using Clock = std::chrono::steady_clock;
  static Clock::time_point now() { return Clock::now(); }

  // What a collective span carries.
  struct CallInfo {
    collectives::Collective collective;
    DataType dtype;
    ReduceOp op;
    collectives::Algorithm algorithm;
    int root;
    std::uint64_t count;
    std::uint64_t sequence;
    std::uint32_t group;  // from group_id()
    std::uint32_t steps;
    bool board = false;  // on the group's board (no schedule): "algorithm":"board"
  };
  // A small number for a group's name (kept for the file); a group asks
  // once, when it is made.
  std::uint32_t group_id(const std::string& name);

  void collective(Clock::time_point begin, Clock::time_point end, const CallInfo& info);
  // step: the schedule step's index; peer: group rank, -1 for none;
  // reduce: for a receive, whether it reduces.
  void event(Kind kind, Clock::time_point begin, Clock::time_point end, std::uint32_t step,
             int peer, std::uint64_t bytes, bool reduce = false);

  // A line beside the rank's name in the viewer (a "process_labels"
  // metadata event), such as the transport that carries its messages.
  // Quotes and backslashes in `text` are escaped.
  void label(const std::string& text);

  const std::string& path() const { return path_; }

 private:
  Tracer(std::string path, std::FILE* file, int rank);
  struct Record {
    Kind kind;
    bool reduce;
    std::int32_t peer;
    std::uint32_t step;
    std::uint32_t tid;
    std::int64_t begin_ns;  // since start_
    std::int64_t end_ns;
    std::uint64_t bytes;
    std::uint32_t call;  // index into calls_ (collective spans)
  };
  static std::uint32_t thread_id();
  std::int64_t since_start(Clock::time_point t) const;
  void push(const Record& r);
  void flush_locked();

  std::string path_;
  std::FILE* file_;
  int rank_;
  Clock::time_point start_;
  std::mutex mu_;
  std::vector<Record> records_;
  std::vector<CallInfo> calls_;
  std::vector<std::string> groups_;
  bool first_ = true;  // no event written yet (no comma before it)
  bool write_failed_ = false;
};

}  // namespace collie
