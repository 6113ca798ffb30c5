// The keys `collie bench` writes in the store of its own job or the one
// it measures. docs/design.md's key table gathers every component's keys
// (a test holds it to these tables).
//
// | key                                    | value                       | written by → read by |
// |----------------------------------------|-----------------------------|----------------------|
// | bench/...                              | `collie bench`'s own traffic | collie bench        |
#pragma once

#include <string>
#include <string_view>

namespace collie::keys {

inline constexpr std::string_view kBenchRawAddress = "bench/raw_address";
inline constexpr std::string_view kBenchDone = "bench/done";
// `collie bench store`'s keys of run `run` (its pid), and its rendezvous
// barrier of `clients` (with a counter beside it).
inline std::string bench_key(int run, std::string_view op, int client, int index) {
  return "bench/" + std::to_string(run) + "/" + std::string(op) + "/" + std::to_string(client) +
         "/" + std::to_string(index);
}
inline std::string bench_rendezvous(int run, int clients) {
  return "bench/rendezvous/" + std::to_string(run) + "/" + std::to_string(clients);
}

}  // namespace collie::keys
