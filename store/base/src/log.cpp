#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include <collie/log.hpp>

namespace collie {

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "off") return spdlog::level::off;
  if (lower == "error") return spdlog::level::err;
  if (lower == "warn" || lower == "warning") return spdlog::level::warn;
  if (lower == "info") return spdlog::level::info;
  if (lower == "debug") return spdlog::level::debug;
  if (lower == "trace") return spdlog::level::trace;
  return std::nullopt;
}

namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = std::make_shared<spdlog::logger>(
      "collie", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[collie %Y-%m-%d %H:%M:%S.%e pid %P] [%^%l%$] %v");
  logger->set_level(spdlog::level::warn);
  if (const char* env = std::getenv("COLLIE_LOG_LEVEL"); env != nullptr && *env != '\0') {
    if (auto level = parse_log_level(env)) {
      logger->set_level(*level);
    } else {
      logger->warn(
          "COLLIE_LOG_LEVEL='{}' is not one of off, error, warn, info, debug, trace; "
          "using warn",
          env);
    }
  }
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(spdlog::level::level_enum level) {
  log().set_level(level);
}

}  // namespace collie
