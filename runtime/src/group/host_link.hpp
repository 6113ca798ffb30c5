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
  // The connections a pair's large messages take (COLLIE_STREAMS=auto: the
  // probe's choice; `gbits` is their rate together), and one flow's rate
  // alone where the probe measured more (0: not measured).
  int streams = 1;
  double one_flow_gbits = 0;
};

}  // namespace collie
