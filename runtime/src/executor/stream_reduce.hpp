// Reduces a message into a buffer as it arrives: the consumer the executor
// hands Transport::irecv_consume for a receive that reduces, so the bytes
// are combined straight from where the transport holds them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <collie/dtype.hpp>
#include <collie/reduce.hpp>

namespace collie {

// Called with consecutive pieces of the payload (offset, bytes), in order,
// of any length (an element may be cut between two pieces), or with pieces
// of whole elements at any offset, in any order (a TCP message striped over
// lanes), and at any address (the kernels want elements aligned: a misaligned piece goes
// through an aligned bounce buffer; the TCP transport keeps pieces aligned
// where it can). `target` holds the elements to combine with, aligned; or,
// where `source` is given, `source` holds them and the sums go to `target`
// (each piece copied there just before it is reduced, while in cache).
struct StreamReducer {
  DataType dtype;
  ReduceOp op;
  std::size_t esize;
  std::byte* target;
  const std::byte* source = nullptr;
  std::size_t done = 0;                          // bytes reduced
  alignas(16) std::array<std::byte, 16> part{};  // the start of an element cut between pieces

  void operator()(std::size_t offset, std::span<const std::byte> piece) {
    const std::byte* p = piece.data();
    std::size_t n = piece.size();
    if (offset != done && offset % esize == 0 && n % esize == 0) {
      // A chunk out of order (a striped TCP message): whole elements, reduced
      // where they belong; `done` stays the in-order front.
      take(offset, n);
      reduce_at(offset, p, n);
      return;
    }
    if (const std::size_t held = offset - done; held > 0) {
      const std::size_t k = std::min(esize - held, n);
      std::memcpy(part.data() + held, p, k);
      p += k;
      n -= k;
      if (held + k < esize) return;
      take(done, esize);
      reduce(dtype, op, target + done, part.data(), 1);
      done += esize;
    }
    const std::size_t whole = n / esize * esize;
    take(done, whole);
    reduce_at(done, p, whole);
    done += whole;
    if (n > whole) std::memcpy(part.data(), p + whole, n - whole);
  }

 private:
  // Combines `bytes` (whole elements) at `p` into target's bytes from `at`.
  void reduce_at(std::size_t at, const std::byte* p, std::size_t bytes) {
    if (reinterpret_cast<std::uintptr_t>(p) % esize == 0) {
      reduce(dtype, op, target + at, p, bytes / esize);
      return;
    }
    alignas(64) std::array<std::byte, 4096> bounce;
    const std::size_t chunk = bounce.size() / esize * esize;
    for (std::size_t k = 0; k < bytes; k += chunk) {
      const std::size_t m = std::min(chunk, bytes - k);
      std::memcpy(bounce.data(), p + k, m);
      reduce(dtype, op, target + at + k, bounce.data(), m / esize);
    }
  }
  // The initial contents of target's bytes [at, at + bytes), from source.
  void take(std::size_t at, std::size_t bytes) {
    if (source != nullptr && bytes > 0) std::memcpy(target + at, source + at, bytes);
  }
};

}  // namespace collie
