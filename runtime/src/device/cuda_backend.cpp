// The CUDA backend (built with -DCOLLIE_CUDA=ON or AUTO where CMake finds
// the toolkit). collie links the CUDA runtime statically; the runtime loads
// the driver (libcuda.so.1) only at its first call, so a machine without a
// driver runs collie as long as no buffer is on a device.
//
// Recognising device memory must not create a CUDA context (a host-only
// program on a GPU machine would pay hundreds of MiB of device memory per
// rank): if this process has not loaded the driver, no device memory
// exists; if it has, the driver's cuPointerGetAttributes answers without a
// context.
#include <algorithm>
#include <atomic>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <deque>
#include <dlfcn.h>
#include <link.h>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include <collie/coarse_clock.hpp>
#include <collie/duration.hpp>
#include <collie/log.hpp>

#include "device.hpp"

namespace collie {
namespace device {
namespace {

std::string cuda_error(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
}

[[noreturn]] void fail(const std::string& what, cudaError_t e) {
  throw DeviceError(fmt::format("{}: {}", what, cuda_error(e)));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(what, e);
}

// Makes `device` current on this thread for a scope, and puts the caller's
// back after (collie runs on the caller's threads).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device)
      check(cudaSetDevice(device), "cudaSetDevice");
    else
      previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Why CUDA is unusable here, or "" if it is usable.
std::string unusable_reason() {
  static const std::string reason = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return std::string();
    if (e == cudaSuccess || e == cudaErrorNoDevice) return std::string("no CUDA device found");
    if (e == cudaErrorInsufficientDriver) {
      void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW);
      if (h == nullptr) return std::string("no CUDA driver (libcuda.so.1) found");
      dlclose(h);
      int driver = 0, runtime = 0;
      cudaDriverGetVersion(&driver);
      cudaRuntimeGetVersion(&runtime);
      return fmt::format("the CUDA driver supports CUDA {}.{}, older than collie's runtime {}.{}",
                         driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    }
    return fmt::format("cudaGetDeviceCount failed: {}", cuda_error(e));
  }();
  return reason;
}

// The driver's pointer query, found only once the driver is loaded.
class PointerQuery {
 public:
  // -1 for memory the CPU addresses, else the device ordinal.
  int device_of(const void* p) {
    using Fn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
    auto fn = query_.load(std::memory_order_acquire);
    if (fn == nullptr) {
      // dlopen(RTLD_NOLOAD) of a library that is not loaded searches the
      // file system (more than a small send costs); the loader's count of
      // libraries loaded so far (nanoseconds) says whether anything new came.
      // That count takes the loader's lock, a twentieth of an 8 B
      // all_reduce on the board, so within one tick of the coarse clock
      // (1-4 ms) a count that had not moved is taken as read: device
      // memory needs the driver loaded and initialised first (cuInit alone
      // takes tens of milliseconds), so none can come from a driver loaded
      // within the tick.
      const auto tick = CoarseClock::now().time_since_epoch().count();
      if (tick == quiet_tick_.load(std::memory_order_relaxed)) return -1;
      const auto adds = libraries_loaded();
      if (adds == checked_at_.load(std::memory_order_acquire)) {
        quiet_tick_.store(tick, std::memory_order_relaxed);
        return -1;
      }
      void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      if (h == nullptr) {
        checked_at_.store(adds, std::memory_order_release);
        return -1;  // no driver loaded: no device memory exists
      }
      fn = reinterpret_cast<Fn>(dlsym(h, "cuPointerGetAttributes"));
      if (fn == nullptr) return -1;
      query_.store(fn, std::memory_order_release);  // the handle stays open
    }
    CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned type = 0;
    int ordinal = -1;
    unsigned managed = 0;
    void* out[] = {&type, &ordinal, &managed};
    if (fn(3, what, out, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return -1;
    if (type != CU_MEMORYTYPE_DEVICE || managed != 0) return -1;
    return ordinal;
  }

 private:
  // How many libraries the dynamic loader has loaded in this process.
  static unsigned long long libraries_loaded() {
    unsigned long long adds = 0;
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* out) {
          *static_cast<unsigned long long*>(out) = info->dlpi_adds;
          return 1;  // the first object says it
        },
        &adds);
    return adds;
  }

  std::atomic<CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr)> query_{nullptr};
  // libraries_loaded() when the driver was last found missing.
  std::atomic<unsigned long long> checked_at_{~0ull};
  // The coarse clock's tick in which the count was last found unmoved.
  std::atomic<CoarseClock::Clock::rep> quiet_tick_{0};
};

class CudaEngine final : public Engine {
 public:
  explicit CudaEngine(int device) : device_(device) {
    DeviceGuard on(device_);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }

