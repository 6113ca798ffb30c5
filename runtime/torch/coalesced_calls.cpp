// torch's coalesced calls (process_group_collie.hpp): several tensors in
// one call and one Work, each run as its own collective, in the list's
// order, on every rank alike: allreduce_coalesced (torch 1.13 and 2), and
// torch 2's allgather_into_tensor_coalesced and
// reduce_scatter_tensor_coalesced (what FSDP2 and the functional
// collectives call).
#include "call_place.hpp"
#include "process_group_collie.hpp"
#include "tensors.hpp"

namespace collie_torch {

namespace {

// One place for every tensor of the call (a call's tensors share a device).
CallPlace place_of(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                   const char* call) {
  const auto place = a.empty() ? CallPlace() : CallPlace::of(a.front());
  for (const auto* list : {&a, &b})
    for (const auto& t : *list)
      place.check(t, call);
  return place;
}

#if TORCH_VERSION_MAJOR >= 2
// Each pair's dtype and count per rank, checked as collective `c` shapes
// its buffers.
struct Pairs {
  std::vector<collie::DataType> dtypes;
  std::vector<std::size_t> counts;
};
Pairs checked_pairs(collie::Collective c, int world, int rank, const std::vector<at::Tensor>& outputs,
                    const std::vector<at::Tensor>& inputs, const char* call) {
  TORCH_CHECK(outputs.size() == inputs.size(), "collie: ", call, ": ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  Pairs p;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    p.dtypes.push_back(check_tensor(inputs[i], call));
    check_tensor(outputs[i], call);
    check_same_dtype(inputs[i], outputs[i], call);
    p.counts.push_back(checked_count(c, world, rank, inputs[i], outputs[i], call));
  }
  return p;
}
#endif

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* call = "allreduce_coalesced";
  std::vector<collie::DataType> dtypes;
  std::vector<std::optional<double>> premul;
  for (const auto& t : tensors) {
    dtypes.push_back(check_tensor(t, call));
    premul.push_back(premul_factor(opts.reduceOp, t, call));
  }
  const auto op = op_of(opts.reduceOp);
  const auto place = place_of(tensors, {}, call);
  return collective(c10d::OpType::ALLREDUCE_COALESCED, tensors, tensors, place, [=, this] {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (premul[i]) tensors[i].mul_(*premul[i]);
      pg_.run_collective(collie::Collective::AllReduce, dtypes[i], tensors[i].data_ptr(),
                         tensors[i].data_ptr(), count_of(tensors[i]), op, 0,
                         place.options(opts.timeout));
    }
  });
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* call = "allgather_into_tensor_coalesced";
  const auto pairs =
      checked_pairs(collie::Collective::AllGather, getSize(), getRank(), outputs, inputs, call);
  const auto place = place_of(inputs, outputs, call);
  return collective(c10d::OpType::COALESCED, inputs, outputs, place, [=, this] {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      pg_.run_collective(collie::Collective::AllGather, pairs.dtypes[i], inputs[i].data_ptr(),
                         outputs[i].data_ptr(), pairs.counts[i], collie::ReduceOp::Sum, 0,
                         place.options(opts.timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* call = "reduce_scatter_tensor_coalesced";
  const auto pairs = checked_pairs(collie::Collective::ReduceScatter, getSize(), getRank(),
                                   outputs, inputs, call);
  std::vector<std::optional<double>> premul;
  for (const auto& in : inputs)
    premul.push_back(premul_factor(opts.reduceOp, in, call));
  const auto op = op_of(opts.reduceOp);
  const auto place = place_of(inputs, outputs, call);
  return collective(c10d::OpType::COALESCED, inputs, outputs, place, [=, this] {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      // PREMUL_SUM reads a scaled copy: the input is kept.
      const auto in = premul[i] ? inputs[i] * *premul[i] : inputs[i];
      pg_.run_collective(collie::Collective::ReduceScatter, pairs.dtypes[i], in.data_ptr(),
                         outputs[i].data_ptr(), pairs.counts[i], op, 0,
                         place.options(opts.timeout));
    }
  });
}
#endif

}  // namespace collie_torch
