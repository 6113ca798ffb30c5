// Short descriptions of calls and durations for error messages.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>

namespace collie::store {

// "get('rank/3')"; long or binary keys are shortened and escaped.
std::string describe_call(std::string_view op, std::string_view key);
// "wait(['a', 'b', 'c', ... 97 more])"
std::string describe_call(std::string_view op, std::span<const std::string> keys);
// "300 s", "1.5 s", "250 ms"
std::string describe_duration(std::chrono::milliseconds d);
// The key as shown in messages: printable bytes as is, others as \xNN, cut at 80.
std::string printable_key(std::string_view key);

}  // namespace collie::store
