// Where one of torch's calls runs (call_place.hpp).
#include "call_place.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace collie_torch {
namespace {

// The stream's cudaStream_t, where this torch's c10::Stream gives it
// (native_handle(), which torch 1.13 and Debian 13's 2.6 lack and later
// releases have); nullptr where it does not.
template <typename Stream>
void* native_handle(const Stream& stream) {
  if constexpr (requires { stream.native_handle(); })
    return stream.native_handle();
  else
    return nullptr;
}

}  // namespace

CallPlace CallPlace::of(const at::Tensor& t) {
  CallPlace p;
  p.device_ = t.device();
  if (!t.device().is_cuda()) return p;
  const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  p.stream_ = impl.getStream(t.device());
  p.native_ = native_handle(*p.stream_);
  if (p.native_ == nullptr) p.synchronize();
  return p;
}

void CallPlace::check(const at::Tensor& other, const char* op) const {
  TORCH_CHECK(other.device() == device_, "collie: ", op, ": tensors on ", device_.str(), " and ",
              other.device().str(), "; one call's tensors must be on one device");
}

collie::CollectiveOptions CallPlace::options(std::chrono::milliseconds timeout) const {
  collie::CollectiveOptions o;
  o.memory = on_device() ? collie::MemoryKind::Cuda : collie::MemoryKind::Host;
  o.cuda_stream = native_;
  if (timeout.count() >= 0 && timeout != c10d::kUnsetTimeout) o.timeout = timeout;
  return o;
}

void CallPlace::synchronize() const {
  if (!stream_) return;
  const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  impl.synchronizeStream(*stream_);
}

}  // namespace collie_torch
