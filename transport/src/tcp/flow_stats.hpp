// What the kernel says of one TCP flow's sending (TCP_INFO, SIOCOUTQ), read
// here only: whether its host still answers (check_alive()), what it has
// delivered and how fast (the lanes' balance, lanes.hpp, and their report
// in the debug log at shutdown).
//
// In a file of its own: the fields come from <linux/tcp.h>, whose
// tcp_info is newer than the C library's <netinet/tcp.h> (which the rest
// of the transport, and Asio, include); the two cannot share a file.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace collie::transport::tcp {

// Whether a connection's host still answers, for check_alive().
struct TcpHealth {
  bool known = false;           // getsockopt worked
  bool retransmitting = false;  // unacknowledged data is being sent again
  // Our data waits behind a receive window the peer closed, and probes of
  // the window have gone out since the last acknowledgement: a peer's kernel
  // answers each, however stopped the process, so unanswered ones mean it
  // is gone.
  bool probing = false;
  std::chrono::milliseconds since_last_ack{0};
};
TcpHealth tcp_health(int fd);

// A sending flow's totals and rate.
struct FlowStats {
  bool known = false;             // getsockopt worked and the kernel has the fields
  std::uint64_t bytes_acked = 0;  // sent and acknowledged, over the flow's life
  std::uint64_t busy_us = 0;      // time it had data to send
  std::uint64_t rate = 0;         // the latest delivery rate sample, bytes a second
};
FlowStats flow_stats(int fd);

// Bytes written to `fd` and not yet acknowledged (sent or not); 0 if
// unknown.
std::size_t outstanding(int fd);

}  // namespace collie::transport::tcp
