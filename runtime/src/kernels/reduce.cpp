// The reduce kernels (reduce_ops.cpp: the ops' names, and which dtype
// takes which). Each (dtype, op) is one loop over two arrays that the
// compiler vectorizes (no aliasing: __restrict; integer arithmetic done in
// the unsigned type so that wrapping is defined and vectorizable; NaN-
// propagating min/max written as compare-and-select). The 16-bit float types
// are widened to float a block at a time, combined in float, and narrowed
// back with round-to-nearest-even.
//
// Everything below is compiled twice: for the baseline ISA, and (x86-64) for
// AVX2 + F16C, where float16 conversion is one instruction per 8 elements.
// The AVX2 copy is chosen once, at run time, by asking the CPU.
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/reduce.hpp>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace collie {

namespace {

template <class T>
using Unsigned = std::make_unsigned_t<T>;

// The element-wise operators. Integers: in the unsigned type (wraps, no UB).
template <class T>
struct Add {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
    else
      return a + b;
  }
};
template <class T>
struct Mul {
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // uint8 * uint8 promotes to int; multiply in unsigned int, which wraps.
      using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, Unsigned<T>>;
      return static_cast<T>(static_cast<W>(static_cast<Unsigned<T>>(a)) *
                            static_cast<W>(static_cast<Unsigned<T>>(b)));
    } else {
      return a * b;
    }
  }
};
template <class T>
struct Min {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a != a ? a : (b < a || b != b ? b : a);  // NaN wins
    else
      return b < a ? b : a;
  }
};
template <class T>
struct Max {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a != a ? a : (a < b || b != b ? b : a);
    else
      return a < b ? b : a;
  }
};
template <class T>
struct And {
  T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
template <class T>
struct Or {
  T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
template <class T>
struct Xor {
  T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};

// bool: on its bytes (unsigned char may read any object), 0 or 1 out.
struct LogicalOr {
  std::uint8_t operator()(std::uint8_t a, std::uint8_t b) const {
    return static_cast<std::uint8_t>((a != 0) | (b != 0));
  }
};
struct LogicalAnd {
  std::uint8_t operator()(std::uint8_t a, std::uint8_t b) const {
    return static_cast<std::uint8_t>((a != 0) & (b != 0));
  }
};
struct LogicalXor {
  std::uint8_t operator()(std::uint8_t a, std::uint8_t b) const {
    return static_cast<std::uint8_t>((a != 0) ^ (b != 0));
  }
};

template <class T, class F>
inline void combine(T* __restrict acc, const T* __restrict in, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = f(acc[i], in[i]);
}

// 16-bit floats: a block at a time through float.
constexpr std::size_t kBlock = 256;

void widen_bf16(const bfloat16* __restrict in, float* __restrict out, std::size_t n);
void narrow_bf16(const float* __restrict in, bfloat16* __restrict out, std::size_t n);

struct ScalarConvert {
  static void widen(const bfloat16* in, float* out, std::size_t n) { widen_bf16(in, out, n); }
  static void narrow(const float* in, bfloat16* out, std::size_t n) { narrow_bf16(in, out, n); }
  static void widen(const float16* in, float* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = float16::to_float(in[i].bits);
  }
  static void narrow(const float* in, float16* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      out[i].bits = float16::from_float(in[i]);
  }
};

#if defined(__x86_64__)
struct F16cConvert {
  // bfloat16: the upper halves of floats. Narrowing rounds to nearest even
  // on the integer bits and keeps NaN quiet, 8 at a time.
  __attribute__((target("avx2,f16c"))) static void widen(const bfloat16* in, float* out,
                                                         std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
    }
    widen_bf16(in + i, out + i, n - i);
  }
  __attribute__((target("avx2,f16c"))) static void narrow(const float* in, bfloat16* out,
                                                          std::size_t n) {
    std::size_t i = 0;
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x400000);
    for (; i + 8 <= n; i += 8) {
      const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(in + i));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, bias), lsb);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      const __m256i bits =
          _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(x, quiet), nan), 16);
      // 8 x 32-bit -> 8 x 16-bit: pack within lanes, then put the lanes in order.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
    }
    narrow_bf16(in + i, out + i, n - i);
  }
  __attribute__((target("avx2,f16c"))) static void widen(const float16* in, float* out,
                                                         std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i)
      out[i] = float16::to_float(in[i].bits);
  }
  __attribute__((target("avx2,f16c"))) static void narrow(const float* in, float16* out,
                                                          std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    for (; i < n; ++i)
      out[i].bits = float16::from_float(in[i]);
  }
};
#endif

