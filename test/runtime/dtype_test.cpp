// float16 and bfloat16 conversions against the IEEE 754 definition: the
// nearest representable value, ties to the even one, overflow to infinity.
#include <cmath>
#include <limits>
#include <random>

#include "support/catch.hpp"

#include <collie/dtype.hpp>

namespace {

// Checks that `bits` is the correctly rounded 16-bit value of x, given the
// exact decoder of the format (to_float is exact: every 16-bit value is a float).
template <class Decode>
bool correctly_rounded(float x, std::uint16_t bits, Decode decode, double overflow_at) {
  const double v = x;
  const float got = decode(bits);
  if (std::isnan(x)) return std::isnan(got);
  // Infinity exactly from halfway between the largest finite value and the
  // next power of two (the tie goes to the even encoding: infinity).
  const bool overflows = std::fabs(v) >= overflow_at;
  if (overflows || std::isinf(got)) {
    return overflows && std::isinf(got) && std::signbit(got) == std::signbit(x);
  }
  // Neighbours in the 16-bit encoding (same sign); the chosen one must be
  // at least as close, and on a tie have an even significand.
  for (int step : {-1, 1}) {
    const int other_bits = static_cast<int>(bits & 0x7fff) + step;
    if (other_bits < 0 || other_bits > 0x7fff) continue;
    const float other = decode(static_cast<std::uint16_t>((bits & 0x8000) | other_bits));
    if (std::isinf(other) || std::isnan(other)) continue;
    const double d_got = std::fabs(v - static_cast<double>(got));
    const double d_other = std::fabs(v - static_cast<double>(other));
    if (d_other < d_got) return false;
    if (d_other == d_got && (bits & 1) != 0) return false;
  }
  return std::signbit(got) == std::signbit(x) || got == 0.0f;
}

}  // namespace

TEST_CASE("float16: every value survives a round trip through float", "[dtype][pure]") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = collie::float16::to_float(bits);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(collie::float16::to_float(collie::float16::from_float(f))));
    } else {
      REQUIRE(collie::float16::from_float(f) == bits);
    }
  }
  CHECK(collie::float16::to_float(0x3c00) == 1.0f);
  CHECK(collie::float16::to_float(0x7bff) == 65504.0f);
  CHECK(collie::float16::to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(collie::float16::to_float(0xc000) == -2.0f);
}

TEST_CASE("float16 and bfloat16 round floats to nearest, ties to even", "[dtype][pure]") {
  std::mt19937 rng(12345);
  std::vector<float> xs = {std::numeric_limits<float>::max(),
                           std::ldexp(1.99f, 127),
                           0.0f,
                           -0.0f,
                           1.0f,
                           65504.0f,
                           65519.99f,
                           65520.0f,
                           1e9f,
                           -1e9f,
                           std::ldexp(1.0f, -25),
                           std::ldexp(1.5f, -25),
                           std::ldexp(1.0f, -24),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           1.0f + std::ldexp(1.0f, -11),
                           1.0f + 3 * std::ldexp(1.0f, -11),
                           std::ldexp(1.0f, -14),
                           std::numeric_limits<float>::denorm_min()};
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 300000; ++i)
    xs.push_back(std::bit_cast<float>(any_bits(rng)));  // every exponent
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  for (int i = 0; i < 300000; ++i)
    xs.push_back(small(rng));  // the float16 range
  for (float x : xs) {
    const auto h = collie::float16::from_float(x);
    INFO("x = " << x << " float16 bits " << h);
    REQUIRE(correctly_rounded(x, h, collie::float16::to_float, 65520.0));
    const auto b = collie::bfloat16::from_float(x);
    INFO("bfloat16 bits " << b);
    REQUIRE(correctly_rounded(x, b, collie::bfloat16::to_float, std::ldexp(2.0 - 1.0 / 256, 127)));
  }
}

TEST_CASE("dtype names and sizes", "[dtype][pure]") {
  CHECK(collie::dtype_of<float> == collie::DataType::Float32);
  CHECK(collie::dtype_of<collie::bfloat16> == collie::DataType::BFloat16);
  CHECK(collie::dtype_name(collie::DataType::Float16) == "float16");
  CHECK(collie::dtype_size(collie::DataType::Int64) == 8);
  CHECK(collie::dtype_size(collie::DataType::BFloat16) == 2);
  CHECK(collie::dtype_size(collie::DataType::UInt8) == 1);
}
