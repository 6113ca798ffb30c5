// The keys the launchers of a job's nodes write on the root of its store,
// to tell each other about failures, restarts, rounds and the end
// (nodes.hpp). docs/design.md's key table gathers every component's keys
// (a test holds it to these tables).
//
// | key                                    | value                       | written by → read by |
// |----------------------------------------|-----------------------------|----------------------|
// | collie/launch/attempt/<a>/failed       | why a node stopped          | launcher → launchers |
// | collie/launch/attempt/<a>/done, /left  | counters of nodes           | launcher → launchers |
// | collie/launch/attempt/<a>/restart      | (a barrier)                 | launchers            |
// | collie/launch/attempt/<a>/regroup      | "1": it ended for a change of nodes | launcher → launchers |
// | collie/launch/heartbeat/<node>         | a counter, beaten each 250 ms | launcher → launchers |
// | collie/launch/round/<r>/joined         | a counter: the nodes numbered as they join (c10d) | launcher → launchers |
// | collie/launch/round/<r>/node/<n>       | "<host> pid <pid>" of the n-th to join | launcher → launchers |
// | collie/launch/round/<r>/closed         | how many of them are its nodes (MIN:MAX) | store's launcher → launchers |
// | collie/launch/round/<r>/store          | "host:port" of the round's ranks' store (etcd) | round's node 0 → launchers |
// | collie/launch/round/<r>/beat/<n>       | in etcd, node n's heartbeat: put as it joins, on its launcher's lease | launcher → launchers |
// | collie/launch/ended                    | how the job ended, for nodes still waiting | launcher → launchers |
#pragma once

#include <string>
#include <string_view>

namespace collie::keys {

// The launchers' coordination of attempt `attempt`: "failed", "done",
// "left", "restart", "regroup".
inline std::string launch_attempt(int attempt, std::string_view what) {
  return "collie/launch/attempt/" + std::to_string(attempt) + "/" + std::string(what);
}
// The launchers' rendezvous of round `round` (torchrun's c10d: the nodes
// other than the store's own numbered as they join; an elastic job's nodes,
// again for each attempt): "joined", "node/<n>", "closed".
inline std::string launch_round(int round, std::string_view what) {
  return "collie/launch/round/" + std::to_string(round) + "/" + std::string(what);
}
inline std::string launch_ended() {
  return "collie/launch/ended";
}
inline std::string launch_heartbeat(int node) {
  return "collie/launch/heartbeat/" + std::to_string(node);
}

}  // namespace collie::keys
