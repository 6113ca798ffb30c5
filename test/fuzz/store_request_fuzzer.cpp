// libFuzzer target: the bytes a client can send the store server, through
// the same code the server runs on them.
//
// The input is a byte stream after the handshake. It is cut into frames by
// FrameBuffer (in the server's read sizes), every frame is parsed with tight
// limits, and every request that parses is executed against a
// KeyValueState. Invariants checked: nothing crashes or leaks (ASan/UBSan),
// a request that parses re-encodes to the same bytes, and every reply is a
// well-formed frame within the message limit.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "key_value_state.hpp"
#include "protocol.hpp"

namespace {

using namespace collie::store;

class CheckingTarget final : public ReplyTarget {
 public:
  explicit CheckingTarget(std::uint32_t max) : max_(max) {}
  void deliver(std::vector<std::uint8_t> frame) override {
    if (frame.size() < 9 || wire::get_u32(frame.data()) != frame.size() - 4 ||
        frame.size() - 4 > max_) {
      std::abort();
    }
  }

 private:
  std::uint32_t max_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  StoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_keys_per_request = 16;
  limits.max_message_bytes = wire::kMinMessageBytes;
  KeyValueState state(limits, 8);
  CheckingTarget first(limits.max_message_bytes), second(limits.max_message_bytes);

  wire::FrameBuffer buffer(limits.max_message_bytes);
  std::size_t fed = 0;
  int frame_index = 0;
  while (fed < size) {
    auto space = buffer.prepare();
    // Vary the read size with the data itself, as a network would.
    const std::size_t n = std::min({space.size(), size - fed, std::size_t{1} + data[fed] % 97u});
    std::memcpy(space.data(), data + fed, n);
    buffer.commit(n);
    fed += n;
    std::span<const std::uint8_t> body;
    while (true) {
      const auto next = buffer.next(body);
      if (next == wire::FrameBuffer::Next::TooLarge) return 0;  // the server closes here
      if (next == wire::FrameBuffer::Next::NeedMore) break;
      const auto parsed = wire::parse_request(body, limits);
      if (parsed.kind == wire::ParsedRequest::Kind::Malformed) return 0;  // closes here too
      if (parsed.kind == wire::ParsedRequest::Kind::Ok) {
        const auto again = wire::encode(parsed.request);
        if (again.size() != body.size() + 4 ||
            std::memcmp(again.data() + 4, body.data(), body.size()) != 0) {
          std::abort();
        }
        // Alternate between two clients so waits, barriers and cancels mix.
        state.handle(frame_index++ % 2 == 0 ? first : second, parsed.request);
      }
    }
  }
  state.forget(first);
  state.forget(second);
  if (state.parked() != 0) std::abort();
  return 0;
}
