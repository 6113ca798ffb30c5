// A worker's buffers in device memory (worker.hpp): allocated through the
// device backend (CUDA, or the tests' stand-in), and staged through host
// memory for what the CPU does to them (the built-in operations, and the
// bytes a transfer moves). Kernels and collectives take the device pointer
// itself.
#include <cstring>
#include <new>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "worker.hpp"

namespace collie::mw {

namespace {

device::Backend& backend_for(int device) {
  device::Backend* b = device::backend();
  if (b == nullptr)
    throw device::DeviceError(fmt::format("memory on cuda:{} asked for, but this worker has no "
                                          "CUDA (collie was built without it)",
                                          device));
  return *b;
}

}  // namespace

std::shared_ptr<std::byte> Worker::allocate(std::size_t bytes, int device) {
  if (device < 0) {
    constexpr std::align_val_t align{64};
    try {
      auto* p = static_cast<std::byte*>(::operator new(bytes == 0 ? 1 : bytes, align));
      return std::shared_ptr<std::byte>(p, [](std::byte* q) { ::operator delete(q, align); });
    } catch (const std::bad_alloc&) {
      throw Error(fmt::format("out of memory for {} bytes", bytes));
    }
  }
  device::Backend& b = backend_for(device);
  auto* p = static_cast<std::byte*>(b.allocate_device(device, bytes));
  // The backend outlives every buffer: a worker frees its buffers before run() returns.
  return std::shared_ptr<std::byte>(p, [&b, device](std::byte* q) { b.free_device(device, q); });
}

void Worker::download(const Buf& b, void* host) {
  if (b.bytes == 0) return;
  auto engine = engines_->lend(backend_for(b.device), b.device);
  engine->set_timeout(options_.timeout);
  device::copy(engine.get(), host, -1, b.data.get(), b.device, b.bytes);
}

void Worker::upload(Buf& b, const void* host) {
  if (b.bytes == 0) return;
  auto engine = engines_->lend(backend_for(b.device), b.device);
  engine->set_timeout(options_.timeout);
  device::copy(engine.get(), b.data.get(), b.device, host, -1, b.bytes);
}

Worker::Host::Host(Worker& w, Buf& b, bool load) : w_(w), b_(b) {
  if (b.device < 0) return;
  copy_.resize(b.bytes);
  if (load) w_.download(b, copy_.data());
}

std::byte* Worker::Host::data() {
  return b_.device < 0 ? b_.data.get() : copy_.data();
}

void Worker::Host::store() {
  if (b_.device >= 0) w_.upload(b_, copy_.data());
}

}  // namespace collie::mw