// bfloat16 <-> float is shifts and an integer rounding, on the float's bits
// (a block copied to integers first, so the loops hold no type punning and
// vectorize; NaN is kept quiet by a select, not a branch).
void widen_bf16(const bfloat16* __restrict in, float* __restrict out, std::size_t n) {
  alignas(32) std::uint32_t bits[kBlock];
  for (std::size_t i = 0; i < n; ++i)
    bits[i] = static_cast<std::uint32_t>(in[i].bits) << 16;
  std::memcpy(out, bits, n * sizeof(float));
}
void narrow_bf16(const float* __restrict in, bfloat16* __restrict out, std::size_t n) {
  alignas(32) std::uint32_t bits[kBlock];
  alignas(32) std::uint16_t half[kBlock];
  std::memcpy(bits, in, n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t x = bits[i];
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (x >> 16) | 0x40u;
    half[i] = static_cast<std::uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
  std::memcpy(static_cast<void*>(out), half, n * sizeof(std::uint16_t));
}

// float16 and bfloat16: widened a block at a time, combined in float,
// narrowed back (Convert: the scalar or the AVX2 conversions).
template <class Convert, class H, class F>
inline void combine_half(H* acc, const H* in, std::size_t n, F f) {
  alignas(32) float a[kBlock];
  alignas(32) float b[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t m = std::min(kBlock, n - done);
    Convert::widen(acc + done, a, m);
    Convert::widen(in + done, b, m);
    combine(a, b, m, f);
    Convert::narrow(a, acc + done, m);
  }
}

template <class T, template <class> class Op>
inline void run(void* acc, const void* in, std::size_t n) {
  combine(static_cast<T*>(acc), static_cast<const T*>(in), n, Op<T>{});
}

template <class T>
inline void run_arith(ReduceOp op, void* acc, const void* in, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return run<T, Add>(acc, in, n);
    case ReduceOp::Product:
      return run<T, Mul>(acc, in, n);
    case ReduceOp::Min:
      return run<T, Min>(acc, in, n);
    case ReduceOp::Max:
      return run<T, Max>(acc, in, n);
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceOp::BitwiseAnd:
        return run<T, And>(acc, in, n);
      case ReduceOp::BitwiseOr:
        return run<T, Or>(acc, in, n);
      case ReduceOp::BitwiseXor:
        return run<T, Xor>(acc, in, n);
      default:
        break;
    }
  }
}

template <class F16>
inline void run_half(DataType type, ReduceOp op, void* acc, const void* in, std::size_t n) {
  auto go = [&](auto f) {
    if (type == DataType::Float16)
      combine_half<F16>(static_cast<float16*>(acc), static_cast<const float16*>(in), n, f);
    else
      combine_half<F16>(static_cast<bfloat16*>(acc), static_cast<const bfloat16*>(in), n, f);
  };
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return go(Add<float>{});
    case ReduceOp::Product:
      return go(Mul<float>{});
    case ReduceOp::Min:
      return go(Min<float>{});
    case ReduceOp::Max:
      return go(Max<float>{});
    default:
      return;
  }
}

inline void run_bool(ReduceOp op, void* acc_bytes, const void* in_bytes, std::size_t n) {
  auto* acc = static_cast<unsigned char*>(acc_bytes);
  const auto* in = static_cast<const unsigned char*>(in_bytes);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Max:
    case ReduceOp::BitwiseOr:
      return combine(acc, in, n, LogicalOr{});
    case ReduceOp::Product:
    case ReduceOp::Min:
    case ReduceOp::BitwiseAnd:
      return combine(acc, in, n, LogicalAnd{});
    case ReduceOp::BitwiseXor:
      return combine(acc, in, n, LogicalXor{});
    case ReduceOp::Avg:
      return;  // refused by check_supported
  }
}

