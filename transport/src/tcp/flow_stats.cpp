#include "flow_stats.hpp"

#include <cstddef>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

namespace collie::transport::tcp {

TcpHealth tcp_health(int fd) {
  tcp_info info{};
  socklen_t length = sizeof info;
  TcpHealth h;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return h;
  h.known = true;
  h.retransmitting = info.tcpi_unacked > 0 && info.tcpi_retransmits > 0;
  // Probes with our data queued and none in flight: the zero-window probes
  // of a closed receive window.
  h.probing = info.tcpi_probes > 0 && info.tcpi_unacked == 0 && outstanding(fd) > 0;
  h.since_last_ack = std::chrono::milliseconds(info.tcpi_last_ack_recv);
  return h;
}

FlowStats flow_stats(int fd) {
  tcp_info info{};
  socklen_t length = sizeof info;
  FlowStats s;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return s;
  // An older kernel fills less: its length says which fields it knows.
  if (length < offsetof(tcp_info, tcpi_busy_time) + sizeof info.tcpi_busy_time) return s;
  s.known = true;
  s.bytes_acked = info.tcpi_bytes_acked;
  s.busy_us = info.tcpi_busy_time;
  s.rate = info.tcpi_delivery_rate;
  return s;
}

std::size_t outstanding(int fd) {
  int queued = 0;
  if (::ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0) return 0;
  return static_cast<std::size_t>(queued);
}

}  // namespace collie::transport::tcp
