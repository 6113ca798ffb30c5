// The workers' built-in elementwise operations and reductions, on any
// dtype (master_worker.hpp says their semantics). combine and binary are
// reduce.hpp's kernels.
#pragma once

#include <cstddef>

#include <collie/dtype.hpp>
#include <collie/reduce.hpp>

namespace collie::mw {

// Throws ArgumentError, naming `what`, the value and the dtype, when
// `value` cannot be used with an integer or bool buffer of `type` (not
// integral, or out of its range); `factor` also refuses bool.
void check_scalar(DataType type, double value, const char* what, bool factor);

void fill(DataType type, void* data, std::size_t count, double value);
void scale(DataType type, void* data, std::size_t count, double factor);
// y += a * x
void axpy(DataType type, void* y, const void* x, std::size_t count, double a);
// op (sum, prod, min, max, avg) over every element, in double; 0 elements
// give op's identity (avg: 0).
double reduce_all(DataType type, const void* data, std::size_t count, ReduceOp op);

}  // namespace collie::mw
