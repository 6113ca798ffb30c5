// The link between hosts as the world agreed on it at init
// (bootstrap/link_probe.hpp measures it): what Auto prices messages
// between hosts with.
#pragma once

#include <string>

namespace collie {

// (No defaults of its own: JobConfig's stand where nothing is measured.)
struct HostLink {
  double gbits = 0;       // rate, Gbit/s
  double latency_us = 0;  // one message's latency, microseconds
  std::string source;     // "COLLIE_HOST_LINK", "measured between rank 0 and rank 2 in 44 ms", ...
};

}  // namespace collie
