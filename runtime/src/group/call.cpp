// A call's signature in 64 bits, back, and in words; failure notices
// (call.hpp).
#include "group/call.hpp"

#include <bit>
#include <iterator>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie {

namespace {

constexpr int kCollectiveShift = 60;
constexpr int kDtypeShift = 56;
constexpr int kOpShift = 52;
constexpr int kAlgorithmShift = 46;
constexpr int kRootShift = 32;
constexpr std::uint64_t kFourBits = 0xf;
constexpr std::uint64_t kAlgorithmMask = 0x3f;
constexpr std::uint64_t kRootMask = 0x3fff;
constexpr std::uint64_t kNotice = kFourBits;  // in the collective field

// Every value there is fits, with the notice's code kept free.
static_assert(std::size(collectives::kCollectives) < kNotice);
static_assert(std::size(kDataTypes) <= kFourBits + 1);
static_assert(std::size(kReduceOps) <= kFourBits + 1);
static_assert(std::size(collectives::kAlgorithms) <= kAlgorithmMask + 1);

std::uint64_t field(std::uint64_t value, std::uint64_t mask, const char* what) {
  if (value > mask) {
    throw Error(
        fmt::format("internal: the call fingerprint has {} bits for the {}, and {} does "
                    "not fit: widen its field (runtime/src/group/call.hpp)",
                    std::bit_width(mask), what, value));
  }
  return value;
}

}  // namespace

std::uint64_t fingerprint(const Signature& s) {
  const auto collective = static_cast<std::uint64_t>(s.collective);
  if (collective >= kNotice) field(collective, kNotice - 1, "collective");
  return (collective << kCollectiveShift) |
         (field(static_cast<std::uint64_t>(s.dtype), kFourBits, "dtype") << kDtypeShift) |
         (field(static_cast<std::uint64_t>(s.op), kFourBits, "reduce op") << kOpShift) |
         (field(static_cast<std::uint64_t>(s.algorithm), kAlgorithmMask, "algorithm")
          << kAlgorithmShift) |
         ((static_cast<std::uint64_t>(static_cast<std::uint32_t>(s.root)) & kRootMask)
          << kRootShift) |
         (s.count & 0xffffffffu);
}

Signature decode_fingerprint(std::uint64_t f) {
  Signature s;
  s.collective = static_cast<Collective>((f >> kCollectiveShift) & kFourBits);
  s.dtype = static_cast<DataType>((f >> kDtypeShift) & kFourBits);
  s.op = static_cast<ReduceOp>((f >> kOpShift) & kFourBits);
  s.algorithm = static_cast<Algorithm>((f >> kAlgorithmShift) & kAlgorithmMask);
  s.root = static_cast<int>((f >> kRootShift) & kRootMask);
  s.count = f & 0xffffffffu;
  return s;
}

std::string describe(const Signature& s, bool with_algorithm) {
  const auto c = s.collective;
  // A call with a count per rank (vector_collective.cpp) carries Auto.
  if (s.algorithm == Algorithm::Auto &&
      (c == Collective::AllToAll || c == Collective::AllGather || c == Collective::Gather)) {
    return c == Collective::Gather
               ? fmt::format("gather_v({}, root={})", dtype_name(s.dtype), s.root)
               : fmt::format("{}_v({})", collectives::collective_name(c), dtype_name(s.dtype));
  }
  std::string out = fmt::format("{}(", collectives::collective_name(c));
  if (c != Collective::Barrier) {
    out += fmt::format("{}, {}", dtype_name(s.dtype), s.count);
    if (collectives::reduces(c)) out += fmt::format(", {}", reduce_op_name(s.op));
    if (collectives::has_root(c)) out += fmt::format(", root={}", s.root);
  }
  out += ")";
  if (with_algorithm) out += fmt::format(" with {}", collectives::algorithm_name(s.algorithm));
  return out;
}

std::uint64_t failure_notice(int world_rank, FailureReason reason) {
  return (kNotice << kCollectiveShift) | (static_cast<std::uint64_t>(reason) << 32) |
         static_cast<std::uint32_t>(world_rank);
}

FailureReason failure_reason(std::uint64_t notice) {
  switch (notice >> 32 & 0xf) {
    case static_cast<std::uint64_t>(FailureReason::DeviceError):
      return FailureReason::DeviceError;
    case static_cast<std::uint64_t>(FailureReason::TimedOut):
      return FailureReason::TimedOut;
    case static_cast<std::uint64_t>(FailureReason::Interrupted):
      return FailureReason::Interrupted;
    case static_cast<std::uint64_t>(FailureReason::Mismatch):
      return FailureReason::Mismatch;
    default:  // a reason this version does not know reads as a lost connection
      return FailureReason::ConnectionLost;
  }
}

bool is_failure_notice(std::uint64_t f) {
  return (f >> kCollectiveShift) == kNotice;
}

int failed_rank(std::uint64_t notice) {
  return static_cast<int>(notice & 0xffffffffu);
}

}  // namespace collie
