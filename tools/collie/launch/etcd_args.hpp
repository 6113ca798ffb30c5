// `collie launch --rdzv-backend etcd` (and etcd-v2, torchrun's other name):
// the launchers meet in an etcd cluster instead of a store one of them
// hosts, so any node may be lost, the first one included. What the command
// line says is resolved here: the members (--rdzv-endpoint
// host:port,host:port,...), how to reach them (--rdzv-conf protocol=,
// cacert=, cert=, key=, else COLLIE_ETCD_*), and the job's name in etcd
// (--rdzv-id). Each round's node 0 then hosts the ranks' store for that
// attempt (launch/store_route.hpp).
#pragma once

#include <string>

#include <collie/store/etcd_store.hpp>

#include "args.hpp"

namespace collie::cli {

bool is_etcd_backend(const std::string& backend);

// Takes one of etcd's --rdzv-conf keys (protocol, cacert, cert, key): false
// when `key` is not one of them.
bool apply_etcd_conf(LaunchArgs& a, const std::string& key, const std::string& value);

// Resolves an etcd rendezvous (throws collie::Error naming what is missing
// or refused): the members, TLS unless --insecure, a --rdzv-id of the job's
// own; --node-rank is ignored (said in a note), and no node hosts a store
// from the start.
void resolve_etcd_rendezvous(LaunchArgs& a);

// The launchers' store on etcd: under /collie/launch/<rdzv-id>/.
store::EtcdOptions etcd_launch_options(const LaunchArgs& a);

}  // namespace collie::cli
