// torch's tensors and ops as collie's (tensors.hpp).
#include "tensors.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace collie_torch {

std::optional<collie::DataType> dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kBool:
      return collie::DataType::Bool;
    case at::kChar:
      return collie::DataType::Int8;
    case at::kByte:
      return collie::DataType::UInt8;
    case at::kShort:
      return collie::DataType::Int16;
    case at::kInt:
      return collie::DataType::Int32;
    case at::kLong:
      return collie::DataType::Int64;
    case at::kHalf:
      return collie::DataType::Float16;
    case at::kBFloat16:
      return collie::DataType::BFloat16;
    case at::kFloat:
      return collie::DataType::Float32;
    case at::kDouble:
      return collie::DataType::Float64;
    default:
      return std::nullopt;
  }
}

collie::ReduceOp op_of(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return collie::ReduceOp::Sum;
    case c10d::ReduceOp::AVG:
      return collie::ReduceOp::Avg;
    case c10d::ReduceOp::PRODUCT:
      return collie::ReduceOp::Product;
    case c10d::ReduceOp::MIN:
      return collie::ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      return collie::ReduceOp::Max;
    case c10d::ReduceOp::BAND:
      return collie::ReduceOp::BitwiseAnd;
    case c10d::ReduceOp::BOR:
      return collie::ReduceOp::BitwiseOr;
    case c10d::ReduceOp::BXOR:
      return collie::ReduceOp::BitwiseXor;
    default:
      TORCH_CHECK(false, "collie: reduce op ", static_cast<int>(op.op_),
                  " (PREMUL_SUM) is not supported; use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or "
                  "BXOR");
  }
}

collie::DataType check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "collie: ", op, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "collie: ", op, ": a tensor on ", t.device().str(),
              "; the collie backend takes CPU tensors (use gloo or nccl for device tensors, or "
              "move it with .cpu())");
  TORCH_CHECK(t.layout() == at::kStrided, "collie: ", op, ": a sparse tensor; only dense ones");
  TORCH_CHECK(t.is_contiguous(), "collie: ", op,
              ": a tensor that is not contiguous; pass tensor.contiguous() (and copy the result "
              "back)");
  const auto d = dtype_of(t.scalar_type());
  TORCH_CHECK(d.has_value(), "collie: ", op, ": dtype ", t.scalar_type(),
              " is not one collie carries (bool, int8, uint8, int16, int32, int64, float16, "
              "bfloat16, float32, float64)");
  return *d;
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "collie: ", op, ": tensors of dtypes ",
              a.scalar_type(), " and ", b.scalar_type(), "; they must be the same");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "collie: ", op, ": ", tensors.size(),
              " tensors in a list; the collie backend takes one per call");
  return tensors.front();
}

std::size_t count_of(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel());
}

collie::CollectiveOptions options_for(std::chrono::milliseconds timeout) {
  collie::CollectiveOptions o;
  o.memory = collie::MemoryKind::Host;
  if (timeout.count() >= 0 && timeout != c10d::kUnsetTimeout) o.timeout = timeout;
  return o;
}

at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors)
    flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& outputs) {
  std::int64_t offset = 0;
  for (const auto& o : outputs) {
    const auto n = o.numel();
    o.copy_(flat.narrow(0, offset, n).view(o.sizes()));
    offset += n;
  }
}

}  // namespace collie_torch
