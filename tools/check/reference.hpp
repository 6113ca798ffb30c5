// The collective checker's reference (collective_check.hpp): the value
// each rank contributes at each element, the result a reduction of them
// must have, computed here in int64 or double and in rank order,
// independently of collie's kernels and schedules, and how far a float
// result may be from it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "collective_check.hpp"

namespace collie::check {

inline bool is_float(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}
inline bool is_signed(DataType t) {
  return t != DataType::UInt8 && t != DataType::UInt16 && t != DataType::UInt32 &&
         t != DataType::UInt64 && t != DataType::Bool;
}

// The value rank `r` contributes at element i, as a double (exact in every dtype).
inline double value(const CollectiveCase& c, int r, std::size_t i) {
  const auto k = static_cast<long long>(i);
  if (c.dtype == DataType::Bool) return (r * 5 + k * 7) % 4 != 0 ? 1 : 0;  // mostly true
  switch (c.op) {
    case ReduceOp::Product:  // stays small: 1 or 2 (or 0.5, -1)
      if (is_float(c.dtype)) return (r + k) % 3 == 0 ? 2.0 : ((r + k) % 3 == 1 ? 0.5 : 1.0);
      if (is_signed(c.dtype) && (r + k) % 5 == 0) return -1;
      return (r * 3 + k) % 4 == 0 ? 2 : 1;
    case ReduceOp::BitwiseAnd:
    case ReduceOp::BitwiseOr:
    case ReduceOp::BitwiseXor:
      return static_cast<double>((r * 37 + k * 11 + 5) & 0x7f);
    default: {
      double v = static_cast<double>((r * 7 + k * 3) % 23);
      if (is_signed(c.dtype)) v -= 11;
      if (is_float(c.dtype)) v += 0.25 * static_cast<double>(k % 4);
      return v;
    }
  }
}

// The reference reduction of value_of(0), ..., value_of(n - 1) (in rank
// order), as the dtype holds it.
template <class ValueOf>
double combine(const CollectiveCase& c, int n, ValueOf value_of) {
  if (!is_float(c.dtype)) {
    // Integers: in 64 bits (exact for these small values, wrapping as the
    // dtype would for product), then narrowed modulo 2^bits.
    auto acc = static_cast<std::int64_t>(value_of(0));
    for (int r = 1; r < n; ++r) {
      const auto v = static_cast<std::int64_t>(value_of(r));
      switch (c.op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc += v;
          break;
        case ReduceOp::Product:
          acc = static_cast<std::int64_t>(static_cast<std::uint64_t>(acc) *
                                          static_cast<std::uint64_t>(v));
          break;
        case ReduceOp::Min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::Max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::BitwiseAnd:
          acc &= v;
          break;
        case ReduceOp::BitwiseOr:
          acc |= v;
          break;
        case ReduceOp::BitwiseXor:
          acc ^= v;
          break;
      }
    }
    // bool: 0 and 1 summed, multiplied, compared or combined bit by bit,
    // then any nonzero is true: or, and, and xor as bool reduces them.
    auto narrow = [&](std::int64_t x) -> double {
      switch (c.dtype) {
        case DataType::Bool:
          return x != 0 ? 1 : 0;
        case DataType::Int8:
          return static_cast<std::int8_t>(x);
        case DataType::UInt8:
          return static_cast<std::uint8_t>(x);
        case DataType::Int16:
          return static_cast<std::int16_t>(x);
        case DataType::UInt16:
          return static_cast<std::uint16_t>(x);
        case DataType::Int32:
          return static_cast<std::int32_t>(x);
        case DataType::UInt32:
          return static_cast<double>(static_cast<std::uint32_t>(x));
        case DataType::UInt64:
          return static_cast<double>(static_cast<std::uint64_t>(x));
        default:
          return static_cast<double>(x);
      }
    };
    if (c.op == ReduceOp::Avg) {
      const auto sum = static_cast<std::int64_t>(narrow(acc));
      return narrow(sum / static_cast<std::int64_t>(n));
    }
    return narrow(acc);
  }
  double acc = value_of(0);
  for (int r = 1; r < n; ++r) {
    const double v = value_of(r);
    switch (c.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Product:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      default:
        acc = std::max(acc, v);
        break;
    }
  }
  if (c.op == ReduceOp::Avg) acc /= static_cast<double>(n);
  return acc;
}

// How far a float result may be from the reference. The inputs are chosen so
// that float16, float32 and float64 sums, products, minima and maxima are
// exact; bfloat16 (8 significant bits) rounds partial sums, once per rank;
// averages round their division (float16 divides each contribution before
// summing, see reduce.hpp).
inline double tolerance(const CollectiveCase& c, double want, int world) {
  if (!is_float(c.dtype)) return 0;
  const double scale = std::max(1.0, std::fabs(want));
  if (c.dtype == DataType::BFloat16) return scale * 4e-3 * world;
  if (c.op != ReduceOp::Avg) return 0;
  switch (c.dtype) {
    case DataType::Float16:
      return scale * 1e-3 * world + 1e-3 * world;
    case DataType::Float32:
      return scale * 1e-6;
    default:
      return scale * 1e-14;
  }
}

// A contiguous array of T: std::vector, but for bool (whose std::vector
// is a bitset with no data()) an array of bool.
class BoolArray {
 public:
  void resize(std::size_t n) {
    data_ = std::make_unique<bool[]>(n);
    size_ = n;
  }
  std::size_t size() const { return size_; }
  bool* data() const { return data_.get(); }
  bool* begin() const { return data_.get(); }
  bool* end() const { return data_.get() + size_; }
  bool& operator[](std::size_t i) const { return data_[i]; }

 private:
  std::unique_ptr<bool[]> data_ = std::make_unique<bool[]>(0);
  std::size_t size_ = 0;
};
template <class T>
using Array = std::conditional_t<std::is_same_v<T, bool>, BoolArray, std::vector<T>>;

template <class T>
T to(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <class T>
double from(T v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

}  // namespace collie::check