template <class F16>
inline void dispatch(DataType type, ReduceOp op, void* acc, const void* in, std::size_t n) {
  switch (type) {
    case DataType::Bool:
      return run_bool(op, acc, in, n);
    case DataType::Int8:
      return run_arith<std::int8_t>(op, acc, in, n);
    case DataType::UInt8:
      return run_arith<std::uint8_t>(op, acc, in, n);
    case DataType::Int32:
      return run_arith<std::int32_t>(op, acc, in, n);
    case DataType::Int64:
      return run_arith<std::int64_t>(op, acc, in, n);
    case DataType::Float32:
      return run_arith<float>(op, acc, in, n);
    case DataType::Float64:
      return run_arith<double>(op, acc, in, n);
    case DataType::Float16:
    case DataType::BFloat16:
      return run_half<F16>(type, op, acc, in, n);
    case DataType::Int16:
      return run_arith<std::int16_t>(op, acc, in, n);
    case DataType::UInt16:
      return run_arith<std::uint16_t>(op, acc, in, n);
    case DataType::UInt32:
      return run_arith<std::uint32_t>(op, acc, in, n);
    case DataType::UInt64:
      return run_arith<std::uint64_t>(op, acc, in, n);
  }
}

__attribute__((flatten)) void reduce_baseline(DataType type, ReduceOp op, void* acc,
                                              const void* in, std::size_t n) {
  dispatch<ScalarConvert>(type, op, acc, in, n);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"), flatten)) void reduce_avx2(DataType type, ReduceOp op,
                                                               void* acc, const void* in,
                                                               std::size_t n) {
  dispatch<F16cConvert>(type, op, acc, in, n);
}
#endif

using Kernel = void (*)(DataType, ReduceOp, void*, const void*, std::size_t);

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
// does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

Kernel choose_kernel() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && has_f16c()) return reduce_avx2;
#endif
  return reduce_baseline;
}

const Kernel kernel = choose_kernel();

template <class T>
void divide(void* data, std::size_t n, int by) {
  auto* p = static_cast<T*>(data);
  if constexpr (std::is_integral_v<T>) {
    const auto d = static_cast<T>(by);
    if constexpr (sizeof(T) < sizeof(int)) {
      for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<T>(p[i] / by);
    } else {
      for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<T>(p[i] / d);
    }
  } else {
    const T d = static_cast<T>(by);
    for (std::size_t i = 0; i < n; ++i)
      p[i] /= d;
  }
}

}  // namespace

void reduce(DataType type, ReduceOp op, void* acc, const void* in, std::size_t count) {
  check_supported(type, op);
  if (count == 0) return;
  kernel(type, op, acc, in, count);
}

void prescale_average(DataType type, void* data, std::size_t count, int group_size) {
  if (type != DataType::Float16 || group_size <= 1) return;
  auto* p = static_cast<float16*>(data);
  const float d = static_cast<float>(group_size);
  for (std::size_t i = 0; i < count; ++i)
    p[i].bits = float16::from_float(float16::to_float(p[i].bits) / d);
}

void finish_average(DataType type, void* data, std::size_t count, int group_size) {
  if (group_size <= 1) return;
  switch (type) {
    case DataType::Bool:
      return;  // avg is not defined on bool
    case DataType::Int8:
      return divide<std::int8_t>(data, count, group_size);
    case DataType::UInt8:
      return divide<std::uint8_t>(data, count, group_size);
    case DataType::Int32:
      return divide<std::int32_t>(data, count, group_size);
    case DataType::Int64:
      return divide<std::int64_t>(data, count, group_size);
    case DataType::Float16:
      return;  // divided before the sum (prescale_average)
    case DataType::BFloat16: {
      auto* p = static_cast<bfloat16*>(data);
      const float d = static_cast<float>(group_size);
      for (std::size_t i = 0; i < count; ++i)
        p[i].bits = bfloat16::from_float(bfloat16::to_float(p[i].bits) / d);
      return;
    }
    case DataType::Float32:
      return divide<float>(data, count, group_size);
    case DataType::Float64:
      return divide<double>(data, count, group_size);
    case DataType::Int16:
      return divide<std::int16_t>(data, count, group_size);
    case DataType::UInt16:
      return divide<std::uint16_t>(data, count, group_size);
    case DataType::UInt32:
      return divide<std::uint32_t>(data, count, group_size);
    case DataType::UInt64:
      return divide<std::uint64_t>(data, count, group_size);
  }
}

}  // namespace collie
