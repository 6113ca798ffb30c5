// A send or receive of the TCP transport, and how it finishes.
//
// A request is Pending until it is Done or Failed, once. Its state is an
// atomic, read without a lock (test(), the spinning waiter); everything else
// is guarded by the connection table's lock (connections.hpp) and may be
// read without it only after the state is final.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <collie/transport/transport.hpp>

#include "../request_state.hpp"
#include "wire.hpp"

namespace collie::transport::tcp {

using transport::ErrorKind;
using transport::State;

// A TCP request adds where its header stands on the wire.
struct TcpRequest final : RequestState {
  using RequestState::RequestState;
  // Guarded by the table's lock.
  bool header_built = false;
  std::size_t header_sent = 0;
  std::array<std::uint8_t, wire::kHeaderBytes> header{};
  // Striped over the pair's lanes (lanes.hpp): its payload's bytes up to
  // `dispensed` are a lane's; `moved` counts those written whole.
  bool striped = false;
  std::size_t dispensed = 0;
  // Striped over lanes that leave from more than one interface: kept until
  // the peer confirms it whole (wire::kConfirm), so that the chunks a lost
  // lane carried can go again over the others (lane_failover.cpp). Each
  // chunk's lane number (0: not taken yet).
  bool confirm = false;
  bool confirmed = false;
  std::vector<std::uint8_t> chunk_lanes;
  // A confirmation this rank sends: message number `whole_of` of the peer's
  // came whole (no payload, no caller waits for it).
  bool whole = false;
  std::uint64_t whole_of = 0;
};
using TcpRequestPtr = std::shared_ptr<TcpRequest>;

}  // namespace collie::transport::tcp
