// The Whole strategy (staging.hpp): a call's small device buffers, each in
// a pinned block of its own for the whole call. stage() queues the copy
// in; wait() waits for every copy in; copy_back() copies the outputs' blocks
// back to the device and waits; the blocks go back to the engine when the
// object goes (after the engine is drained: nothing may still read or
// write one). Used by the one thread that runs the call.
#pragma once

#include <cstddef>
#include <vector>

#include "device.hpp"

namespace collie::device {

class WholeStaging {
 public:
  explicit WholeStaging(Engine& engine) : engine_(engine) {}
  ~WholeStaging();
  WholeStaging(const WholeStaging&) = delete;
  WholeStaging& operator=(const WholeStaging&) = delete;

  // A pinned block of `bytes` standing in for `device_data` until the call
  // ends, filled from `from` (on `from_device`, -1: host memory): the
  // buffer itself, or an out-of-place call's input that its output starts
  // from. copy_back() copies it back to `device_data` if `output`.
  std::byte* stage(std::byte* device_data, std::size_t bytes, bool output, const void* from,
                   int from_device);
  // Waits for the copies stage() queued.
  void wait();
  // Copies the outputs' blocks back to the device, and waits.
  void copy_back();

 private:
  struct Staged {
    std::byte* device_data;
    std::size_t bytes;
    bool output;
    std::byte* block;
  };
  Engine& engine_;
  std::vector<Staged> staged_;
  Engine::Ticket last_in_ = 0;
};

}  // namespace collie::device
