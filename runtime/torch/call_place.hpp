// Where one of torch's calls runs: host memory, or a CUDA device with the
// stream torch had current there when the call was made.
//
// CUDA tensors move as collie's runtime moves device buffers (memory.hpp):
// staged through pinned host memory on a stream of collie's own, whose
// copies start after the work queued on the caller's stream. That stream
// is torch's current stream for the tensor's device, taken when the call is
// made (through c10::Stream::native_handle() where this torch has it; on
// torch 1.13 and 2.6, which lack it, the call waits for that stream on the
// host and collie's copies follow the legacy default stream). torch's own operations that a
// call needs (flattening lists, cutting them back) run on the same stream,
// in the thread that runs the call. When the call's Work has completed,
// every copy into the tensors has finished: any stream may use them.
//
// Sends and receives of CUDA tensors wait on the host for the caller's
// stream before they are posted (collie's point-to-point calls follow the
// legacy default stream).
#pragma once

#include <chrono>

#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <torch/version.h>

#include <collie/process_group.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <optional>
#else
#include <c10/util/Optional.h>
#endif

namespace collie_torch {

#if TORCH_VERSION_MAJOR >= 2
using OptionalStream = std::optional<c10::Stream>;
#else
using OptionalStream = c10::optional<c10::Stream>;  // torch 1.13's guards take c10's
#endif

class CallPlace {
 public:
  // Host memory (a call without tensors: barrier).
  CallPlace() = default;
  // The place of a call on `t`: its device, and torch's current stream
  // there now.
  static CallPlace of(const at::Tensor& t);

  bool on_device() const { return stream_.has_value(); }
  // Checks that `other`, another tensor of the call `op`, is on the same
  // device (one call's tensors must be).
  void check(const at::Tensor& other, const char* op) const;

  // The call's options: where its memory is, the stream collie's copies
  // follow, and torch's timeout where it gave one.
  collie::CollectiveOptions options(std::chrono::milliseconds timeout) const;
  // Makes the caller's stream current in this thread while the guard lives,
  // so that torch's operations in the call are ordered with the caller's.
  c10::OptionalStreamGuard enter() const { return c10::OptionalStreamGuard(stream_); }
  // Waits on the host until the work queued on the caller's stream is done.
  void synchronize() const;

 private:
  c10::Device device_{c10::kCPU};
  OptionalStream stream_;
  void* native_ = nullptr;  // its cudaStream_t, where torch gives it
};

}  // namespace collie_torch
