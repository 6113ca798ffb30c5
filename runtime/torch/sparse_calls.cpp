// torch's calls collie runs as an all_gather of what each rank holds
// (process_group_collie.hpp): allgather_coalesced, every rank's list laid
// end to end; and the sum of sparse COO tensors, as gloo sums them: every
// rank's indices and values gathered, then coalesced (duplicates summed).
#include <numeric>

#include "call_place.hpp"
#include "process_group_collie.hpp"
#include "tensors.hpp"

namespace collie_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "collie: allgather_coalesced: no input tensors");
  const auto dtype = check_tensor(inputs.front(), op);
  const auto place = CallPlace::of(inputs.front());
  for (const auto& t : inputs) {
    check_tensor(t, op);
    check_same_dtype(t, inputs.front(), op);
    place.check(t, op);
  }
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize(),
              "collie: allgather_coalesced: ", outputs.size(), " output lists for ", getSize(),
              " ranks");
  std::vector<at::Tensor> outs;  // rank by rank, as the gathered buffer holds them
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "collie: allgather_coalesced: an output list of ",
                list.size(), " tensors for ", inputs.size(), " inputs");
    for (std::size_t j = 0; j < list.size(); ++j) {
      check_tensor(list[j], op);
      check_same_dtype(list[j], inputs.front(), op);
      place.check(list[j], op);
      TORCH_CHECK(count_of(list[j]) == count_of(inputs[j]), "collie: allgather_coalesced: output ",
                  j, " has ", count_of(list[j]), " elements, input ", j, " ", count_of(inputs[j]));
      outs.push_back(list[j]);
    }
  }
  return collective(c10d::OpType::ALLGATHER_COALESCED, inputs, outs, place, [=, this] {
    const auto flat = flatten(inputs);
    const auto count = count_of(flat);
    auto gathered = at::empty({static_cast<std::int64_t>(count) * getSize()}, flat.options());
    pg_.run_collective(collie::Collective::AllGather, dtype, flat.data_ptr(), gathered.data_ptr(),
                       count, collie::ReduceOp::Sum, 0, place.options(opts.timeout));
    unflatten(gathered, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::sparse_allreduce(
    const at::Tensor& t, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(t.layout() == at::kSparse, "collie: allreduce: a sparse COO tensor, please");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM,
              "collie: allreduce: a sparse tensor is summed only (as gloo's)");
  TORCH_CHECK(!t.is_cuda(), "collie: allreduce: a sparse tensor on the CPU, please");
  check_tensor(t._values(), "allreduce");
  const auto timeout = opts.timeout;
  return collective(c10d::OpType::ALLREDUCE, {t}, {t}, CallPlace(), [=, this] {
    const auto input = t.coalesce();
    const auto indices = input._indices().contiguous();  // [sparse dims, nnz], int64
    const auto values = input._values().contiguous();    // [nnz, dense sizes...]
    const auto options = CallPlace().options(timeout);
    const auto n = static_cast<std::size_t>(getSize());
    // How many entries each rank has.
    const std::int64_t mine = input._nnz();
    auto nnz = at::empty({getSize()}, at::kLong);
    pg_.run_collective(collie::Collective::AllGather, collie::DataType::Int64, &mine,
                       nnz.data_ptr(), 1, collie::ReduceOp::Sum, 0, options);
    // Every rank's indices and values, end to end.
    const auto sparse_dims = static_cast<std::size_t>(indices.size(0));
    const auto dense = values.sizes().slice(1);
    const auto per_value = static_cast<std::size_t>(
        std::accumulate(dense.begin(), dense.end(), std::int64_t{1}, std::multiplies<>()));
    std::vector<std::size_t> entries(n), index_counts(n), value_counts(n);
    std::size_t all = 0;
    for (std::size_t r = 0; r < n; ++r) {
      entries[r] = static_cast<std::size_t>(nnz.data_ptr<std::int64_t>()[r]);
      index_counts[r] = entries[r] * sparse_dims;
      value_counts[r] = entries[r] * per_value;
      all += entries[r];
    }
    auto gathered_indices = at::empty({static_cast<std::int64_t>(all * sparse_dims)}, at::kLong);
    const std::size_t my_indices = indices.numel();
    pg_.run_vector_collective(collie::Collective::AllGather, collie::DataType::Int64,
                              indices.data_ptr(), std::span(&my_indices, 1),
                              gathered_indices.data_ptr(), index_counts, 0, options);
    auto value_sizes = values.sizes().vec();
    value_sizes[0] = static_cast<std::int64_t>(all);
    auto gathered_values = at::empty(value_sizes, values.options());
    const std::size_t my_values = values.numel();
    pg_.run_vector_collective(collie::Collective::AllGather, check_tensor(values, "allreduce"),
                              values.data_ptr(), std::span(&my_values, 1),
                              gathered_values.data_ptr(), value_counts, 0, options);
    // Rank r's indices are a [sparse dims, nnz_r] block: side by side.
    std::vector<at::Tensor> blocks;
    std::int64_t offset = 0;
    for (std::size_t r = 0; r < n; ++r) {
      const auto count = static_cast<std::int64_t>(index_counts[r]);
      blocks.push_back(gathered_indices.narrow(0, offset, count)
                           .view({static_cast<std::int64_t>(sparse_dims),
                                  static_cast<std::int64_t>(entries[r])}));
      offset += count;
    }
    const auto sum =
        at::sparse_coo_tensor(at::cat(blocks, 1), gathered_values, input.sizes()).coalesce();
    t.copy_(sum);
  });
}

}  // namespace collie_torch
