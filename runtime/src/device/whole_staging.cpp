// Small device buffers staged whole (whole_staging.hpp).
#include "whole_staging.hpp"

#include <cstring>

namespace collie::device {

std::byte* WholeStaging::stage(std::byte* device_data, std::size_t bytes, bool output,
                               const void* from, int from_device) {
  const Staged st{device_data, bytes, output, engine_.take_pinned(bytes)};
  staged_.push_back(st);
  if (from_device >= 0)
    last_in_ = engine_.to_host(st.block, from, bytes);
  else
    std::memcpy(st.block, from, bytes);
  return st.block;
}

void WholeStaging::wait() {
  if (last_in_ != 0) engine_.wait(last_in_);
  last_in_ = 0;
}

void WholeStaging::copy_back() {
  Engine::Ticket last = 0;
  bool any = false;
  for (const auto& st : staged_) {
    if (!st.output) continue;
    last = engine_.to_device(st.device_data, st.block, st.bytes);
    any = true;
  }
  if (any) engine_.wait(last);
}

WholeStaging::~WholeStaging() {
  if (staged_.empty()) return;
  engine_.drain();  // nothing may still write from (or into) a block
  for (const auto& st : staged_)
    engine_.give_pinned(st.block);
}

}  // namespace collie::device
