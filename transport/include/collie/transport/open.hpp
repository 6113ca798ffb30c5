// The transport a group runs on: a backend chosen for each peer.
//
// Two backends: shared memory (shm.hpp) for peers on this host, TCP
// (tcp.hpp) for the others. open_transport() makes them, decides for each
// peer which serves it by a rule both ranks of a pair evaluate alike (they
// published the same host identity in the store, and both can share
// memory), and returns a PeerRouter over them (peer_router.hpp), or the one
// backend when a single backend serves every peer. TransportSettings::backend
// ("auto", "tcp", "shm"; COLLIE_TRANSPORT) forces one.
#pragma once

#include <memory>

#include <collie/store/store.hpp>
#include <collie/transport/transport.hpp>

namespace collie::transport {

// Opens this rank's transport: listens, publishes what peers need in
// `store`, and returns. Throws collie::Error if it cannot listen.
std::shared_ptr<Transport> open_transport(std::shared_ptr<store::Store> store,
                                          const TransportOptions& options);

}  // namespace collie::transport
