// A large call on device buffers, run in chunks staged whole
// (chunked_call.hpp): the chunks strategy of staging.hpp.
#include "executor/chunked_call.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include <collie/dtype.hpp>

namespace collie {

std::size_t chunks_of(const Call& call) {
  if (!call.staging.in_chunks()) return 1;
  const std::size_t per =
      std::max<std::size_t>(1, call.staging.chunk_bytes / dtype_size(call.dtype));
  return (call.count + per - 1) / per;
}

namespace {

// Two pinned blocks per device side of the call, given back when it ends.
class Blocks {
 public:
  Blocks(device::Engine* engine, std::size_t bytes, bool in, bool out, bool shared)
      : engine_(engine) {
    for (int b = 0; b < 2; ++b) {
      if (in) in_[b] = take(bytes);
      if (out) out_[b] = shared && in ? in_[b] : take(bytes);
    }
  }
  ~Blocks() {
    if (taken_.empty()) return;
    engine_->drain();  // no copy may still use a block
    for (auto* b : taken_)
      engine_->give_pinned(b);
  }
  Blocks(const Blocks&) = delete;
  Blocks& operator=(const Blocks&) = delete;

  std::byte* in(std::size_t k) const { return in_[k % 2]; }
  std::byte* out(std::size_t k) const { return out_[k % 2]; }

 private:
  std::byte* take(std::size_t bytes) {
    taken_.reserve(4);
    taken_.push_back(engine_->take_pinned(bytes));
    return taken_.back();
  }
  device::Engine* engine_;
  std::byte* in_[2]{};
  std::byte* out_[2]{};
  std::vector<std::byte*> taken_;
};

}  // namespace

void run_in_chunks(const Call& call,
                   const std::function<void(const Call&, std::exception_ptr)>& run_host) {
  device::Engine* const engine = call.staging.engine.get();
  const std::size_t es = dtype_size(call.dtype);
  const std::size_t per = std::max<std::size_t>(1, call.staging.chunk_bytes / es);
  const std::size_t chunks = chunks_of(call);
  const bool in_dev = engine != nullptr && call.input != nullptr && call.staging.input_device >= 0;
  const bool out_dev =
      engine != nullptr && call.output != nullptr && call.staging.output_device >= 0;
  const Blocks blocks(engine, per * es, in_dev, out_dev, call.input == call.output);
  auto count_of = [&](std::size_t k) { return std::min(per, call.count - k * per); };
  auto in_at = [&](std::size_t k) {
    return static_cast<const std::byte*>(call.input) + k * per * es;
  };
  auto out_at = [&](std::size_t k) { return static_cast<std::byte*>(call.output) + k * per * es; };

  // The copy out of the device of chunk k, queued after the copy back of
  // chunk k-2 that used the same block (the engine runs copies in order).
  device::Engine::Ticket fetched[2] = {0, 0};
  auto fetch = [&](std::size_t k) {
    if (in_dev) fetched[k % 2] = engine->to_host(blocks.in(k), in_at(k), count_of(k) * es);
  };
  // The copy back of chunk k, from the block chunk k+2 writes again.
  std::optional<device::Engine::Ticket> stored[2];
  std::exception_ptr failed;  // a device error: every later chunk fails alike
  auto staged = [&](auto&& step) {
    if (failed) return;
    try {
      step();
    } catch (const device::DeviceError&) {
      failed = std::current_exception();
    }
  };
  staged([&] { fetch(0); });
  for (std::size_t k = 0; k < chunks; ++k) {
    if (k + 1 < chunks) staged([&] { fetch(k + 1); });
    if (in_dev) staged([&] { engine->wait(fetched[k % 2]); });
    Call chunk = call;
    chunk.count = count_of(k);
    chunk.sequence = call.sequence + k;
    chunk.input = call.input == nullptr ? nullptr
                  : in_dev              ? static_cast<const void*>(blocks.in(k))
                                        : static_cast<const void*>(in_at(k));
    chunk.output = call.output == nullptr ? nullptr
                   : out_dev              ? static_cast<void*>(blocks.out(k))
                                          : static_cast<void*>(out_at(k));
    chunk.staging = {};  // host buffers: the blocks, or the caller's host memory
    if (auto& before = stored[k % 2]) staged([&] { engine->wait(*before); });
    run_host(chunk, failed);  // throws `failed`, if any, in the chunk's collective
    if (out_dev) stored[k % 2] = engine->to_device(out_at(k), blocks.out(k), chunk.count * es);
  }
  for (const auto& last : stored)
    if (last) engine->wait(*last);
}

}  // namespace collie
