// What the kernel says of one TCP flow's sending: what it has delivered,
// how long it was busy, and its latest rate. For the lanes' balance
// (lanes.hpp) and their report (the debug log at shutdown).
//
// In a file of its own: the fields come from <linux/tcp.h>, whose
// tcp_info is newer than the C library's <netinet/tcp.h> (which the rest
// of the transport, and Asio, include); the two cannot share a file.
#pragma once

#include <cstddef>
#include <cstdint>

namespace collie::transport::tcp {

struct FlowStats {
  bool known = false;             // getsockopt worked and the kernel has the fields
  std::uint64_t bytes_acked = 0;  // sent and acknowledged, over the flow's life
  std::uint64_t busy_us = 0;      // time it had data to send
  std::uint64_t rate = 0;         // the latest delivery rate sample, bytes a second
  std::uint32_t notsent = 0;      // bytes queued not yet sent
};
FlowStats flow_stats(int fd);

// Bytes written to `fd` and not yet acknowledged (sent or not); 0 if
// unknown.
std::size_t outstanding(int fd);

}  // namespace collie::transport::tcp
