// A rank's torch error file (launch/rank_error_file.hpp).
#include "rank_error_file.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace collie::cli {

std::optional<RankError> read_rank_error(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  // torch's format: {"message": {"message": "...", "extraInfo": {"py_callstack":
  // "...", "timestamp": "..."}}}; an older one has "message" as a string.
  const auto json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("message")) return std::nullopt;
  const auto& message = json["message"];
  RankError e;
  if (message.is_string()) {
    e.message = message.get<std::string>();
    return e;
  }
  if (!message.is_object() || !message.contains("message") || !message["message"].is_string())
    return std::nullopt;
  e.message = message["message"].get<std::string>();
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const auto& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string())
      e.traceback = extra["py_callstack"].get<std::string>();
    if (extra.contains("timestamp") && extra["timestamp"].is_string()) {
      try {
        e.timestamp = std::stoll(extra["timestamp"].get<std::string>());
      } catch (const std::exception&) {
      }
    }
  }
  return e;
}

}  // namespace collie::cli
