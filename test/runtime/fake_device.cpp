// A stand-in CUDA device for the staging tests (fake_device.hpp).
#include "fake_device.hpp"

#include <cstring>
#include <deque>
#include <stdexcept>
#include <sys/mman.h>
#include <vector>

#include <fmt/format.h>

namespace collie::test {

using device::DeviceError;
using device::Engine;

namespace {

thread_local int pinned_until_failure = -1;  // fail_pinned_on_this_thread()

class FakeEngine final : public Engine {
 public:
  FakeEngine(std::shared_ptr<FakeDevice> dev, int device) : dev_(std::move(dev)), device_(device) {}
  ~FakeEngine() override {
    drain();
    for (auto* b : pinned_)
      std::free(b);
  }

  std::string describe() const override { return fmt::format("fake:{}", device_); }
  int device() const override { return device_; }
  void after(void*) override { dev_->count_after(); }

  Ticket to_host(void* host, const void* d, std::size_t bytes) override {
    if (dev_->is_device(host) || !dev_->is_device(d))
      throw DeviceError("fake: to_host needs a host target and a device source");
    return queue(Op{host, d, bytes, Kind::ToHost});
  }
  Ticket to_device(void* d, const void* host, std::size_t bytes) override {
    if (!dev_->is_device(d) || dev_->is_device(host))
      throw DeviceError("fake: to_device needs a device target and a host source");
    return queue(Op{d, host, bytes, Kind::ToDevice});
  }
  Ticket on_device(void* to, const void* from, std::size_t bytes) override {
    if (!dev_->is_device(to) || !dev_->is_device(from))
      throw DeviceError("fake: on_device needs device memory on both sides");
    return queue(Op{to, from, bytes, Kind::OnDevice});
  }

  bool done(Ticket t) override {
    if (!ops_.empty() && ops_.front().ticket <= t) run_one();  // one copy per question
    check_error();
    return ops_.empty() || ops_.front().ticket > t;
  }
  void wait(Ticket t) override {
    while (!ops_.empty() && ops_.front().ticket <= t)
      run_one();
    check_error();
  }
  void drain() noexcept override {
    while (!ops_.empty())
      run_one();
  }
  void set_timeout(std::chrono::milliseconds) override {}  // its copies never hang

  std::byte* take_pinned(std::size_t bytes) override {
    if (pinned_until_failure == 0)
      throw DeviceError(
          fmt::format("{}: pinned host memory for staging: cudaHostAlloc({} bytes): "
                      "cudaErrorMemoryAllocation (out of memory)",
                      describe(), bytes));
    if (pinned_until_failure > 0) --pinned_until_failure;
    auto* b = static_cast<std::byte*>(std::malloc(std::max<std::size_t>(bytes, 1)));
    if (b == nullptr) throw DeviceError("fake: out of pinned memory");
    pinned_.push_back(b);
    sizes_[b] = bytes;
    held_ += bytes;
    dev_->saw_pinned(held_);
    return b;
  }
  void give_pinned(std::byte* b) noexcept override {
    held_ -= sizes_[b];
    sizes_.erase(b);
    std::erase(pinned_, b);
    std::free(b);
  }

 private:
  enum class Kind { ToHost, ToDevice, OnDevice };
  struct Op {
    void* to;
    const void* from;
    std::size_t bytes;
    Kind kind;
    Ticket ticket = 0;
  };

  Ticket queue(Op op) {
    op.ticket = ++last_;
    ops_.push_back(op);
    return op.ticket;
  }

  void run_one() {
    const Op op = ops_.front();
    ops_.pop_front();
    if (!error_.empty()) return;  // sticky: nothing runs after an error
    const void* d = op.kind == Kind::ToHost ? op.from : op.to;
    error_ = dev_->copy_error(d, op.bytes);
    if (error_.empty() && op.kind == Kind::OnDevice) error_ = dev_->copy_error(op.from, op.bytes);
    if (!error_.empty()) return;
    dev_->count_copy();
    if (op.bytes == 0) return;
    switch (op.kind) {
      case Kind::ToHost:
        std::memcpy(op.to, dev_->shadow_of(op.from, op.bytes), op.bytes);
        break;
      case Kind::ToDevice:
        std::memcpy(dev_->shadow_of(op.to, op.bytes), op.from, op.bytes);
        break;
      case Kind::OnDevice:
        std::memmove(dev_->shadow_of(op.to, op.bytes), dev_->shadow_of(op.from, op.bytes),
                     op.bytes);
        break;
    }
  }

