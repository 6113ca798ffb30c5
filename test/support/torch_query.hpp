// torch's TCPStore queries as its client writes them (little-endian), for
// tests that speak torch's protocol to the store over a raw connection:
//   TorchQuery(v1::SET).str("/a").str("x").b
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collie::test {

struct TorchQuery {
  std::vector<std::uint8_t> b;
  explicit TorchQuery(std::uint8_t type) { b.push_back(type); }
  TorchQuery& u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i)
      b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  TorchQuery& u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
      b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  TorchQuery& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

// A little-endian 64-bit number at `at` (torch's lengths and counters).
inline std::int64_t le64(const std::vector<std::uint8_t>& b, std::size_t at = 0) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(b[at + static_cast<std::size_t>(i)]) << (8 * i);
  return static_cast<std::int64_t>(v);
}

// torch 1.x's and 2.x's query numbers.
namespace v1 {
constexpr std::uint8_t SET = 0, COMPARE_SET = 1, GET = 2, ADD = 3, CHECK = 4, WAIT = 5,
                       GETNUMKEYS = 6, WATCH_KEY = 7, DELETE_KEY = 8;
}
namespace v2 {
constexpr std::uint8_t VALIDATE = 0, SET = 1, GET = 3, WAIT = 6, APPEND = 9, MULTI_GET = 10,
                       MULTI_SET = 11, CANCEL_WAIT = 12, PING = 13;
}

}  // namespace collie::test
