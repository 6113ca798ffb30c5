// A stand-in for CUDA, for the staging tests on machines without a GPU
// (device/device.hpp's Backend). Strict where CUDA is strict, and stricter:
// - Its device memory is address space the CPU cannot touch (PROT_NONE):
//   code that reads or writes a device buffer directly crashes the test.
//   The bytes live in a shadow mapping that only its copies use.
// - Its copies run only when the engine is asked about them, at most one
//   per done() call: code that uses a staging block before its copy is
//   known to be done reads stale bytes, and the results are wrong.
// - A copy in the wrong direction (to_host from host memory, say) fails.
// - Copies that touch a chosen buffer fail, as a CUDA error would
//   (sticky for that engine, like a CUDA context's).
// Two devices: the first half of its memory is device 0, the second device 1.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "collective_check.hpp"
#include "device/device.hpp"

namespace collie::test {

class FakeDevice final : public device::Backend,
                         public check::DeviceMemory,
                         public std::enable_shared_from_this<FakeDevice> {
 public:
  explicit FakeDevice(std::size_t capacity = std::size_t{512} << 20);
  ~FakeDevice() override;

  // ---- Backend ----
  std::string name() const override { return "fake CUDA"; }
  int device_of(const void* p) override;
  int require_device(const void* p, const std::string& what) override;
  std::unique_ptr<device::Engine> make_engine(int device) override;
  void* allocate_device(int device, std::size_t bytes) override { return allocate_on(device, bytes); }
  void free_device(int, void* p) noexcept override { release(p); }

  // ---- DeviceMemory (allocations on device 0) ----
  void* allocate(std::size_t bytes) override { return allocate_on(0, bytes); }
  void release(void* p) override;
  void upload(void* device, const void* host, std::size_t bytes) override;
  void download(void* host, const void* device, std::size_t bytes) override;

  void* allocate_on(int device, std::size_t bytes);

  // Every later copy that touches [p, p + bytes) fails with `error`.
  void fail_copies_touching(const void* p, std::size_t bytes, std::string error);
  // The calling thread's pinned allocations fail from the `n`-th on (0: the
  // next), as cudaHostAlloc out of memory would; -1: they work again.
  static void fail_pinned_on_this_thread(int n);

  // Counters over all engines.
  std::size_t copies() const { return copies_.load(); }
  std::size_t waits_on_caller_streams() const { return afters_.load(); }
  // The most pinned bytes one engine held at once (taken, not yet given back).
  std::size_t peak_pinned_per_engine() const { return peak_pinned_.load(); }
  std::size_t engines_made() const { return engines_.load(); }

  // For the engines.
  std::byte* shadow_of(const void* device_pointer, std::size_t bytes) const;
  bool is_device(const void* p) const;
  // The error for a copy of [p, p + bytes), or "" if it may run.
  std::string copy_error(const void* p, std::size_t bytes) const;
  void count_copy() { ++copies_; }
  void count_after() { ++afters_; }
  void saw_pinned(std::size_t held);

 private:
  std::size_t capacity_;
  std::byte* base_ = nullptr;    // PROT_NONE: what callers see
  std::byte* shadow_ = nullptr;  // the bytes
  mutable std::mutex mu_;
  std::size_t next_[2] = {0, 0};  // bump allocators of the two halves
  std::map<const std::byte*, std::size_t> live_;
  const std::byte* poisoned_ = nullptr;
  std::size_t poisoned_bytes_ = 0;
  std::string poison_error_;
  std::atomic<std::size_t> copies_{0}, afters_{0}, peak_pinned_{0}, engines_{0};
};

// Installs a FakeDevice as the process's device backend for a scope.
class FakeDeviceScope {
 public:
  FakeDeviceScope() : device_(std::make_shared<FakeDevice>()) { device::install_backend(device_); }
  ~FakeDeviceScope() { device::install_backend(nullptr); }
  FakeDeviceScope(const FakeDeviceScope&) = delete;
  FakeDeviceScope& operator=(const FakeDeviceScope&) = delete;
  FakeDevice& operator*() const { return *device_; }
  FakeDevice* operator->() const { return device_.get(); }

 private:
  std::shared_ptr<FakeDevice> device_;
};

}  // namespace collie::test
