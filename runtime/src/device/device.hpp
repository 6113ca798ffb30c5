// Device memory, as the runtime sees it (private): which buffers are on a
// device, and an ordered copy engine per device that moves bytes between
// them and pinned host memory.
//
// The CUDA backend (cuda_backend.cpp) is the real one: a non-blocking
// stream per engine, an event per copy. The tests install a stand-in
// (test/runtime/fake_device.hpp) whose device memory the CPU cannot touch
// and whose copies run only when asked about, so that the staging code is
// checked for every order and every error path on machines without a GPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <collie/error.hpp>
#include <collie/memory.hpp>

namespace collie::device {

// A failure of the device or its driver: a CUDA error, no driver, a
// pointer on the wrong device. Its text names what failed and the CUDA
// error string.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// Copies on one device, run in the order they were queued. A ticket names
// one copy; once it is done, so is every copy queued before it.
class Engine {
 public:
  using Ticket = std::uint64_t;
  virtual ~Engine() = default;

  // "cuda:0", for messages.
  virtual std::string describe() const = 0;
  virtual int device() const = 0;

  // Later copies start after the work queued now on `stream` (a
  // cudaStream_t; null: the legacy default stream).
  virtual void after(void* stream) = 0;

  // Queue a copy; `host` may be pinned (fast, asynchronous) or pageable.
  virtual Ticket to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual Ticket to_device(void* device, const void* host, std::size_t bytes) = 0;
  virtual Ticket on_device(void* to, const void* from, std::size_t bytes) = 0;

  // Whether copy `t` has finished (never blocks), or wait for it. Both
  // throw DeviceError if it, or one before it, failed; wait() also if it
  // has not finished within the timeout (a hung or saturated device).
  virtual bool done(Ticket t) = 0;
  virtual void wait(Ticket t) = 0;
  // Waits for every queued copy, throwing nothing (after an error); gives
  // up, logging it, after the timeout.
  virtual void drain() noexcept = 0;
  // How long wait() and drain() wait (the call's timeout).
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // Pinned host memory of at least `bytes`, and back. Blocks are kept for
  // reuse by the engine, up to a limit.
  virtual std::byte* take_pinned(std::size_t bytes) = 0;
  virtual void give_pinned(std::byte* block) noexcept = 0;
};

// A kind of device memory (CUDA, or the tests' stand-in).
class Backend {
 public:
  virtual ~Backend() = default;
  // "CUDA", for messages.
  virtual std::string name() const = 0;
  // The device that holds `p`, or -1 for memory the CPU addresses. Never
  // creates a context; cheap when the process has not loaded the driver.
  virtual int device_of(const void* p) = 0;
  // The same for a buffer the caller says is on a device: throws
  // DeviceError saying why it is not (CUDA unusable here, a host pointer).
  virtual int require_device(const void* p, const std::string& what) = 0;
  virtual std::unique_ptr<Engine> make_engine(int device) = 0;
  // `bytes` of memory on `device` (at least 1), and back: master-worker
  // buffers that live on a worker's device. Throws DeviceError (out of
  // memory, no such device).
  virtual void* allocate_device(int device, std::size_t bytes) = 0;
  virtual void free_device(int device, void* p) noexcept = 0;
};

// The process's backend: the tests' stand-in if one is installed, else
// CUDA's when built in, else null (every buffer is host memory).
Backend* backend();
// Installs `b` (null: back to the default). For tests.
void install_backend(std::shared_ptr<Backend> b);

// Engines kept by a group between calls (a stream, events, pinned blocks
// are costly to make): lent to one call at a time.
class EnginePool : public std::enable_shared_from_this<EnginePool> {
 public:
  // An engine for `device`: a spare one, or a new one from `b`. It comes
  // back to the pool when the last copy of the pointer goes.
  std::shared_ptr<Engine> lend(Backend& b, int device);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Engine>> spare_;
};

// Where a call's buffers are: the device of each (-1: host), and the
// engine that stages them (null when both are on the host).
struct Placement {
  int input = -1;
  int output = -1;
  std::shared_ptr<Engine> engine;
  bool any() const { return engine != nullptr; }
};

// Where a call's two buffers are (an empty or null one counts as host
// memory), as `kind` says or the backend finds; lends an engine from `pool`
// when one is on a device, ordered after the caller's `stream`, its waits
// bounded by `timeout`. Throws
// DeviceError, led by the call ("rank 0: all_reduce"), for device memory
// where CUDA is unusable or not built in, and for buffers on two devices.
// (The call's name is made only for an error: a host-only call pays
// nothing for it.)
struct CallName {
  int rank = 0;
  std::string_view op;  // "all_reduce", "send to"
  int peer = -1;        // for point-to-point
  std::string text() const;
};
Placement place(EnginePool& pool, MemoryKind kind, const void* input, std::size_t input_bytes,
                const void* output, std::size_t output_bytes, void* stream, const CallName& call,
                std::chrono::milliseconds timeout);

// Copies `bytes` from `from` (on device `from_device`, -1: host) to `to`,
// waiting for the copy; a plain memmove when both are host memory.
void copy(Engine* engine, void* to, int to_device, const void* from, int from_device,
          std::size_t bytes);

// Applies `fn(host_block, count)` to `count` elements of `esize` bytes at
// `data` on the engine's device, a segment of `segment_bytes` at a time
// through pinned memory.
void transform(Engine& engine, std::byte* data, std::size_t count, std::size_t esize,
               std::size_t segment_bytes, const std::function<void(std::byte*, std::size_t)>& fn);

}  // namespace collie::device
