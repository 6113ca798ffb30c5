// Where a buffer lives: host memory, or a CUDA device's.
//
// Every collective and point-to-point call accepts CUDA device buffers
// wherever it accepts host ones; one call may mix them (a device input and
// a host output, say). collie recognises device memory by the CUDA driver's
// pointer attributes, without creating a CUDA context: a process that never
// touched CUDA pays nothing, and memory the CPU can address (pageable,
// pinned, managed) counts as host memory. A call's options may say it
// instead (CollectiveOptions::memory). Buffers may be on any device (not
// only the caller's current one); one call's device buffers must be on one.
//
// How device buffers move: through pinned host memory, a few segments at a
// time (COLLIE_SEGMENT_BYTES each), copied on a CUDA stream of collie's own
// (one per group and device, non-blocking) while earlier segments are on the
// wire or being reduced; reductions run on the host, by the kernels host
// buffers use. A buffer of COLLIE_STAGE_WHOLE_BYTES or less (4 MiB) is
// copied in whole before the collective and out after it (fewer, larger
// copies: faster at those sizes); all_reduce, broadcast and reduce on a
// larger one run in chunks of COLLIE_STAGE_CHUNK_BYTES (4 MiB), each copied
// whole while the chunk before runs. A point-to-point message on a device
// is staged whole (one pinned buffer of its size, kept for reuse).
//
// Streams, what a caller must synchronise (torch.distributed's rules for
// its gloo backend):
// - collie's copies start after the work queued, when the call is made, on
//   the caller's stream: CollectiveOptions::cuda_stream, or the legacy
//   default stream (which waits for every blocking stream) if none is given.
//   Work queued on that stream after the call does not wait for collie.
// - The result is ready when a blocking call returns, or when the Work of
//   an async call has completed (wait() returned): every copy into the
//   caller's device memory has finished then, and later work on any stream
//   may use it.
// - A device buffer belongs to collie until then, as a host buffer does.
//
// Builds: CUDA support is compiled in where CMake finds the CUDA toolkit
// (-DCOLLIE_CUDA=AUTO, the default; ON requires it, OFF leaves it out). A
// collie built with CUDA runs on a machine without a GPU or driver: the
// driver is loaded only when a device buffer needs it. Host buffers never
// need it. A device buffer where CUDA is unusable is a collie::Error that
// says what is missing.
#pragma once

#include <cstddef>
#include <string>

namespace collie {

enum class MemoryKind {
  Auto,  // ask the CUDA driver (host memory when no CUDA is loaded)
  Host,  // every buffer of the call is memory the CPU addresses
  Cuda,  // every buffer of the call is CUDA device memory
};

namespace cuda {

// Whether this collie was built with CUDA support.
bool built_in();

// The number of CUDA devices this process can use; 0 when collie was built
// without CUDA or there is no driver or GPU. (Loads the driver.)
int device_count();

// One line for --version and logs: "CUDA 13.0 (driver 13.0): 1 device,
// cuda:0 NVIDIA H100 80GB HBM3", "CUDA 13.0 built in; not usable here: no
// CUDA driver (libcuda.so.1) found", "CUDA not built in (-DCOLLIE_CUDA=OFF
// or no toolkit found)". (Loads the driver.)
std::string status();

// Device memory for programs and tools that want some without writing CUDA
// themselves (collie bench, the tests): cudaMalloc'd on `device`, freed by
// the destructor. Throws collie::Error naming the CUDA error.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device = 0);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  int device() const { return device_; }

  // Blocking copies between this buffer (from `offset`) and host memory.
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

}  // namespace cuda
}  // namespace collie
