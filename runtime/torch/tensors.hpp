// torch's tensors and ops as collie's: which a collie group can move, and
// the message that says what is wrong with one it cannot.
//
// Tensors: CPU or CUDA (call_place.hpp), contiguous, dense, one per list
// (torch's lists of several are for several GPUs per process), of the
// dtypes collie has: bool, int8, uint8, int16, int32, int64, float16,
// bfloat16, float32, float64.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <collie/process_group.hpp>

namespace collie_torch {

std::optional<collie::DataType> dtype_of(at::ScalarType t);
// collie's reduce op for torch's; PREMUL_SUM is a sum (of inputs first
// multiplied by premul_factor()).
collie::ReduceOp op_of(const c10d::ReduceOp& op);
// PREMUL_SUM's factor for `call` on `t` (a number, or a one-element
// tensor's value), checking that `t` is of a floating-point dtype; none for
// every other op.
std::optional<double> premul_factor(const c10d::ReduceOp& op, const at::Tensor& t,
                                   const char* call);
// Checks a tensor collie can move and says what is wrong otherwise.
collie::DataType check_tensor(const at::Tensor& t, const char* op);
// Input and output of one call must have one dtype: bytes move as they are.
void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op);
// The one tensor of a list.
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op);
std::size_t count_of(const at::Tensor& t);
// The count per rank of a call `op` of collective `c` on `in` and `out`,
// checked as the collective shapes its buffers (collectives::count_of_buffers,
// the runtime's check).
std::size_t checked_count(collie::Collective c, int world, int rank, const at::Tensor& in,
                          const at::Tensor& out, const char* op);
// Tensors laid end to end in one, and one cut back into tensors.
at::Tensor flatten(const std::vector<at::Tensor>& tensors);
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& outputs);
// The root's list of one tensor per rank (gather's outputs, scatter's
// inputs), each of `like`'s size and dtype; elsewhere none, and a list given
// there is refused. `what` names the list's tensors ("output"), `like_what`
// the one they must match ("input").
std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, bool at_root,
                                  int size, const at::Tensor& like, const char* op,
                                  const char* what, const char* like_what);

}  // namespace collie_torch
