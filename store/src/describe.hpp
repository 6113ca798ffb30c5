// Short descriptions of store calls and keys for error messages (durations:
// <collie/duration.hpp>).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace collie::store {

// "get('rank/3')"; long or binary keys are shortened and escaped.
std::string describe_call(std::string_view op, std::string_view key);
// "wait(['a', 'b', 'c', ... 97 more])"
std::string describe_call(std::string_view op, std::span<const std::string> keys);
// The key as shown in messages: printable bytes as is, others as \xNN, cut at 80.
std::string printable_key(std::string_view key);

}  // namespace collie::store
