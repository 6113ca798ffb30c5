// The element types collie moves and reduces.
//
// bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16,
// bfloat16, float32, float64. bool is a byte, 0 or 1 (C++'s bool), and
// reduces logically (reduce.hpp). The two
// 16-bit float types are plain storage structs (collie::float16,
// collie::bfloat16) with conversions to and from float that round to the
// nearest representable value, ties to even, as IEEE 754 does.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <collie/error.hpp>

namespace collie {

enum class DataType : std::uint8_t {
  Int8,
  UInt8,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  // Added later: at the end, so that the values above keep their numbers.
  Int16,
  UInt16,
  UInt32,
  UInt64,
  Bool
};

// IEEE 754 binary16: 1 sign, 5 exponent, 10 fraction bits.
struct float16 {
  std::uint16_t bits = 0;
  float16() = default;
  explicit float16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return to_float(bits); }
  static std::uint16_t from_float(float value);
  static float to_float(std::uint16_t bits);
  friend bool operator==(float16 a, float16 b) { return a.bits == b.bits; }
};

// bfloat16: the upper half of a float32 (1 sign, 8 exponent, 7 fraction bits).
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return to_float(bits); }
  static std::uint16_t from_float(float value) {
    const auto x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7fffffffu) > 0x7f800000u)
      return static_cast<std::uint16_t>((x >> 16) | 0x40);  // quiet NaN
    return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  static float to_float(std::uint16_t bits) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};

namespace detail {
template <class T>
constexpr DataType dtype_of() {
  if constexpr (std::is_same_v<T, bool>)
    return DataType::Bool;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return DataType::Int8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DataType::UInt8;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return DataType::Int16;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return DataType::UInt16;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::Int32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return DataType::UInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DataType::Int64;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return DataType::UInt64;
  else if constexpr (std::is_same_v<T, float16>)
    return DataType::Float16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return DataType::BFloat16;
  else if constexpr (std::is_same_v<T, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::Float64;
  else
    static_assert(sizeof(T) == 0, "not one of collie's element types");
}
}  // namespace detail

// The DataType of a C++ element type: dtype_of<float> == DataType::Float32.
template <class T>
inline constexpr DataType dtype_of = detail::dtype_of<T>();

// "float32", "bfloat16", ...
std::string_view dtype_name(DataType type);
// The dtype named `name`: collie's names, and the ones NCCL and torch use
// ("float", "half", "double", "bf16", "int", "char", "long", ...).
std::optional<DataType> parse_dtype(std::string_view name);
// Every dtype: the integers by width, then the floats.
inline constexpr DataType kDataTypes[] = {
    DataType::Bool,   DataType::Int8,   DataType::UInt8,   DataType::Int16,   DataType::UInt16,
    DataType::Int32,  DataType::UInt32,  DataType::Int64,   DataType::UInt64,
    DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64};
// Bytes per element.
std::size_t dtype_size(DataType type);

// f(T{}) with the C++ element type of `type` (bool, std::int8_t, ...,
// float16, bfloat16, float, double), returning what f returns: one switch
// over the dtypes for code that works on every one.
template <class F>
decltype(auto) visit_dtype(DataType type, F&& f) {
  switch (type) {
    case DataType::Bool: return f(bool{});
    case DataType::Int8: return f(std::int8_t{});
    case DataType::UInt8: return f(std::uint8_t{});
    case DataType::Int16: return f(std::int16_t{});
    case DataType::UInt16: return f(std::uint16_t{});
    case DataType::Int32: return f(std::int32_t{});
    case DataType::UInt32: return f(std::uint32_t{});
    case DataType::Int64: return f(std::int64_t{});
    case DataType::UInt64: return f(std::uint64_t{});
    case DataType::Float16: return f(float16{});
    case DataType::BFloat16: return f(bfloat16{});
    case DataType::Float32: return f(float{});
    case DataType::Float64: return f(double{});
  }
  throw ArgumentError("unknown dtype " + std::to_string(static_cast<int>(type)));
}

}  // namespace collie
