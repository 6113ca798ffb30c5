// The reduce kernels against element-by-element references written here:
// every dtype and op, lengths that leave vector tails, wrap-around, NaN,
// float16/bfloat16 rounding, and the averages' two halves.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/reduce.hpp>

#include "executor/stream_reduce.hpp"

using collie::DataType;
using collie::ReduceOp;

namespace {

constexpr auto& kOps = collie::kReduceOps;

// Integer reference in 64 bits, narrowed modulo 2^bits.
template <class T>
T int_ref(ReduceOp op, T a, T b) {
  const auto x = static_cast<std::int64_t>(a), y = static_cast<std::int64_t>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return static_cast<T>(static_cast<std::uint64_t>(x) + static_cast<std::uint64_t>(y));
    case ReduceOp::Product:
      return static_cast<T>(static_cast<std::uint64_t>(x) * static_cast<std::uint64_t>(y));
    case ReduceOp::Min:  // in T: a uint64 above 2^63 is not negative
      return std::min(a, b);
    case ReduceOp::Max:
      return std::max(a, b);
    case ReduceOp::BitwiseAnd:
      return static_cast<T>(x & y);
    case ReduceOp::BitwiseOr:
      return static_cast<T>(x | y);
    case ReduceOp::BitwiseXor:
      return static_cast<T>(x ^ y);
  }
  return 0;
}

double float_ref(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return a + b;
    case ReduceOp::Product:
      return a * b;
    case ReduceOp::Min:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
    default:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
  }
}

template <class T>
void check_ints(DataType type) {
  const std::size_t n = 1031;  // not a multiple of any vector width
  std::vector<T> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Every bit pattern, the top bit of 64-bit integers included, wrapping.
    a[i] = static_cast<T>((i * 0x9E3779B97F4A7C15ull) ^ 12345u);
    b[i] = static_cast<T>(i * 0xC2B2AE3D27D4EB4Full + 977u);
  }
  for (auto op : kOps) {
    INFO(collie::dtype_name(type) << " " << collie::reduce_op_name(op));
    auto acc = a;
    collie::reduce(type, op, acc.data(), b.data(), n);
    for (std::size_t i = 0; i < n; ++i)
      REQUIRE(acc[i] == int_ref(op, a[i], b[i]));
  }
}

template <class T>
void check_floats(DataType type) {
  const std::size_t n = 1031;
  std::vector<T> a(n), b(n);
  auto make = [](double v) {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<T>(v);
    else
      return T(static_cast<float>(v));
  };
  auto value = [](T v) {
    if constexpr (std::is_floating_point_v<T>)
      return static_cast<double>(v);
    else
      return static_cast<double>(static_cast<float>(v));
  };
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = make(std::sin(static_cast<double>(i)) * 1000);
    b[i] = make(std::cos(static_cast<double>(i) * 0.7) * 300);
  }
  a[5] = make(std::nan(""));  // NaN on either side wins min and max
  b[9] = make(std::nan(""));
  a[11] = make(std::numeric_limits<double>::infinity());
  for (auto op : kOps) {
    INFO(collie::dtype_name(type) << " " << collie::reduce_op_name(op));
    auto acc = a;
    if (!collie::supports(type, op)) {
      CHECK_THROWS_WITH(collie::reduce(type, op, acc.data(), b.data(), n),
                        ContainsSubstring("not defined on " + std::string(collie::dtype_name(type))));
      continue;
    }
    collie::reduce(type, op, acc.data(), b.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      // The exact result, rounded once to the dtype (through float for the
      // 16-bit types: exact, since float holds their sums and products of two).
      const double want_wide = float_ref(op, value(a[i]), value(b[i]));
      const double want = value(make(static_cast<double>(static_cast<float>(want_wide))));
      const double got = value(acc[i]);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
      } else if constexpr (std::is_same_v<T, double>) {
        REQUIRE(got == want_wide);
      } else {
        REQUIRE(got == want);
      }
    }
  }
}

}  // namespace

TEST_CASE("reduce kernels: every integer dtype and op, wrapping like two's complement",
          "[reduce][pure]") {
  check_ints<std::int8_t>(DataType::Int8);
  check_ints<std::uint8_t>(DataType::UInt8);
  check_ints<std::int16_t>(DataType::Int16);
  check_ints<std::uint16_t>(DataType::UInt16);
  check_ints<std::int32_t>(DataType::Int32);
  check_ints<std::uint32_t>(DataType::UInt32);
  check_ints<std::int64_t>(DataType::Int64);
  check_ints<std::uint64_t>(DataType::UInt64);
}

