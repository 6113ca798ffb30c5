// The workers' built-in elementwise operations (elementwise.hpp).
#include "elementwise.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::mw {

namespace {

template <class T>
constexpr bool is_half = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

template <class T>
double to_double(T v) {
  if constexpr (is_half<T>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

// An integral double within int64's or uint64's range (checked before), as
// the bits of an unsigned of T's width: integer arithmetic then wraps.
template <class T>
std::make_unsigned_t<T> wrap(double v) {
  using U = std::make_unsigned_t<T>;
  if (v < 0) return static_cast<U>(static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
  return static_cast<U>(static_cast<std::uint64_t>(v));
}

}  // namespace

void check_scalar(DataType type, double value, const char* what, bool factor) {
  const bool integer = type != DataType::Float16 && type != DataType::BFloat16 &&
                       type != DataType::Float32 && type != DataType::Float64;
  if (!integer) return;
  if (factor && type == DataType::Bool)
    throw ArgumentError(fmt::format("{}: not defined on bool buffers", what));
  if (!std::isfinite(value) || value != std::floor(value))
    throw ArgumentError(fmt::format("{}: {} is not an integer, and the buffer is {}", what, value,
                                    dtype_name(type)));
  double lo = -9223372036854775808.0, hi = 18446744073709551615.0;
  if (!factor) {
    visit_dtype(type, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_integral_v<T>) {
        lo = static_cast<double>(std::numeric_limits<T>::min());
        hi = static_cast<double>(std::numeric_limits<T>::max());
      }
    });
  } else if (value < 0) {
    hi = 9223372036854775807.0;
  }
  if (value < lo || value > hi)
    throw ArgumentError(fmt::format("{}: {} is out of {}'s range", what, value, dtype_name(type)));
}

void fill(DataType type, void* data, std::size_t count, double value) {
  visit_dtype(type, [&](auto t) {
    using T = decltype(t);
    auto* p = static_cast<T*>(data);
    T v;
    if constexpr (is_half<T>)
      v = T(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    for (std::size_t i = 0; i < count; ++i) p[i] = v;
  });
}

void scale(DataType type, void* data, std::size_t count, double factor) {
  visit_dtype(type, [&](auto t) {
    using T = decltype(t);
    auto* p = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, bool>) {
      throw ArgumentError("scale: not defined on bool buffers");
    } else if constexpr (is_half<T>) {
      const auto f = static_cast<float>(factor);
      for (std::size_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) * f);
    } else if constexpr (std::is_floating_point_v<T>) {
      const auto f = static_cast<T>(factor);
      for (std::size_t i = 0; i < count; ++i) p[i] *= f;
    } else {
      using U = std::make_unsigned_t<T>;
      const U f = wrap<T>(factor);
      for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<U>(static_cast<U>(p[i]) * f));
    }
  });
}

void axpy(DataType type, void* y, const void* x, std::size_t count, double a) {
  visit_dtype(type, [&](auto t) {
    using T = decltype(t);
    auto* py = static_cast<T*>(y);
    const auto* px = static_cast<const T*>(x);
    if constexpr (std::is_same_v<T, bool>) {
      throw ArgumentError("axpy: not defined on bool buffers");
    } else if constexpr (is_half<T>) {
      const auto f = static_cast<float>(a);
      for (std::size_t i = 0; i < count; ++i)
        py[i] = T(static_cast<float>(py[i]) + f * static_cast<float>(px[i]));
    } else if constexpr (std::is_floating_point_v<T>) {
      const auto f = static_cast<T>(a);
      for (std::size_t i = 0; i < count; ++i) py[i] += f * px[i];
    } else {
      using U = std::make_unsigned_t<T>;
      const U f = wrap<T>(a);
      for (std::size_t i = 0; i < count; ++i)
        py[i] = static_cast<T>(static_cast<U>(static_cast<U>(py[i]) + static_cast<U>(f * static_cast<U>(px[i]))));
    }
  });
}

double reduce_all(DataType type, const void* data, std::size_t count, ReduceOp op) {
  double r = 0;
  visit_dtype(type, [&](auto t) {
    using T = decltype(t);
    const auto* p = static_cast<const T*>(data);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        r = 0;
        for (std::size_t i = 0; i < count; ++i) r += to_double(p[i]);
        if (op == ReduceOp::Avg && count > 0) r /= static_cast<double>(count);
        return;
      case ReduceOp::Product:
        r = 1;
        for (std::size_t i = 0; i < count; ++i) r *= to_double(p[i]);
        return;
      case ReduceOp::Min:
      case ReduceOp::Max: {
        const bool min = op == ReduceOp::Min;
        r = min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
        for (std::size_t i = 0; i < count; ++i) {
          const double v = to_double(p[i]);
          if (std::isnan(v)) {
            r = v;
            return;
          }
          r = min ? std::min(r, v) : std::max(r, v);
        }
        return;
      }
      default:
        throw ArgumentError(fmt::format("reduce: {} is not a reduction to a scalar (sum, prod, "
                                        "min, max, avg)",
                                        reduce_op_name(op)));
    }
  });
  return r;
}

}  // namespace collie::mw
