// The reduce ops as users name them, and which dtype takes which
// (reduce.hpp); reduce.cpp has the kernels.
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/reduce.hpp>

namespace collie {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Product:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::BitwiseAnd:
      return "band";
    case ReduceOp::BitwiseOr:
      return "bor";
    case ReduceOp::BitwiseXor:
      return "bxor";
  }
  return "unknown";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (auto op : kReduceOps) {
    if (name == reduce_op_name(op)) return op;
  }
  if (name == "product") return ReduceOp::Product;
  if (name == "and") return ReduceOp::BitwiseAnd;
  if (name == "or") return ReduceOp::BitwiseOr;
  if (name == "xor") return ReduceOp::BitwiseXor;
  return std::nullopt;
}

namespace {

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::BitwiseAnd || op == ReduceOp::BitwiseOr || op == ReduceOp::BitwiseXor;
}

bool is_float(DataType type) {
  return type == DataType::Float16 || type == DataType::BFloat16 || type == DataType::Float32 ||
         type == DataType::Float64;
}

}  // namespace

bool supports(DataType type, ReduceOp op) {
  if (type == DataType::Bool) return op != ReduceOp::Avg;
  return !(is_bitwise(op) && is_float(type));
}

void check_supported(DataType type, ReduceOp op) {
  if (type == DataType::Bool && op == ReduceOp::Avg) {
    throw Error(
        "reduce op avg is not defined on bool: bool reduces logically (sum and max are or, "
        "product and min are and)");
  }
  if (!supports(type, op)) {
    throw Error(fmt::format("reduce op {} is not defined on {}: bitwise ops take integer dtypes "
                            "(int8, uint8, int16, uint16, int32, uint32, int64, uint64)",
                            reduce_op_name(op), dtype_name(type)));
  }
}

}  // namespace collie