TEST_CASE("reduce kernels: bool reduces logically, any nonzero byte true, 0 or 1 out",
          "[reduce][pure]") {
  const std::size_t n = 1031;
  // Bytes, as they arrive from another rank: 0, 1, and other nonzero ones.
  std::vector<std::uint8_t> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<std::uint8_t>(i % 3 == 0 ? 0 : (i % 7 == 1 ? 2 : 1));
    b[i] = static_cast<std::uint8_t>(i % 5 < 2 ? 0 : (i % 11 == 3 ? 0x80 : 1));
  }
  for (auto op : kOps) {
    INFO("bool " << collie::reduce_op_name(op));
    auto acc = a;
    if (op == ReduceOp::Avg) {
      CHECK_FALSE(collie::supports(DataType::Bool, op));
      CHECK_THROWS_WITH(collie::reduce(DataType::Bool, op, acc.data(), b.data(), n),
                        ContainsSubstring("avg is not defined on bool"));
      continue;
    }
    CHECK(collie::supports(DataType::Bool, op));
    collie::reduce(DataType::Bool, op, acc.data(), b.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const bool x = a[i] != 0, y = b[i] != 0;
      bool want = false;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Max:
        case ReduceOp::BitwiseOr:
          want = x || y;
          break;
        case ReduceOp::Product:
        case ReduceOp::Min:
        case ReduceOp::BitwiseAnd:
          want = x && y;
          break;
        default:
          want = x != y;
          break;
      }
      REQUIRE(acc[i] == (want ? 1 : 0));
    }
  }
}

TEST_CASE("reduce kernels: every float dtype and op, rounded once, NaN propagating", "[reduce][pure]") {
  check_floats<float>(DataType::Float32);
  check_floats<double>(DataType::Float64);
  check_floats<collie::float16>(DataType::Float16);
  check_floats<collie::bfloat16>(DataType::BFloat16);
}

TEST_CASE("reduce kernels: empty ranges, names, and averages", "[reduce][pure]") {
  collie::reduce(DataType::Float32, ReduceOp::Sum, nullptr, nullptr, 0);
  for (auto op : kOps)
    CHECK(collie::parse_reduce_op(collie::reduce_op_name(op)) == op);
  CHECK(collie::parse_reduce_op("product") == ReduceOp::Product);
  CHECK_FALSE(collie::parse_reduce_op("mean").has_value());
  CHECK_THROWS_WITH(collie::check_supported(DataType::BFloat16, ReduceOp::BitwiseXor),
                    "reduce op bxor is not defined on bfloat16: bitwise ops take integer dtypes "
                    "(int8, uint8, int16, uint16, int32, uint32, int64, uint64)");
  // Averages: integers truncate toward zero; float16 divides before the sum.
  std::vector<std::int32_t> v = {-7, 7, 9, -1};
  collie::finish_average(DataType::Int32, v.data(), v.size(), 2);
  CHECK(v == std::vector<std::int32_t>{-3, 3, 4, 0});
  std::vector<collie::float16> h(3, collie::float16(60000.0f));
  collie::prescale_average(DataType::Float16, h.data(), h.size(), 4);
  collie::finish_average(DataType::Float16, h.data(), h.size(), 4);
  for (auto x : h)
    CHECK(static_cast<float>(x) == 15000.0f);
  std::vector<std::uint64_t> u = {15, 16, 0xFFFFFFFFFFFFFFFEull};
  collie::finish_average(DataType::UInt64, u.data(), u.size(), 2);
  CHECK(u == std::vector<std::uint64_t>{7, 8, 0x7FFFFFFFFFFFFFFFull});
  std::vector<std::int16_t> s16 = {-7, 7};
  collie::finish_average(DataType::Int16, s16.data(), s16.size(), 2);
  CHECK(s16 == std::vector<std::int16_t>{-3, 3});
  std::vector<double> d = {3.0, -1.5};
  collie::prescale_average(DataType::Float64, d.data(), d.size(), 3);
  collie::finish_average(DataType::Float64, d.data(), d.size(), 3);
  CHECK(d == std::vector<double>{1.0, -0.5});
}

