// The transport tags of a group's messages, encoded and decoded here only.
//
// A tag is 64 bits. A collective's messages:
//
//   bit  63     1
//   bits 40-62  the group's slot (its tag space: 0 for the world)
//   bits  0-39  the call's sequence number in its group
//
// A point-to-point message (bit 63 clear): bits 31-53 the slot, bits 0-30
// the program's tag (0 to 2^31 - 1). A call's diagnosis (bit 63 clear, bit
// 62 set): bits 31-53 the slot, bits 0-30 the call's sequence (its low 31
// bits): a failed call's words to its peers that no receive of a call or of
// the program ever takes (diagnosis.hpp). So no two calls of one group, and
// no two live groups that share a rank (new_group gives each a slot of its
// own, process_group.cpp), ever match each other's messages.
//
// Master-worker mode's messages (master_worker.hpp; bits 62-63 clear, bit
// 61 set): bits 56-60 the kind of message, bits 0-55 a sequence (the
// operation's on its worker, or a copy's). Only the world's ranks use them,
// one run at a time.
//
// The link probe's messages at init (link_probe.hpp; bits 61-63 clear, bit
// 60 set): bits 0-7 the kind of message.
//
// shrink()'s probes (shrink.cpp; bits 60-63 clear, bit 59 set): bits 31-53
// the slot of the group being shrunk. A group is shrunk once, and no two
// live groups that share a rank share a slot.
#pragma once

#include <cstdint>

namespace collie {

// The largest slot a group may have.
inline constexpr std::uint32_t kMaxSlot = 0x7fffffu;

inline constexpr std::uint64_t kSequenceMask = (std::uint64_t{1} << 40) - 1;

// The tag of a group's `sequence`-th collective.
inline std::uint64_t collective_tag(std::uint32_t slot, std::uint64_t sequence) {
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(slot & kMaxSlot) << 40) |
         (sequence & kSequenceMask);
}

// The sequence number of the call a collective tag belongs to.
inline std::uint64_t sequence_of_tag(std::uint64_t tag) {
  return tag & kSequenceMask;
}

// Whether `tag` is one of the collectives of the group with `slot` (not
// another group's, nor a point-to-point or diagnosis message).
inline bool is_collective_of(std::uint64_t tag, std::uint32_t slot) {
  return (tag >> 63) == 1 && ((tag >> 40) & kMaxSlot) == (slot & kMaxSlot);
}

// The tag of call #`sequence`'s diagnosis messages.
inline std::uint64_t diagnosis_tag(std::uint32_t slot, std::uint64_t sequence) {
  return (std::uint64_t{1} << 62) | (static_cast<std::uint64_t>(slot & kMaxSlot) << 31) |
         (sequence & ((std::uint64_t{1} << 31) - 1));
}

// The tag of the probes of a shrink() of the group with `slot`.
inline std::uint64_t shrink_tag(std::uint32_t slot) {
  return (std::uint64_t{1} << 59) | (static_cast<std::uint64_t>(slot & kMaxSlot) << 31);
}

// The tag of a point-to-point message with the program's `tag`.
inline std::uint64_t p2p_tag(std::uint32_t slot, int tag) {
  return (static_cast<std::uint64_t>(slot) << 31) | static_cast<std::uint64_t>(tag);
}

// A master-worker message of `kind` (0 to 31) for `sequence`.
inline std::uint64_t master_worker_tag(unsigned kind, std::uint64_t sequence) {
  return (std::uint64_t{1} << 61) | (static_cast<std::uint64_t>(kind & 31u) << 56) |
         (sequence & ((std::uint64_t{1} << 56) - 1));
}

// A link probe's message of `kind` (0 to 255).
inline std::uint64_t link_probe_tag(unsigned kind) {
  return (std::uint64_t{1} << 60) | (kind & 255u);
}

}  // namespace collie