  ~CudaEngine() override {
    DeviceGuard on(device_);
    drain();
    for (auto& [t, e] : pending_)
      cudaEventDestroy(e);
    for (auto e : spare_events_)
      cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
    for (auto& [block, size] : blocks_)
      cudaFreeHost(block);
  }

  std::string describe() const override { return fmt::format("cuda:{}", device_); }
  int device() const override { return device_; }

  void after(void* stream) override {
    DeviceGuard on(device_);
    cudaEvent_t e = event();
    auto s = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
    const auto r = cudaEventRecord(e, s);
    if (r != cudaSuccess) {
      spare_events_.push_back(e);
      fail("cudaEventRecord on the caller's stream", r);
    }
    const auto w = cudaStreamWaitEvent(stream_, e, 0);
    spare_events_.push_back(e);  // reusable once the wait is queued
    if (w != cudaSuccess) fail("cudaStreamWaitEvent", w);
  }

  Ticket to_host(void* host, const void* dev, std::size_t bytes) override {
    return queue(host, dev, bytes, cudaMemcpyDeviceToHost, "device to host");
  }
  Ticket to_device(void* dev, const void* host, std::size_t bytes) override {
    return queue(dev, host, bytes, cudaMemcpyHostToDevice, "host to device");
  }
  Ticket on_device(void* to, const void* from, std::size_t bytes) override {
    return queue(to, from, bytes, cudaMemcpyDeviceToDevice, "device to device");
  }

  bool done(Ticket t) override {
    while (!pending_.empty() && pending_.front().first <= t) {
      const auto r = cudaEventQuery(pending_.front().second);
      if (r == cudaErrorNotReady) return false;
      retire(r);
    }
    return true;
  }

  void wait(Ticket t) override {
    while (!pending_.empty() && pending_.front().first <= t) {
      const cudaEvent_t e = pending_.front().second;
      const bool finished = poll_until([e] { return cudaEventQuery(e) != cudaErrorNotReady; });
      if (!finished) {
        throw DeviceError(fmt::format(
            "{}: a staging copy has not finished after {} (the GPU is hung, or busy with other "
            "work for that long)",
            describe(), describe_duration(timeout_)));
      }
      retire(cudaEventQuery(e));
    }
  }

