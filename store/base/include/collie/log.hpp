// collie's logger.
//
// Every layer logs through one spdlog logger named "collie", written to
// stderr. Its level comes from COLLIE_LOG_LEVEL (off, error, warn, info,
// debug, trace; default warn) the first time log() is called, and can be
// changed later with set_log_level(). It lives in the base layer, so that
// every layer above can use it. Thread-safe.
#pragma once

#include <optional>
#include <string_view>

#include <spdlog/spdlog.h>

namespace collie {

// The shared logger. Created on first use.
spdlog::logger& log();

// Parses a level name as COLLIE_LOG_LEVEL accepts it (case-insensitive).
// Returns nullopt for anything else.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name);

// Sets the level of the shared logger.
void set_log_level(spdlog::level::level_enum level);

}  // namespace collie