TEST_CASE("stream reducer: pieces of any length and alignment, elements cut between them, "
          "in place or from a source apart",
          "[reduce][pure]") {
  // The executor's consumer for a receive that reduces: the transport hands
  // it the message in pieces wherever they arrive. Whatever the cut, the
  // result is the whole message reduced at once (whose kernels are checked
  // above), and for int32 sums, the sums computed here.
  std::mt19937 rng(7);
  for (auto type : {DataType::Int8, DataType::Int32, DataType::Int64, DataType::Float16,
                    DataType::Float32, DataType::Float64}) {
    const std::size_t es = collie::dtype_size(type);
    for (std::size_t count : {0, 1, 3, 1000, 5003}) {
      INFO(collie::dtype_name(type) << " count " << count);
      std::vector<std::byte> in(count * es), acc(count * es);
      for (std::size_t i = 0; i < count; ++i) {
        // Small values: no overflow, and exact in every float type.
        const auto a = static_cast<int>(rng() % 50), b = static_cast<int>(rng() % 50);
        auto put = [&](std::vector<std::byte>& v, int x) {
          switch (type) {
            case DataType::Int8:
              v[i] = static_cast<std::byte>(x);
              break;
            case DataType::Int32: {
              std::int32_t y = x;
              std::memcpy(&v[i * 4], &y, 4);
              break;
            }
            case DataType::Int64: {
              std::int64_t y = x;
              std::memcpy(&v[i * 8], &y, 8);
              break;
            }
            case DataType::Float16: {
              const std::uint16_t y = collie::float16::from_float(static_cast<float>(x));
              std::memcpy(&v[i * 2], &y, 2);
              break;
            }
            case DataType::Float32: {
              float y = static_cast<float>(x);
              std::memcpy(&v[i * 4], &y, 4);
              break;
            }
            default: {
              double y = x;
              std::memcpy(&v[i * 8], &y, 8);
              break;
            }
          }
        };
        put(in, a);
        put(acc, b);
      }
      auto want = acc;
      collie::reduce(type, ReduceOp::Sum, want.data(), in.data(), count);
      for (int trial = 0; trial < 20; ++trial) {
        // Odd trials take the elements to combine with from a source apart
        // from the target (an out-of-place call's input), the target
        // holding anything before.
        const bool apart = trial % 2 == 1;
        auto got = acc;
        if (apart) std::fill(got.begin(), got.end(), std::byte{0x5a});
        collie::StreamReducer r{type, ReduceOp::Sum, es, got.data(), apart ? acc.data() : nullptr};
        std::vector<std::byte> landing(4096 + 64);
        for (std::size_t at = 0; at < in.size();) {
          const std::size_t n =
              std::min<std::size_t>(1 + rng() % (trial < 10 ? 7 : 3000), in.size() - at);
          const std::size_t shift = rng() % 16;  // any address
          std::memcpy(landing.data() + shift, in.data() + at, n);
          r(at, {landing.data() + shift, n});
          at += n;
        }
        REQUIRE(r.done == in.size());
        REQUIRE(got == want);
        if (type == DataType::Int32) {
          for (std::size_t i = 0; i < count; ++i) {
            std::int32_t g, a, b;
            std::memcpy(&g, &got[i * 4], 4);
            std::memcpy(&a, &in[i * 4], 4);
            std::memcpy(&b, &acc[i * 4], 4);
            REQUIRE(g == a + b);
          }
        }
      }
      // Whole elements at any offset, in any order: a TCP message striped
      // over lanes hands its chunks over as they come (tcp/lanes.hpp).
      for (int trial = 0; trial < 6; ++trial) {
        const bool apart = trial % 2 == 1;
        auto got = acc;
        if (apart) std::fill(got.begin(), got.end(), std::byte{0x5a});
        collie::StreamReducer r{type, ReduceOp::Sum, es, got.data(), apart ? acc.data() : nullptr};
        const std::size_t chunk = es * (1 + rng() % 40);
        std::vector<std::size_t> offsets;
        for (std::size_t at = 0; at < in.size(); at += chunk)
          offsets.push_back(at);
        std::shuffle(offsets.begin(), offsets.end(), rng);
        for (const std::size_t at : offsets)
          r(at, {in.data() + at, std::min(chunk, in.size() - at)});
        REQUIRE(got == want);
      }
    }
  }
}