  void drain() noexcept override {
    const bool finished =
        poll_until([this] { return cudaStreamQuery(stream_) != cudaErrorNotReady; });
    if (!finished) {
      collie::log().error("{}: staging copies still running after {}; giving up on them",
                          describe(), describe_duration(timeout_));
    }
    for (auto& [t, e] : pending_)
      spare_events_.push_back(e);
    pending_.clear();
  }

  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  std::byte* take_pinned(std::size_t bytes) override {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (blocks_.at(*it) >= bytes) {
        auto* b = *it;
        free_.erase(it);
        return b;
      }
    }
    DeviceGuard on(device_);
    void* p = nullptr;
    const auto r = cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocPortable);
    if (r != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      fail(fmt::format("{}: pinned host memory for staging: cudaHostAlloc({} bytes)", describe(),
                       bytes),
           r);
    }
    auto* b = static_cast<std::byte*>(p);
    blocks_[b] = bytes;
    cached_ += bytes;
    return b;
  }

  void give_pinned(std::byte* block) noexcept override {
    // Kept for reuse up to 256 MiB in all; larger pools give back the rest.
    if (cached_ > (std::size_t{256} << 20)) {
      cached_ -= blocks_[block];
      blocks_.erase(block);
      cudaFreeHost(block);
      return;
    }
    free_.push_back(block);
  }

 private:
  cudaEvent_t event() {
    if (!spare_events_.empty()) {
      auto e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }

  Ticket queue(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
               const char* what) {
    DeviceGuard on(device_);
    const auto r = cudaMemcpyAsync(to, from, bytes, kind, stream_);
    if (r != cudaSuccess)
      fail(fmt::format("{}: cudaMemcpyAsync {} of {} bytes", describe(), what, bytes), r);
    cudaEvent_t e = event();
    const auto rr = cudaEventRecord(e, stream_);
    if (rr != cudaSuccess) {
      spare_events_.push_back(e);
      fail("cudaEventRecord", rr);
    }
    pending_.emplace_back(++last_, e);
    return last_;
  }

  // Polls `finished` until it is true (then true) or the timeout passes
  // (then false): yielding for the first 50 us (a copy takes microseconds),
  // then sleeping in steps that double up to 1 ms, so that ranks sharing
  // few cores let each other run.
  template <class Finished>
  bool poll_until(const Finished& finished) const {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto pause = std::chrono::microseconds(1);
    while (!finished()) {
      const auto waited = Clock::now() - start;
      if (waited > timeout_) return false;
      if (waited < std::chrono::microseconds(50)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
    return true;
  }

  void retire(cudaError_t r) {
    spare_events_.push_back(pending_.front().second);
    pending_.pop_front();
    if (r != cudaSuccess) fail(fmt::format("{}: a staging copy failed", describe()), r);
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  Ticket last_ = 0;
  std::deque<std::pair<Ticket, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> spare_events_;
  std::map<std::byte*, std::size_t> blocks_;  // every pinned block, with its size
  std::vector<std::byte*> free_;
  std::size_t cached_ = 0;
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
};

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "CUDA"; }

  int device_of(const void* p) override { return query_.device_of(p); }

  int require_device(const void* p, const std::string& what) override {
    const auto why = unusable_reason();
    if (!why.empty())
      throw DeviceError(
          fmt::format("{}: the buffer was said to be CUDA device memory, but CUDA is "
                      "not usable here: {}",
                      what, why));
    const int d = device_of(p);
    if (d < 0)
      throw DeviceError(fmt::format(
          "{}: the buffer at {} was said to be CUDA device memory, but it is memory the CPU "
          "addresses (pageable, pinned or managed): say MemoryKind::Host or Auto",
          what, p));
    return d;
  }

  std::unique_ptr<Engine> make_engine(int device) override {
    const auto why = unusable_reason();
    if (!why.empty()) throw DeviceError(fmt::format("CUDA is not usable here: {}", why));
    return std::make_unique<CudaEngine>(device);
  }

  void* allocate_device(int device, std::size_t bytes) override {
    const auto why = unusable_reason();
    if (!why.empty())
      throw DeviceError(fmt::format("device memory of {} bytes on cuda:{}: CUDA is not usable "
                                    "here: {}",
                                    bytes, device, why));
    DeviceGuard on(device);
    void* p = nullptr;
    const auto r = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
    if (r != cudaSuccess) {
      cudaGetLastError();
      fail(fmt::format("cudaMalloc of {} bytes on cuda:{}", bytes, device), r);
    }
    return p;
  }

  void free_device(int device, void* p) noexcept override {
    DeviceGuard on(device);
    cudaFree(p);
  }

 private:
  PointerQuery query_;
};

}  // namespace

Backend* cuda_backend() {
  static CudaBackend b;
  return &b;
}

}  // namespace device

namespace cuda {

bool built_in() {
  return true;
}

int device_count() {
  if (!device::unusable_reason().empty()) return 0;
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::string status() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const auto version = fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10);
  const auto why = device::unusable_reason();
  if (!why.empty()) return fmt::format("CUDA {} built in; not usable here: {}", version, why);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  const int n = device_count();
  std::string devices;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess)
      devices += fmt::format("{}cuda:{} {}", d == 0 ? "" : ", ", d, prop.name);
  }
  return fmt::format("CUDA {} (driver {}.{}): {} device{}, {}", version, driver / 1000,
                     driver % 1000 / 10, n, n == 1 ? "" : "s", devices);
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
  const auto why = device::unusable_reason();
  if (!why.empty())
    throw device::DeviceError(
        fmt::format("device memory of {} bytes: CUDA is not usable here: {}", bytes, why));
  device::DeviceGuard on(device);
  const auto r = cudaMalloc(&data_, std::max<std::size_t>(bytes, 1));
  if (r != cudaSuccess) {
    cudaGetLastError();
    device::fail(fmt::format("cudaMalloc of {} bytes on cuda:{}", bytes, device), r);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    device::DeviceGuard on(device_);
    cudaFree(data_);
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer gone(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_)
    throw Error(
        fmt::format("DeviceBuffer::upload: {} bytes at {} past its {}", bytes, offset, bytes_));
  device::DeviceGuard on(device_);
  device::check(
      cudaMemcpy(static_cast<std::byte*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice),
      "cudaMemcpy host to device");
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_)
    throw Error(
        fmt::format("DeviceBuffer::download: {} bytes at {} past its {}", bytes, offset, bytes_));
  device::DeviceGuard on(device_);
  device::check(cudaMemcpy(host, static_cast<const std::byte*>(data_) + offset, bytes,
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy device to host");
}

}  // namespace cuda
}  // namespace collie
