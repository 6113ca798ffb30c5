// The transport a group runs on: a backend chosen for each peer.
//
// Today every peer is served by TCP (tcp.hpp). This is where a second
// backend joins: open_transport() makes the backends, decides for each peer
// which serves it (by a rule both ranks of a pair evaluate alike, such as
// "published the same host identity in the store"), and returns a
// PeerRouter over them (peer_router.hpp), or the one backend when a single
// backend serves every peer.
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
