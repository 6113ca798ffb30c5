// What both of `collie explain`'s formats say in words: sizes, ranges,
// what a run of elements holds, each rank's layout, the cost model and the
// request (explain.hpp). Private to tools/collie/explain/.
#pragma once

#include <string>
#include <vector>

#include "explain.hpp"

namespace collie::cli::explain {

// "16 B", "85.3333 MiB": the bench's labels.
std::string bytes_label(std::size_t bytes);
// "[4, 8)".
std::string range_label(const cs::Range& r);
// Whether a buffer's contents name each element's index ("a2+c2").
bool with_index(const Request& r);
// What a run of elements holds: "a2+b2+c2", "-" for nothing.
std::string content_label(const Request& r, const std::vector<cs::Run>& runs);
// What each rank's buffer holds, in words.
std::string layout_words(const Request& r);
// The cost model's constants, in words.
std::string model_words(const Request& r);
// "all_reduce on 4 ranks, 1024 float32 elements per rank (4 KiB)".
std::string request_words(const Request& r);

}  // namespace collie::cli::explain
