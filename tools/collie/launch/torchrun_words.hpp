// The small readers of torchrun's words that both steps of
// torchrun_args.hpp use: whole numbers, comma-separated items, stream specs
// and truthy values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collie::cli {

// A whole number and nothing else; nullopt otherwise.
std::optional<int> parse_int(std::string_view text);

// The comma-separated items of `text` ("" has none; "a,,b" has an empty one).
std::vector<std::string_view> items_of(std::string_view text);

// torchrun's stream spec: "0".."3" (none, stdout, stderr, both) for every
// local rank, or "LOCAL_RANK:N,..." for some.
bool is_stream_spec(const std::string& text);

// "1", "true" or "yes", in any case.
bool truthy(const std::string& value);

}  // namespace collie::cli
