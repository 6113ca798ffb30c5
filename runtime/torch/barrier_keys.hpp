// The keys collie_torch's adapter of torch's store writes for a barrier
// torch's store lacks (torch_store.cpp). docs/design.md's key table
// gathers every component's keys (a test holds it to these tables).
//
// | key                                    | value                       | written by → read by |
// |----------------------------------------|-----------------------------|----------------------|
// | barrier/<name>/arrived, /open/<round>  | a torch store's barrier     | collie_torch's store adapter |
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace collie_torch::keys {

inline std::string barrier_arrived(std::string_view name) {
  return "barrier/" + std::string(name) + "/arrived";
}
inline std::string barrier_open(std::string_view name, std::int64_t round) {
  return "barrier/" + std::string(name) + "/open/" + std::to_string(round);
}

}  // namespace collie_torch::keys
