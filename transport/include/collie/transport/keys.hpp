// The keys the transports write in a job's store: each rank's records,
// under its transport group's name ("world" for the job's own), that its
// peers read to reach it. docs/design.md's key table gathers every
// component's keys (a test holds it to these tables).
//
// | key                                    | value                       | written by → read by |
// |----------------------------------------|-----------------------------|----------------------|
// | <group>/host/<r>                       | the rank's host identity    | open_transport → open_transport |
// | <group>/addr/<r>                       | "host:port" it listens on   | TCP backend → TCP backend, init |
// | <group>/shm/<r>                        | its mailbox record          | shm backend → shm backend |
#pragma once

#include <string>
#include <string_view>

namespace collie::keys {

inline std::string host(std::string_view group, int rank) {
  return std::string(group) + "/host/" + std::to_string(rank);
}
inline std::string tcp_address_prefix(std::string_view group) {
  return std::string(group) + "/addr/";
}
inline std::string tcp_address(std::string_view group, int rank) {
  return tcp_address_prefix(group) + std::to_string(rank);
}
inline std::string shm_mailbox(std::string_view group, int rank) {
  return std::string(group) + "/shm/" + std::to_string(rank);
}

}  // namespace collie::keys
