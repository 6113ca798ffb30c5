// Captures what collie's shared logger writes, for tests that check the log.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/sinks/base_sink.h>

#include <collie/log.hpp>

namespace collie::test {

// While it lives, every line the shared logger writes at `level` or above is
// also kept here (the level is restored afterwards).
class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::warn)
      : sink_(std::make_shared<Sink>()), level_(collie::log().level()) {
    collie::log().sinks().push_back(sink_);
    collie::set_log_level(level);
  }
  ~LogCapture() {
    collie::set_log_level(level_);
    auto& sinks = collie::log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> lines() const { return sink_->lines(); }
  // The lines that contain `text`.
  std::vector<std::string> containing(const std::string& text) const {
    std::vector<std::string> found;
    for (auto& line : lines())
      if (line.find(text) != std::string::npos) found.push_back(line);
    return found;
  }

 private:
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::vector<std::string> lines() {
      std::lock_guard lock(mutex_);
      return lines_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      lines_.emplace_back(msg.payload.data(), msg.payload.size());
    }
    void flush_() override {}

   private:
    std::vector<std::string> lines_;
  };
  std::shared_ptr<Sink> sink_;
  spdlog::level::level_enum level_;
};

}  // namespace collie::test
