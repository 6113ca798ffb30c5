// Reduction operators and the kernels that apply them.
//
// Sum, Product, Min, Max and Avg work on every dtype but bool; BitwiseAnd/
// Or/Xor on the integer dtypes and bool (a bitwise op on a float type, or
// avg on bool, is an Error naming both). Semantics, element by element:
// - bool is logical, as torch.distributed and NCCL reduce it: sum, max and
//   bor are or; product, min and band are and; bxor is xor. Any nonzero
//   byte counts as true; results are 0 or 1.
// - Integers wrap around on overflow (two's complement), never undefined.
//   Avg on integers is the sum divided by the group size, truncated toward
//   zero, the sum itself wrapping as for Sum.
// - float16 and bfloat16 are widened to float, combined, and rounded back to
//   nearest-even once per combination, as IEEE 754 would do in float and then
//   round. Avg on float16 divides each rank's contribution by the group size
//   before summing (float16 overflows at 65504; a sum of large values would
//   not survive), on every other float type it divides the sum.
// - Min and Max propagate NaN: if either element is NaN, the result is NaN.
// The kernels are written so the compiler vectorizes them; on x86-64 CPUs
// with AVX2 and F16C a second compiled copy of each is chosen at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <collie/dtype.hpp>

namespace collie {

enum class ReduceOp : std::uint8_t { Sum, Product, Min, Max, Avg, BitwiseAnd, BitwiseOr, BitwiseXor };

// "sum", "prod", "min", "max", "avg", "band", "bor", "bxor" (nccl-tests' names
// for the first five).
std::string_view reduce_op_name(ReduceOp op);
// The inverse of reduce_op_name; also accepts "product", "and", "or", "xor".
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
// Every reduce op, in declaration order.
inline constexpr ReduceOp kReduceOps[] = {ReduceOp::Sum,        ReduceOp::Product,
                                          ReduceOp::Min,        ReduceOp::Max,
                                          ReduceOp::Avg,        ReduceOp::BitwiseAnd,
                                          ReduceOp::BitwiseOr,  ReduceOp::BitwiseXor};

// Whether `op` applies to `type` (bitwise ops: integer dtypes only).
bool supports(DataType type, ReduceOp op);
// Throws collie::Error naming both when !supports(type, op).
void check_supported(DataType type, ReduceOp op);

// acc[i] = op(acc[i], in[i]) for i in [0, count). Avg combines as Sum (see
// finish_average). The ranges must not overlap.
void reduce(DataType type, ReduceOp op, void* acc, const void* in, std::size_t count);

// Avg's share before and after the sum: prescale_average(data) divides each
// element by `group_size` when the dtype is float16, and does nothing
// otherwise; finish_average(data) divides by `group_size` for every other
// dtype and does nothing for float16.
void prescale_average(DataType type, void* data, std::size_t count, int group_size);
void finish_average(DataType type, void* data, std::size_t count, int group_size);

}  // namespace collie
