// The one choice of how a call's device buffers are staged (staging.hpp).
#include "staging.hpp"

#include <algorithm>

namespace collie::device {

StagingPlan plan_staging(EnginePool& pool, MemoryKind said, bool elementwise,
                         const CallBuffers& buffers, void* stream, const CallName& call,
                         std::chrono::milliseconds timeout, const StagingLimits& limits) {
  auto placement = place(pool, said, buffers.input, buffers.input_bytes, buffers.output,
                         buffers.output_bytes, stream, call, timeout);
  StagingPlan plan;
  plan.input_device = placement.input;
  plan.output_device = placement.output;
  plan.engine = std::move(placement.engine);
  // The caller's word alone, and the call's size, which every rank shares.
  const std::size_t bytes = std::max(buffers.input_bytes, buffers.output_bytes);
  if (elementwise && said == MemoryKind::Cuda && limits.chunk_bytes > 0 &&
      bytes > limits.chunk_bytes) {
    plan.chunk_bytes = limits.chunk_bytes;
    return plan;
  }
  const auto strategy = [&](int device, std::size_t side_bytes) {
    if (device < 0) return Staging::Host;
    return side_bytes <= limits.whole_bytes ? Staging::Whole : Staging::Segments;
  };
  plan.input = strategy(plan.input_device, buffers.input_bytes);
  plan.output = strategy(plan.output_device, buffers.output_bytes);
  return plan;
}

}  // namespace collie::device
