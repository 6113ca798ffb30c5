// FNV-1a, 64 bits: a fast hash that every rank computes alike, for values
// derived from a shared text (a port from a job's id, a store key from a
// group's members). Not for secrets: crypto.hpp has the HMAC.
#pragma once

#include <cstdint>
#include <string_view>

namespace collie {

inline std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace collie
