// How the benchmarks print JSON: written by nlohmann/json (the CLI's one
// JSON writer), laid out for people and grep as well as for programs: the
// document's own fields on one line, each array of records with one record
// per line.
//
//   {"collie": "0.1.0", "host": "vm", "ranks": 2,
//    "results": [
//     {"size_bytes": 8, "time_us": 7.25},
//     {"size_bytes": 16, "time_us": 7.31}],
//    "wrong": 0}
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace collie::cli {

// `doc` (an object) as above, with a final newline.
std::string dump_records(const nlohmann::ordered_json& doc);

// `value` rounded to `decimals` places (what a benchmark's precision is
// worth; nlohmann writes the shortest text that reads back the same).
double rounded(double value, int decimals);

}  // namespace collie::cli
