// The keys collie_torch writes in torch's store: its adapter's barrier,
// which torch's store lacks (torch_store.cpp), and each member's global
// rank, so that a sub-group's errors can give it (group_names.hpp).
// docs/design.md's key table gathers every component's keys (a test holds
// it to these tables).
//
// | key                                    | value                       | written by → read by |
// |----------------------------------------|-----------------------------|----------------------|
// | barrier/<name>/arrived, /open/<round>  | a torch store's barrier     | collie_torch's store adapter |
// | collie/global_rank/<group rank>        | the member's global rank    | collie_torch's sub-group → its members |
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
inline std::string global_rank(int group_rank) {
  return "collie/global_rank/" + std::to_string(group_rank);
}

}  // namespace collie_torch::keys
