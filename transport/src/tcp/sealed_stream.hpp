// What a sealed connection keeps beside its PeerStream (docs/security.md,
// "The sealed wire"): the two directions' record keys, the records sealed
// and not yet written, and the bytes read and not yet opened.
//
// Sending: the queued sends' headers and payloads are sealed in records of
// up to seal::kMaxRecordBytes, a batch of up to kBatchRecords at a time,
// into `out`, and written from there; the sends a batch covers complete
// when the kernel has taken the whole batch, as a clear send completes when
// the kernel has taken its bytes (a send never completes with its bytes
// still in this process). Receiving: bytes are read into `in`; each whole
// record is opened (authenticated and decrypted) and counted as received
// only once its tag checked: a record wholly within the payload being read
// is opened straight into the receive's buffer (or the queued message's),
// others into the stream's staging buffer and parsed there as the clear
// stream's bytes are. A record that fails is wiped where it was opened and
// fails the stream: no receive completes, and no consumer is handed a byte,
// from a record that did not prove whole and unchanged.
//
// Memory: two buffers of kBatchRecords records (256 KiB) per sealed
// connection, beside the staging buffer; the mesh connects on first use, so
// a ring holds two such connections whatever the world's size.
//
// Guarded like the PeerStream it belongs to (the table's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <collie/seal.hpp>

namespace collie::transport::tcp {

struct SealedState {
  static constexpr std::size_t kBatchRecords = 2;
  static constexpr std::size_t kRecordRoom = seal::kMaxRecordBytes + seal::kOverheadBytes;

  SealedState(const seal::Key& send, const seal::Key& receive)
      : sealer(send), opener(receive), out(kBatchRecords * kRecordRoom),
        in(kBatchRecords * kRecordRoom) {}

  seal::Sealer sealer;
  seal::Opener opener;
  std::vector<std::uint8_t> out;  // sealed records [out_begin, out_end) still to write
  std::size_t out_begin = 0;
  std::size_t out_end = 0;
  std::size_t out_plain = 0;  // the bytes of the queued sends that batch holds
  std::vector<std::uint8_t> in;  // bytes [in_begin, in_end) read and not yet opened
  std::size_t in_begin = 0;
  std::size_t in_end = 0;
};

}  // namespace collie::transport::tcp
