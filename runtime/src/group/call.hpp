// One collective call: what every rank of the group must call alike (its
// signature), its 64-bit fingerprint, and how it reads in messages.
//
// The fingerprint rides in the header of every message a collective sends
// (transport.hpp), so a rank that receives a message of another call can say
// which: "rank 2 called all_reduce(float32, 1024, sum) but rank 3 called
// broadcast(float32, 1024, root=0)". Its layout, high bits first:
//
//   bits 60-63  collective (0xf: a failure notice, below)
//        56-59  dtype
//        52-55  reduce op
//        46-51  algorithm (up to 64)
//        32-45  root (its low 14 bits)
//         0-31  count (its low 32 bits)
//
// A field that would not fit fails loudly (fingerprint() throws), so a new
// collective, dtype, op or algorithm cannot silently alias another; a test
// round-trips every combination. Roots and counts are cut: two calls that
// differ only by a multiple of 2^14 in root or 2^32 in count share a
// fingerprint (and still fail on the sizes of their messages).
//
// Failure notices: a rank whose collective failed tells its peers with a
// 0-byte message whose fingerprint is 0xf in the collective field, the
// reason in bits 32-35 (FailureReason: a dead connection, its own device, a
// timeout, a signal, a mismatch) and the world rank at fault in the low 32
// bits, so that they fail at once with the same story (docs/failures.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <collie/collectives/algorithms.hpp>
#include <collie/dtype.hpp>
#include <collie/reduce.hpp>

#include "device/staging.hpp"

namespace collie {

using collectives::Algorithm;
using collectives::Collective;

struct Signature {
  Collective collective = Collective::Barrier;
  DataType dtype = DataType::UInt8;
  ReduceOp op = ReduceOp::Sum;
  Algorithm algorithm = Algorithm::Auto;
  int root = 0;
  std::uint64_t count = 0;
};

// The signature in 64 bits (above). Throws collie::Error if a field does
// not fit its bits.
std::uint64_t fingerprint(const Signature& s);
// The signature back (root and count as far as they were kept). Not for
// failure notices.
Signature decode_fingerprint(std::uint64_t f);

// "all_reduce(float32, 1024, sum)", "broadcast(float32, 1024, root=0)",
// "barrier()"; "... with ring" when asked.
std::string describe(const Signature& s, bool with_algorithm);

enum class FailureReason : std::uint8_t {
  ConnectionLost = 0,  // the rank named died or its connection broke
  DeviceError = 1,     // the rank named failed on its own device
  TimedOut = 2,        // the sender timed out waiting for the rank named (itself: for nobody known)
  Interrupted = 3,     // the rank named was asked to stop (a signal: interrupt.hpp)
  Mismatch = 4,        // the sender found a mismatch with the rank named (the store has it)
};
std::uint64_t failure_notice(int world_rank, FailureReason reason = FailureReason::ConnectionLost);
FailureReason failure_reason(std::uint64_t notice);
bool is_failure_notice(std::uint64_t f);
int failed_rank(std::uint64_t notice);

// One call as this rank made it: the signature plus where its buffers are,
// its place in the group's sequence and its time limit.
struct Call {
  Collective collective = Collective::Barrier;
  DataType dtype = DataType::UInt8;
  const void* input = nullptr;
  void* output = nullptr;
  std::size_t count = 0;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  Algorithm algorithm = Algorithm::Auto;
  std::uint64_t sequence = 0;
  std::chrono::milliseconds timeout{0};
  // Where its buffers are and how they are staged, chosen when the call
  // started (device/staging.hpp).
  device::StagingPlan staging;
  // Its ticket among the group's calls on the board (board_call.hpp), or
  // -1: it goes by messages, as its schedule says.
  std::int64_t board = -1;

  Signature signature() const { return Signature{collective, dtype, op, algorithm, root, count}; }
};

}  // namespace collie
