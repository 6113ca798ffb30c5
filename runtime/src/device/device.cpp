// Device buffers, backend-neutral: where a buffer lives, the copy engines
// and their pool, copies between host and device (device.hpp).
#include "device.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

namespace collie::device {

// Defined by cuda_backend.cpp, or by no_cuda.cpp in a build without CUDA.
Backend* cuda_backend();

namespace {

std::mutex installed_mu;
std::shared_ptr<Backend> installed;            // keeps it alive
std::atomic<Backend*> installed_raw{nullptr};  // read on every call, without the lock

}  // namespace

Backend* backend() {
  if (Backend* b = installed_raw.load(std::memory_order_acquire)) return b;
  return cuda_backend();
}

void install_backend(std::shared_ptr<Backend> b) {
  std::lock_guard lock(installed_mu);
  installed_raw.store(b.get(), std::memory_order_release);
  installed = std::move(b);
}

std::string CallName::text() const {
  if (peer >= 0) return fmt::format("rank {}: {} rank {}", rank, op, peer);
  return fmt::format("rank {}: {}", rank, op);
}

std::shared_ptr<Engine> EnginePool::lend(Backend& b, int device) {
  std::unique_ptr<Engine> engine;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(spare_.begin(), spare_.end(),
                           [&](const auto& e) { return e->device() == device; });
    if (it != spare_.end()) {
      engine = std::move(*it);
      spare_.erase(it);
    }
  }
  if (!engine) engine = b.make_engine(device);
  auto self = shared_from_this();
  return std::shared_ptr<Engine>(engine.release(), [self](Engine* e) {
    std::unique_ptr<Engine> back(e);
    back->drain();
    std::lock_guard lock(self->mu_);
    if (self->spare_.size() < 4) self->spare_.push_back(std::move(back));
  });
}

Placement place(EnginePool& pool, MemoryKind kind, const void* input, std::size_t input_bytes,
                const void* output, std::size_t output_bytes, void* stream, const CallName& call,
                std::chrono::milliseconds timeout) {
  Placement p;
  if (kind == MemoryKind::Host) return p;
  Backend* b = backend();
  const bool in = input != nullptr && input_bytes > 0;
  const bool out = output != nullptr && output_bytes > 0;
  if (b == nullptr) {
    if (kind == MemoryKind::Cuda && (in || out))
      throw DeviceError(fmt::format("{}: the buffers were said to be CUDA device memory, but {}",
                                    call.text(), cuda::status()));
    return p;
  }
  if (kind == MemoryKind::Cuda) {
    if (in) p.input = b->require_device(input, call.text());
    if (out) p.output = output == input ? p.input : b->require_device(output, call.text());
  } else {
    if (in) p.input = b->device_of(input);
    if (out) p.output = output == input ? p.input : b->device_of(output);
  }
  if (p.input < 0 && p.output < 0) return p;
  if (p.input >= 0 && p.output >= 0 && p.input != p.output)
    throw DeviceError(fmt::format(
        "{}: the input is on cuda:{} and the output on cuda:{}: one call's device buffers must "
        "be on one device",
        call.text(), p.input, p.output));
  const int d = std::max(p.input, p.output);
  p.engine = pool.lend(*b, d);
  p.engine->set_timeout(timeout);
  p.engine->after(stream);
  return p;
}

void copy(Engine* engine, void* to, int to_device, const void* from, int from_device,
          std::size_t bytes) {
  if (bytes == 0 || to == from) return;
  if (to_device < 0 && from_device < 0) {
    std::memmove(to, from, bytes);
    return;
  }
  if (engine == nullptr) throw Error("internal: a device copy without an engine");
  Engine::Ticket t;
  if (to_device >= 0 && from_device >= 0) {
    const auto* f = static_cast<const std::byte*>(from);
    auto* d = static_cast<std::byte*>(to);
    if (f < d + bytes && d < f + bytes) {  // overlapping: through the host
      std::vector<std::byte> via(bytes);
      engine->wait(engine->to_host(via.data(), from, bytes));
      engine->wait(engine->to_device(to, via.data(), bytes));
      return;
    }
    t = engine->on_device(to, from, bytes);
  } else if (to_device >= 0) {
    t = engine->to_device(to, from, bytes);
  } else {
    t = engine->to_host(to, from, bytes);
  }
  engine->wait(t);
}

void transform(Engine& engine, std::byte* data, std::size_t count, std::size_t esize,
               std::size_t segment_bytes, const std::function<void(std::byte*, std::size_t)>& fn) {
  if (count == 0) return;
  const std::size_t per = std::max<std::size_t>(1, segment_bytes / esize);
  const std::size_t block = std::min(per, count) * esize;
  // Two blocks: segment k+1 comes in while segment k is transformed and
  // goes back.
  std::byte* blocks[2] = {engine.take_pinned(block), nullptr};
  struct Give {
    Engine& e;
    std::byte** b;
    ~Give() {
      e.drain();
      for (int i = 0; i < 2; ++i)
        if (b[i] != nullptr) e.give_pinned(b[i]);
    }
  } give{engine, blocks};
  if (count > per) blocks[1] = engine.take_pinned(block);
  Engine::Ticket in[2] = {0, 0};
  const std::size_t segments = (count + per - 1) / per;
  auto start = [&](std::size_t k) {
    const std::size_t n = std::min(per, count - k * per);
    in[k % 2] = engine.to_host(blocks[k % 2], data + k * per * esize, n * esize);
  };
  start(0);
  Engine::Ticket last = 0;
  for (std::size_t k = 0; k < segments; ++k) {
    engine.wait(in[k % 2]);
    // Segment k+1 comes in while k is transformed: its block was last read
    // by segment k-1's copy back, queued before it.
    if (k + 1 < segments) start(k + 1);
    const std::size_t n = std::min(per, count - k * per);
    fn(blocks[k % 2], n);
    last = engine.to_device(data + k * per * esize, blocks[k % 2], n * esize);
  }
  engine.wait(last);
}

}  // namespace collie::device