  void check_error() const {
    if (!error_.empty())
      throw DeviceError(fmt::format("{}: a staging copy failed: {}", describe(), error_));
  }

  std::shared_ptr<FakeDevice> dev_;
  int device_;
  Ticket last_ = 0;
  std::deque<Op> ops_;
  std::string error_;
  std::vector<std::byte*> pinned_;
  std::map<std::byte*, std::size_t> sizes_;
  std::size_t held_ = 0;
};

}  // namespace

FakeDevice::FakeDevice(std::size_t capacity) : capacity_(capacity) {
  void* b = mmap(nullptr, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* s = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (b == MAP_FAILED || s == MAP_FAILED) throw std::runtime_error("fake device: mmap failed");
  base_ = static_cast<std::byte*>(b);
  shadow_ = static_cast<std::byte*>(s);
}

FakeDevice::~FakeDevice() {
  munmap(base_, capacity_);
  munmap(shadow_, capacity_);
}

bool FakeDevice::is_device(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= base_ && b < base_ + capacity_;
}

int FakeDevice::device_of(const void* p) {
  if (!is_device(p)) return -1;
  return static_cast<const std::byte*>(p) < base_ + capacity_ / 2 ? 0 : 1;
}

int FakeDevice::require_device(const void* p, const std::string& what) {
  const int d = device_of(p);
  if (d < 0)
    throw DeviceError(
        fmt::format("{}: the buffer at {} was said to be device memory, but it is "
                    "memory the CPU addresses",
                    what, p));
  return d;
}

std::unique_ptr<Engine> FakeDevice::make_engine(int device) {
  ++engines_;
  return std::make_unique<FakeEngine>(shared_from_this(), device);
}

void* FakeDevice::allocate_on(int device, std::size_t bytes) {
  std::lock_guard lock(mu_);
  const std::size_t half = capacity_ / 2;
  auto& next = next_[device];
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  if (next + size > half) throw std::runtime_error("fake device: out of memory");
  std::byte* p = base_ + static_cast<std::size_t>(device) * half + next;
  next += size;
  live_[p] = bytes;
  return p;
}

void FakeDevice::release(void* p) {
  std::lock_guard lock(mu_);
  live_.erase(static_cast<std::byte*>(p));
}

std::byte* FakeDevice::shadow_of(const void* p, std::size_t bytes) const {
  const auto* b = static_cast<const std::byte*>(p);
  if (!is_device(p) || b + bytes > base_ + capacity_)
    throw std::logic_error("fake device: not device memory");
  return shadow_ + (b - base_);
}

void FakeDevice::upload(void* d, const void* host, std::size_t bytes) {
  if (bytes > 0) std::memcpy(shadow_of(d, bytes), host, bytes);
}

void FakeDevice::download(void* host, const void* d, std::size_t bytes) {
  if (bytes > 0) std::memcpy(host, shadow_of(d, bytes), bytes);
}

void FakeDevice::fail_copies_touching(const void* p, std::size_t bytes, std::string error) {
  std::lock_guard lock(mu_);
  poisoned_ = static_cast<const std::byte*>(p);
  poisoned_bytes_ = bytes;
  poison_error_ = std::move(error);
}

std::string FakeDevice::copy_error(const void* p, std::size_t bytes) const {
  std::lock_guard lock(mu_);
  const auto* b = static_cast<const std::byte*>(p);
  if (poisoned_ != nullptr && b < poisoned_ + poisoned_bytes_ &&
      poisoned_ < b + std::max<std::size_t>(bytes, 1))
    return poison_error_;
  return "";
}

void FakeDevice::fail_pinned_on_this_thread(int n) {
  pinned_until_failure = n;
}

void FakeDevice::saw_pinned(std::size_t held) {
  auto peak = peak_pinned_.load();
  while (held > peak && !peak_pinned_.compare_exchange_weak(peak, held)) {
  }
}

}  // namespace collie::test
