// Chrome trace-event JSON of a rank's calls and steps (trace.hpp).
#include "watch/trace.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

namespace collie {

namespace {

constexpr std::size_t kFlushEvery = 64 * 1024;

const char* kind_name(Tracer::Kind k) {
  switch (k) {
    case Tracer::Kind::Collective: return "collective";
    case Tracer::Kind::Step: return "step";
    case Tracer::Kind::Copy: return "copy";
    case Tracer::Kind::Send: return "send";
    case Tracer::Kind::Recv: return "recv";
    case Tracer::Kind::Reduce: return "reduce";
    case Tracer::Kind::WaitSends: return "wait sends";
  }
  return "?";
}

}  // namespace

std::unique_ptr<Tracer> Tracer::open(const std::string& dir, int rank, int world_size) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(fmt::format("rank {}: COLLIE_TRACE: cannot create the directory {}: {}", rank, dir,
                            ec.message()));
  const auto path = (std::filesystem::path(dir) / fmt::format("collie-trace-rank{}.json", rank)).string();
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr)
    throw Error(fmt::format("rank {}: COLLIE_TRACE: cannot write {}: {}", rank, path,
                            std::error_code(errno, std::generic_category()).message()));
  auto tracer = std::unique_ptr<Tracer>(new Tracer(path, file, rank));
  // The wall clock at ts 0 lets `collie trace merge` line ranks up.
  const auto unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  fmt::print(file,
             "[\n{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"name\":"
             "\"rank {0}\",\"collie_rank\":{0},\"collie_world_size\":{1},\"collie_unix_us\":{2}}}}},\n"
             "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{"
             "\"sort_index\":{0}}}}}",
             rank, world_size, unix_us);
  std::fflush(file);
  tracer->first_ = false;
  collie::log().info("rank {}: tracing to {}", rank, path);
  return tracer;
}

Tracer::Tracer(std::string path, std::FILE* file, int rank)
    : path_(std::move(path)), file_(file), rank_(rank), start_(Clock::now()) {
  records_.reserve(1024);
}

Tracer::~Tracer() {
  std::lock_guard lock(mu_);
  flush_locked();
  std::fputs("\n]\n", file_);
  if (std::fclose(file_) != 0)
    collie::log().error("rank {}: writing the trace {} failed", rank_, path_);
}

std::uint32_t Tracer::thread_id() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t id = next++;
  return id;
}

std::int64_t Tracer::since_start(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
}

std::uint32_t Tracer::group_id(const std::string& name) {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i] == name) return static_cast<std::uint32_t>(i);
  groups_.push_back(name);
  return static_cast<std::uint32_t>(groups_.size() - 1);
}

void Tracer::push(const Record& r) {
  records_.push_back(r);
  if (records_.size() >= kFlushEvery) flush_locked();
}

void Tracer::collective(Clock::time_point begin, Clock::time_point end, const CallInfo& info) {
  const auto tid = thread_id();
  std::lock_guard lock(mu_);
  calls_.push_back(info);
  push(Record{Kind::Collective, false, -1, 0, tid, since_start(begin), since_start(end),
              info.count * dtype_size(info.dtype), static_cast<std::uint32_t>(calls_.size() - 1)});
}

void Tracer::event(Kind kind, Clock::time_point begin, Clock::time_point end, std::uint32_t step,
                   int peer, std::uint64_t bytes, bool reduce) {
  const auto tid = thread_id();
  std::lock_guard lock(mu_);
  push(Record{kind, reduce, peer, step, tid, since_start(begin), since_start(end), bytes, 0});
}

void Tracer::label(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  std::lock_guard lock(mu_);
  flush_locked();  // what came before stays before
  fmt::print(file_, "{}{{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":{},\"tid\":0,"
             "\"args\":{{\"labels\":\"{}\"}}}}",
             first_ ? "" : ",\n", rank_, escaped);
  first_ = false;
  std::fflush(file_);
}

void Tracer::flush_locked() {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  for (const auto& r : records_) {
    fmt::format_to(it, "{}", first_ ? "" : ",\n");
    first_ = false;
    const double ts = static_cast<double>(r.begin_ns) / 1000.0;
    const double dur = static_cast<double>(r.end_ns - r.begin_ns) / 1000.0;
    if (r.kind == Kind::Collective) {
      const auto& c = calls_[r.call];
      fmt::format_to(it,
                     "{{\"name\":\"{}\",\"cat\":\"collective\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},"
                     "\"pid\":{},\"tid\":{},\"args\":{{\"collective\":\"{}\",\"op\":\"{}\",\"dtype\":\"{}\","
                     "\"count\":{},\"bytes\":{},\"algorithm\":\"{}\",\"root\":{},\"group\":\"{}\","
                     "\"sequence\":{},\"steps\":{}}}}}",
                     collectives::collective_name(c.collective), ts, dur, rank_, r.tid,
                     collectives::collective_name(c.collective),
                     collectives::reduces(c.collective) ? reduce_op_name(c.op) : "none",
                     dtype_name(c.dtype), c.count, r.bytes,
                     c.board ? std::string_view("board") : collectives::algorithm_name(c.algorithm),
                     c.root, groups_.at(c.group),
                     c.sequence, c.steps);
      continue;
    }
    std::string name = r.kind == Kind::Step ? fmt::format("step {}", r.step) : kind_name(r.kind);
    fmt::format_to(it,
                   "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},"
                   "\"pid\":{},\"tid\":{},\"args\":{{\"step\":{}",
                   name, kind_name(r.kind), ts, dur, rank_, r.tid, r.step);
    if (r.peer >= 0) fmt::format_to(it, ",\"peer\":{}", r.peer);
    if (r.kind != Kind::Step) fmt::format_to(it, ",\"bytes\":{}", r.bytes);
    if (r.kind == Kind::Recv) fmt::format_to(it, ",\"combine\":\"{}\"", r.reduce ? "reduce" : "copy");
    fmt::format_to(it, "}}}}");
  }
  records_.clear();
  calls_.clear();
  if ((std::fwrite(out.data(), 1, out.size(), file_) != out.size() || std::fflush(file_) != 0) &&
      !write_failed_) {
    write_failed_ = true;  // said once: the job goes on, its trace is incomplete
    collie::log().error("rank {}: writing the trace {} failed ({}); it will be incomplete", rank_,
                        path_, std::strerror(errno));
  }
}

}  // namespace collie
