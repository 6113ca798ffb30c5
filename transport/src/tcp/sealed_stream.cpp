// A sealed connection's flush() and receive(): records out and in
// (sealed_stream.hpp).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <sys/socket.h>

#include <fmt/format.h>

#include "connections.hpp"
#include "peer_stream.hpp"

namespace collie::transport::tcp {

void PeerStream::flush_sealed(std::size_t budget) {
  auto& s = *sealed;
  while (state == PeerState::Ready) {
    if (s.out_begin < s.out_end) {
      const ssize_t w = ::send(fd(), s.out.data() + s.out_begin, s.out_end - s.out_begin,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (retry_after(errno)) continue;
        return;
      }
      s.out_begin += static_cast<std::size_t>(w);
      if (s.out_begin < s.out_end) return;  // the kernel's buffer is full
      s.out_begin = s.out_end = 0;
      advance(std::exchange(s.out_plain, 0));  // the batch is out: its sends are done
      continue;
    }
    if (sends.empty() || budget == 0) return;
    // Seals the next batch: up to kBatchRecords records of the queued bytes.
    Pieces pieces;
    std::size_t count = 0;
    const std::size_t room =
        std::min(budget, SealedState::kBatchRecords * seal::kMaxRecordBytes);
    std::size_t total = gather(pieces, room, count);
    // gather() limits payload bytes; headers may take a batch past its
    // records, so it is cut where the records end.
    total = std::min(total, SealedState::kBatchRecords * seal::kMaxRecordBytes);
    if (total == 0) return;  // a striped message's lanes carry the rest
    std::array<std::span<const std::byte>, kMaxPieces> spans;
    for (std::size_t i = 0; i < count; ++i)
      spans[i] = {static_cast<const std::byte*>(pieces[i].iov_base), pieces[i].iov_len};
    s.out_end += s.sealer.seal_records(std::span(spans.data(), count), total,
                                       s.out.data() + s.out_end);
    s.out_plain = total;
    budget -= std::min(budget, total);
  }
}

bool PeerStream::open_records() {
  auto& s = *sealed;
  for (;;) {
    if (!parse_staged()) return false;
    if (staged_begin == staged_end) {
      // As receive() does: a consuming receive's bytes keep their phase.
      staged_begin = staged_end =
          rx == Rx::Payload && current_recv && current_recv->consume ? current_got % kPhase : 0;
    } else if (staged_begin > 0) {  // a header's first bytes
      std::memmove(staging.data(), staging.data() + staged_begin, staged_end - staged_begin);
      staged_end -= staged_begin;
      staged_begin = 0;
    }
    const std::size_t avail = s.in_end - s.in_begin;
    if (avail < seal::kLengthBytes) return true;
    const std::size_t n = seal::Opener::announced(s.in.data() + s.in_begin);
    if (n == 0 || n > seal::kMaxRecordBytes) {
      fail(ErrorKind::Protocol,
           fmt::format("{} broke the sealed protocol: its record number {} says it holds {} "
                       "bytes (1 to {} may): the stream was changed on its way",
                       table.describe_peer(rank), s.opener.records(), n,
                       seal::kMaxRecordBytes));
      return false;
    }
    if (avail < n + seal::kOverheadBytes) return true;
    const std::uint8_t* record = s.in.data() + s.in_begin;
    // A record wholly within the payload being read, bound for a buffer
    // (a posted receive's or a queued message's, not a consumer), is
    // opened straight into it: no copy more than the clear stream makes.
    // AES-GCM writes the plaintext before the tag is checked, so a record
    // that fails leaves zeros there, not its bytes.
    auto* target = current_target();
    const bool direct = rx == Rx::Payload && staged_begin == staged_end && target != nullptr &&
                        current_remaining() >= n;
    auto* out = direct ? reinterpret_cast<std::uint8_t*>(target + current_got)
                       : staging.data() + staged_end;
    if (!s.opener.open(record, n, out)) {
      std::memset(out, 0, n);
      fail(ErrorKind::Protocol,
           fmt::format("{} sent a sealed record (number {}, {} bytes) that fails its "
                       "authentication: it was changed, forged, cut, replayed or reordered on "
                       "its way; none of it was used",
                       table.describe_peer(rank), s.opener.records() - 1, n));
      return false;
    }
    s.in_begin += n + seal::kOverheadBytes;
    if (s.in_begin == s.in_end) s.in_begin = s.in_end = 0;
    if (direct) {
      account(n);
    } else {
      staged_end += n;
    }
  }
}

void PeerStream::receive_sealed() {
  auto& s = *sealed;
  for (;;) {
    if (!open_records()) return;
    if (s.in_begin > 0) {  // a record's first bytes go to the front
      std::memmove(s.in.data(), s.in.data() + s.in_begin, s.in_end - s.in_begin);
      s.in_end -= s.in_begin;
      s.in_begin = 0;
    }
    const std::size_t asked = s.in.size() - s.in_end;
    const ssize_t n = ::recv(fd(), s.in.data() + s.in_end, asked, MSG_DONTWAIT);
    if (n == 0) {
      fail(ErrorKind::Connection,
           s.in_end > 0 ? closed_reason() + ", in the middle of a sealed record" : closed_reason());
      return;
    }
    if (n < 0) {
      if (retry_after(errno)) continue;
      return;
    }
    s.in_end += static_cast<std::size_t>(n);
    if (static_cast<std::size_t>(n) < asked) {  // drained: open what came and stop
      open_records();
      return;
    }
  }
}

}  // namespace collie::transport::tcp
