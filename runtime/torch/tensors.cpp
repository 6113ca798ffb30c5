// torch's tensors and ops as collie's (tensors.hpp).
#include "tensors.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <collie/collectives/algorithms.hpp>
#include <collie/error.hpp>

#include <utility>

namespace collie_torch {

std::optional<collie::DataType> dtype_of(at::ScalarType t) {
  static constexpr std::pair<at::ScalarType, collie::DataType> kTypes[] = {
      {at::kBool, collie::DataType::Bool},         {at::kChar, collie::DataType::Int8},
      {at::kByte, collie::DataType::UInt8},        {at::kShort, collie::DataType::Int16},
      {at::kInt, collie::DataType::Int32},         {at::kLong, collie::DataType::Int64},
      {at::kHalf, collie::DataType::Float16},      {at::kBFloat16, collie::DataType::BFloat16},
      {at::kFloat, collie::DataType::Float32},     {at::kDouble, collie::DataType::Float64},
  };
  for (const auto& [torch_type, type] : kTypes)
    if (torch_type == t) return type;
  return std::nullopt;
}

collie::ReduceOp op_of(const c10d::ReduceOp& op) {
  static constexpr std::pair<c10d::ReduceOp::RedOpType, collie::ReduceOp> kOps[] = {
      {c10d::ReduceOp::SUM, collie::ReduceOp::Sum},
      {c10d::ReduceOp::AVG, collie::ReduceOp::Avg},
      {c10d::ReduceOp::PRODUCT, collie::ReduceOp::Product},
      {c10d::ReduceOp::MIN, collie::ReduceOp::Min},
      {c10d::ReduceOp::MAX, collie::ReduceOp::Max},
      {c10d::ReduceOp::BAND, collie::ReduceOp::BitwiseAnd},
      {c10d::ReduceOp::BOR, collie::ReduceOp::BitwiseOr},
      {c10d::ReduceOp::BXOR, collie::ReduceOp::BitwiseXor},
  };
  for (const auto& [torch_op, collie_op] : kOps)
    if (torch_op == op.op_) return collie_op;
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) return collie::ReduceOp::Sum;
  TORCH_CHECK(false, "collie: reduce op ", static_cast<int>(op.op_),
              " is not one collie has: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR and "
              "PREMUL_SUM");
}

namespace {

// PREMUL_SUM's factor where a tensor holds it: torch 2's one tensor, torch
// 1.13's list of one per device.
template <typename Supplement>
std::optional<double> tensor_factor_of(const Supplement& s) {
  if constexpr (requires { s.tensor_factor; }) {
    if (s.tensor_factor.defined()) return s.tensor_factor.template item<double>();
  } else {
    if (!s.tensor_factors.empty()) return s.tensor_factors.front().template item<double>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> premul_factor(const c10d::ReduceOp& op, const at::Tensor& t,
                                   const char* call) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return std::nullopt;
  const auto* factor = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(factor != nullptr, "collie: ", call, ": PREMUL_SUM without its factor");
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), "collie: ", call,
              ": PREMUL_SUM of a tensor of dtype ", t.scalar_type(),
              "; it multiplies floating-point tensors only");
  if (const auto from_tensor = tensor_factor_of(*factor)) return from_tensor;
  return factor->double_factor;
}

collie::DataType check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "collie: ", op, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "collie: ", op, ": a tensor on ",
              t.device().str(), "; the collie backend takes CPU and CUDA tensors");
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

std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, bool at_root,
                                  int size, const at::Tensor& like, const char* op,
                                  const char* what, const char* like_what) {
  if (!at_root) {
    TORCH_CHECK(lists.empty() || lists.front().empty(), "collie: ", op, ": only the root passes ",
                what, " tensors");
    return {};
  }
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists.front().size()) == size, "collie: ", op,
              ": the root needs one list of ", size, " ", what, " tensors");
  for (const auto& t : lists.front())
    TORCH_CHECK(count_of(t) == count_of(like) && t.scalar_type() == like.scalar_type() &&
                    t.device() == like.device(),
                "collie: ", op, ": every ", what, " must have the ", like_what,
                "'s size, dtype and device");
  return lists.front();
}

std::size_t checked_count(collie::Collective c, int world, int rank, const at::Tensor& in,
                          const at::Tensor& out, const char* op) {
  try {
    return collie::collectives::count_of_buffers(c, world, count_of(in), count_of(out), rank, 0);
  } catch (const collie::Error& e) {
    TORCH_CHECK(false, "collie: ", op, ": ", e.what());
  }
}

}  // namespace collie_torch
