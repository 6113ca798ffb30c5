// The element types: names, sizes, and which reduce ops each takes
// (dtype.hpp).
#include <cmath>
#include <utility>

#include <collie/dtype.hpp>

namespace collie {

std::uint16_t float16::from_float(float value) {
  const auto x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t exponent = (x >> 23) & 0xffu;
  std::uint32_t fraction = x & 0x7fffffu;
  if (exponent == 0xff) {  // infinity, or NaN (kept quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u |
                                      (fraction != 0 ? 0x200u | (fraction >> 13) : 0));
  }
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (e <= 0) {                                                    // subnormal or zero
    if (e < -10) return sign;
    fraction |= 0x800000u;  // the implicit leading one
    const int shift = 14 - e;
    std::uint32_t half = fraction >> shift;
    const std::uint32_t rest = fraction & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (fraction >> 13);
  const std::uint32_t rest = fraction & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;  // may carry to infinity
  return static_cast<std::uint16_t>(sign | half);
}

float float16::to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t fraction = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(fraction), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (fraction << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (fraction << 13));
}

std::string_view dtype_name(DataType type) {
  switch (type) {
    case DataType::Int8:
      return "int8";
    case DataType::UInt8:
      return "uint8";
    case DataType::Int32:
      return "int32";
    case DataType::Int64:
      return "int64";
    case DataType::Float16:
      return "float16";
    case DataType::BFloat16:
      return "bfloat16";
    case DataType::Float32:
      return "float32";
    case DataType::Float64:
      return "float64";
    case DataType::Int16:
      return "int16";
    case DataType::UInt16:
      return "uint16";
    case DataType::UInt32:
      return "uint32";
    case DataType::UInt64:
      return "uint64";
    case DataType::Bool:
      return "bool";
  }
  return "unknown";
}

std::optional<DataType> parse_dtype(std::string_view name) {
  static constexpr std::pair<std::string_view, DataType> kNames[] = {
      {"int8", DataType::Int8},         {"char", DataType::Int8},
      {"uint8", DataType::UInt8},       {"byte", DataType::UInt8},
      {"int32", DataType::Int32},       {"int", DataType::Int32},
      {"int64", DataType::Int64},       {"long", DataType::Int64},
      {"float16", DataType::Float16},   {"half", DataType::Float16},
      {"fp16", DataType::Float16},      {"bfloat16", DataType::BFloat16},
      {"bf16", DataType::BFloat16},     {"float32", DataType::Float32},
      {"float", DataType::Float32},     {"fp32", DataType::Float32},
      {"float64", DataType::Float64},   {"double", DataType::Float64},
      {"fp64", DataType::Float64},      {"int16", DataType::Int16},
      {"short", DataType::Int16},       {"uint16", DataType::UInt16},
      {"uint32", DataType::UInt32},     {"uint64", DataType::UInt64},
      {"bool", DataType::Bool}};
  for (const auto& [n, t] : kNames)
    if (n == name) return t;
  return std::nullopt;
}

std::size_t dtype_size(DataType type) {
  switch (type) {
    case DataType::Bool:
    case DataType::Int8:
    case DataType::UInt8:
      return 1;
    case DataType::Int16:
    case DataType::UInt16:
    case DataType::Float16:
    case DataType::BFloat16:
      return 2;
    case DataType::Int32:
    case DataType::UInt32:
    case DataType::Float32:
      return 4;
    case DataType::Int64:
    case DataType::UInt64:
    case DataType::Float64:
      return 8;
  }
  return 0;
}

}  // namespace collie
