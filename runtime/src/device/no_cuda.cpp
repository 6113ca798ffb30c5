// A build without CUDA (-DCOLLIE_CUDA=OFF, or AUTO with no toolkit found):
// every buffer is host memory, and asking for a device says why not.
#include <fmt/format.h>

#include "device.hpp"

namespace collie {
namespace device {

Backend* cuda_backend() {
  return nullptr;
}

}  // namespace device

namespace cuda {

namespace {
constexpr const char* kNotBuiltIn =
    "CUDA not built in (-DCOLLIE_CUDA=OFF, or no CUDA toolkit found)";
}

bool built_in() {
  return false;
}
int device_count() {
  return 0;
}
std::string status() {
  return kNotBuiltIn;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(0), device_(device) {
  throw device::DeviceError(fmt::format("device memory of {} bytes: {}", bytes, kNotBuiltIn));
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : device_(other.device_) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  device_ = other.device_;
  return *this;
}
void DeviceBuffer::upload(const void*, std::size_t, std::size_t) {
  throw device::DeviceError(kNotBuiltIn);
}
void DeviceBuffer::download(void*, std::size_t, std::size_t) const {
  throw device::DeviceError(kNotBuiltIn);
}

}  // namespace cuda
}  // namespace collie
