// A torch process group that is a collie group (process_group_collie.hpp):
// each of torch's calls checked, then run as collie's.
#include "process_group_collie.hpp"

#include <algorithm>
#include <numeric>

#include <torch/csrc/utils/pybind.h>

#include <collie/error.hpp>
#include <collie/store/server.hpp>

#include "call_place.hpp"
#include "torch_keys.hpp"
#include "tensors.hpp"
#include "torch_store.hpp"

namespace collie_torch {

namespace {

// collie's collectives of uneven counts take host memory only: a call on
// CUDA tensors runs them on host copies, made and copied back by torch on
// the caller's stream (and waited for).
at::Tensor on_host(const at::Tensor& t) {
  return t.is_cuda() ? t.cpu() : t;
}
at::TensorOptions host_options(const at::Tensor& like) {
  return like.options().device(at::kCPU);
}

// Every member's global rank, by group rank: each says its own in the
// group's store (a sub-group; the default group's are its own ranks).
std::vector<int> global_ranks(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                              int global_rank) {
  std::vector<int> ranks(static_cast<std::size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  if (global_rank < 0) return ranks;
  const auto own = std::to_string(global_rank);
  store->set(keys::global_rank(rank), std::vector<std::uint8_t>(own.begin(), own.end()));
  for (int r = 0; r < size; ++r) {
    const auto value = store->get(keys::global_rank(r));
    ranks[static_cast<std::size_t>(r)] = std::stoi(std::string(value.begin(), value.end()));
  }
  return ranks;
}

}  // namespace

std::string ProcessGroupCollie::profiling_title(c10d::OpType type) const {
  const char* op = "unknown";
  switch (type) {
    case c10d::OpType::BROADCAST: op = "broadcast"; break;
    case c10d::OpType::ALLREDUCE:
    case c10d::OpType::ALLREDUCE_COALESCED: op = "all_reduce"; break;
    case c10d::OpType::REDUCE: op = "reduce"; break;
    case c10d::OpType::ALLGATHER:
    case c10d::OpType::ALLGATHER_COALESCED: op = "all_gather"; break;
    case c10d::OpType::_ALLGATHER_BASE: op = "all_gather_into_tensor"; break;
    case c10d::OpType::GATHER: op = "gather"; break;
    case c10d::OpType::SCATTER: op = "scatter"; break;
    case c10d::OpType::REDUCE_SCATTER: op = "reduce_scatter"; break;
    case c10d::OpType::_REDUCE_SCATTER_BASE: op = "reduce_scatter_tensor"; break;
    case c10d::OpType::ALLTOALL_BASE:
    case c10d::OpType::ALLTOALL: op = "all_to_all"; break;
    case c10d::OpType::BARRIER: op = "barrier"; break;
    case c10d::OpType::SEND: op = "send"; break;
    case c10d::OpType::RECV: op = "recv"; break;
    case c10d::OpType::RECVANYSOURCE: op = "recvAnySource"; break;
    default: break;
  }
  return profiling_name_ + ":" + op;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::collective(c10d::OpType type,
                                                              std::vector<at::Tensor> inputs,
                                                              std::vector<at::Tensor> outputs,
                                                              const CallPlace& place,
                                                              std::function<void()> run) {
  ++sequence_;
  auto work = c10::make_intrusive<CollectiveWork>(getRank(), type, profiling_title(type),
                                                  std::move(inputs), std::move(outputs), runner_,
                                                  settler_);
  collie::AsyncRunner::Task task;
  // The task's finish holds the Work until after its run returned.
  task.run = [run = std::move(run), place, w = work.get(), names = names_] {
    try {
      const auto on = place.enter();
      run();
    } catch (...) {
      w->fail(names->rewrite(std::current_exception()));
    }
  };
  task.finish = [work] { work->complete(); };
  collie::AsyncRunner::Ticket ticket = 0;
  TORCH_CHECK(runner_->post(std::move(task), &ticket),
              "collie: the process group is being destroyed");
  work->set_ticket(ticket);
  return work;
}

ProcessGroupCollie::ProcessGroupCollie(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout,
                                       std::string profiling_name, int global_rank)
    : TorchBackend(rank, size),
      pg_(join(store, rank, size, timeout)),
      profiling_name_(std::move(profiling_name)),
      names_(std::make_shared<GroupNames>(global_ranks(store, rank, size, global_rank))) {
  if (rank != 0) {
    auto id = identify(store);
    if (hosted_by_rank_zero(id)) close_watch_ = std::make_unique<StoreCloseWatch>(id);
  }
}

ProcessGroupCollie::ProcessGroupCollie(collie::ProcessGroup group)
    : TorchBackend(group.rank(), group.size()),
      pg_(std::move(group)),
      profiling_name_("collie"),
      names_(std::make_shared<GroupNames>([&] {
        std::vector<int> ranks(static_cast<std::size_t>(pg_.size()));
        for (std::size_t r = 0; r < ranks.size(); ++r)
          ranks[r] = static_cast<int>(r);
        return ranks;
      }())) {}

ProcessGroupCollie::~ProcessGroupCollie() {
#if TORCH_VERSION_MAJOR >= 2
  forget_just_made(this);
#endif
  runner_->stop();
  // Python drops the group holding the GIL; the runner finishing its queue
  // drops tensors, which may need the GIL to free their Python objects:
  // wait without it.
  auto finish = [&] {
    runner_.reset();
    completer_.reset();
    settler_.reset();
    // Made again at once, the world group would reach rank 0's old store.
    if (close_watch_) close_watch_->wait(std::chrono::seconds(10));
  };
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release unlocked;
    finish();
  } else {
    finish();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::broadcast(std::vector<at::Tensor>& tensors,
                                         const c10d::BroadcastOptions& opts) {
  const auto& t = single(tensors, "broadcast");
  const auto dtype = check_tensor(t, "broadcast");
  const int root = rank_of(opts.rootRank, "broadcast");
  const auto place = CallPlace::of(t);
  return collective(c10d::OpType::BROADCAST, {t}, {t}, place, [=, this] {
    pg_.run_collective(collie::Collective::Broadcast, dtype, t.data_ptr(), t.data_ptr(),
                       count_of(t), collie::ReduceOp::Sum, root, place.options(opts.timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::allreduce(std::vector<at::Tensor>& tensors,
                                         const c10d::AllreduceOptions& opts) {
  const auto& t = single(tensors, "allreduce");
  if (t.is_sparse()) return sparse_allreduce(t, opts);
  const auto dtype = check_tensor(t, "allreduce");
  const auto op = op_of(opts.reduceOp);
  const auto premul = premul_factor(opts.reduceOp, t, "allreduce");
  const auto place = CallPlace::of(t);
  return collective(c10d::OpType::ALLREDUCE, {t}, {t}, place, [=, this] {
    if (premul) t.mul_(*premul);
    pg_.run_collective(collie::Collective::AllReduce, dtype, t.data_ptr(), t.data_ptr(),
                       count_of(t), op, 0, place.options(opts.timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::reduce(std::vector<at::Tensor>& tensors,
                                      const c10d::ReduceOptions& opts) {
  const auto& t = single(tensors, "reduce");
  const auto dtype = check_tensor(t, "reduce");
  const auto op = op_of(opts.reduceOp);
  const auto premul = premul_factor(opts.reduceOp, t, "reduce");
  const int root = rank_of(opts.rootRank, "reduce");
  const auto place = CallPlace::of(t);
  return collective(c10d::OpType::REDUCE, {t}, {t}, place, [=, this] {
    // PREMUL_SUM reads a scaled copy: the input of a rank but the root is kept.
    const auto in = premul ? t * *premul : t;
    pg_.run_collective(collie::Collective::Reduce, dtype, in.data_ptr(), t.data_ptr(),
                       count_of(t), op, root, place.options(opts.timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                         std::vector<at::Tensor>& inputs,
                                         const c10d::AllgatherOptions& opts) {
  const auto& in = single(inputs, "allgather");
  const auto dtype = check_tensor(in, "allgather");
  TORCH_CHECK(outputs.size() == 1, "collie: allgather: one list of outputs, please");
  auto outs = outputs.front();
  TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "collie: allgather: ", outs.size(),
              " output tensors for ", getSize(), " ranks");
  std::vector<std::size_t> counts;
  for (const auto& o : outs) {
    TORCH_CHECK(o.scalar_type() == in.scalar_type(), "collie: allgather: an output of dtype ",
                o.scalar_type(), " for an input of ", in.scalar_type());
    counts.push_back(count_of(o));
  }
  TORCH_CHECK(counts[static_cast<std::size_t>(getRank())] == count_of(in),
              "collie: allgather: this rank's output has ", counts[static_cast<std::size_t>(getRank())],
              " elements but its input ", count_of(in));
  const bool equal = std::all_of(counts.begin(), counts.end(),
                                 [&](std::size_t c) { return c == counts.front(); });
  const auto place = CallPlace::of(in);
  for (const auto& o : outs)
    place.check(o, "allgather");
  const auto timeout = opts.timeout;
  return collective(c10d::OpType::ALLGATHER, {in}, outs, place, [=, this] {
    const auto total = static_cast<std::int64_t>(
        std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
    if (equal) {
      auto flat = at::empty({total}, in.options());
      pg_.run_collective(collie::Collective::AllGather, dtype, in.data_ptr(), flat.data_ptr(),
                         count_of(in), collie::ReduceOp::Sum, 0, place.options(timeout));
      unflatten(flat, outs);
    } else {
      const std::size_t own = count_of(in);
      const auto host_in = on_host(in);
      auto flat = at::empty({total}, host_options(in));
      pg_.run_vector_collective(collie::Collective::AllGather, dtype, host_in.data_ptr(),
                                std::span(&own, 1), flat.data_ptr(), counts, 0,
                                CallPlace().options(timeout));
      unflatten(flat, outs);
      place.synchronize();
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::_allgather_base(at::Tensor& output, at::Tensor& input,
                                               const c10d::AllgatherOptions& opts) {
  const auto dtype = check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  check_same_dtype(input, output, "_allgather_base");
  const auto place = CallPlace::of(input);
  place.check(output, "_allgather_base");
  const auto count = checked_count(collie::Collective::AllGather, getSize(), getRank(), input,
                                   output, "_allgather_base");
  return collective(c10d::OpType::_ALLGATHER_BASE, {input}, {output}, place, [=, this] {
    pg_.run_collective(collie::Collective::AllGather, dtype, input.data_ptr(),
                       output.data_ptr(), count, collie::ReduceOp::Sum, 0,
                       place.options(opts.timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const c10d::GatherOptions& opts) {
  const auto& in = single(inputs, "gather");
  const auto dtype = check_tensor(in, "gather");
  const int root = rank_of(opts.rootRank, "gather");
  const auto outs =
      root_list(outputs, getRank() == root, getSize(), in, "gather", "output", "input");
  const auto place = CallPlace::of(in);
  const auto timeout = opts.timeout;
  return collective(c10d::OpType::GATHER, {in}, outs, place, [=, this] {
    at::Tensor flat;
    if (const auto gathered = collie::collectives::extents(collie::Collective::Gather, getSize(),
                                                           count_of(in), getRank(), root)
                                  .output)
      flat = at::empty({static_cast<std::int64_t>(*gathered)}, in.options());
    pg_.run_collective(collie::Collective::Gather, dtype, in.data_ptr(),
                       flat.defined() ? flat.data_ptr() : nullptr, count_of(in),
                       collie::ReduceOp::Sum, root, place.options(timeout));
    if (flat.defined()) unflatten(flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::scatter(std::vector<at::Tensor>& outputs,
                                       std::vector<std::vector<at::Tensor>>& inputs,
                                       const c10d::ScatterOptions& opts) {
  const auto& out = single(outputs, "scatter");
  const auto dtype = check_tensor(out, "scatter");
  const int root = rank_of(opts.rootRank, "scatter");
  const auto ins =
      root_list(inputs, getRank() == root, getSize(), out, "scatter", "input", "output");
  const auto place = CallPlace::of(out);
  const auto timeout = opts.timeout;
  return collective(c10d::OpType::SCATTER, ins, {out}, place, [=, this] {
    at::Tensor flat;
    if (getRank() == root) flat = flatten(ins);
    pg_.run_collective(collie::Collective::Scatter, dtype,
                       flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(),
                       count_of(out), collie::ReduceOp::Sum, root, place.options(timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::reduce_scatter(std::vector<at::Tensor>& outputs,
                                              std::vector<std::vector<at::Tensor>>& inputs,
                                              const c10d::ReduceScatterOptions& opts) {
  const auto& out = single(outputs, "reduce_scatter");
  const auto dtype = check_tensor(out, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs.front().size()) == getSize(),
              "collie: reduce_scatter: one list of ", getSize(), " input tensors, please");
  auto ins = inputs.front();
  const auto place = CallPlace::of(out);
  for (const auto& i : ins) {
    TORCH_CHECK(count_of(i) == count_of(out) && i.scalar_type() == out.scalar_type(),
                "collie: reduce_scatter: every input must have the output's size and dtype");
    place.check(i, "reduce_scatter");
  }
  const auto op = op_of(opts.reduceOp);
  const auto premul = premul_factor(opts.reduceOp, out, "reduce_scatter");
  const auto timeout = opts.timeout;
  return collective(c10d::OpType::REDUCE_SCATTER, ins, {out}, place, [=, this] {
    const auto flat = flatten(ins);
    if (premul) flat.mul_(*premul);
    pg_.run_collective(collie::Collective::ReduceScatter, dtype, flat.data_ptr(),
                       out.data_ptr(), count_of(out), op, 0, place.options(timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const auto dtype = check_tensor(output, "_reduce_scatter_base");
  check_tensor(input, "_reduce_scatter_base");
  check_same_dtype(output, input, "_reduce_scatter_base");
  const auto place = CallPlace::of(output);
  place.check(input, "_reduce_scatter_base");
  const auto count = checked_count(collie::Collective::ReduceScatter, getSize(), getRank(), input,
                                   output, "_reduce_scatter_base");
  const auto op = op_of(opts.reduceOp);
  const auto premul = premul_factor(opts.reduceOp, input, "_reduce_scatter_base");
  return collective(c10d::OpType::_REDUCE_SCATTER_BASE, {input}, {output}, place, [=, this] {
    const auto in = premul ? input * *premul : input;
    pg_.run_collective(collie::Collective::ReduceScatter, dtype, in.data_ptr(),
                       output.data_ptr(), count, op, 0, place.options(opts.timeout));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::alltoall_base(at::Tensor& output, at::Tensor& input,
                                             std::vector<int64_t>& output_splits,
                                             std::vector<int64_t>& input_splits,
                                             const c10d::AllToAllOptions& opts) {
  const auto dtype = check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  check_same_dtype(input, output, "alltoall_base");
  const auto place = CallPlace::of(input);
  place.check(output, "alltoall_base");
  const auto n = static_cast<std::size_t>(getSize());
  const auto timeout = opts.timeout;
  if (output_splits.empty() && input_splits.empty()) {
    const auto count = checked_count(collie::Collective::AllToAll, getSize(), getRank(), input,
                                     output, "alltoall_base");
    return collective(c10d::OpType::ALLTOALL_BASE, {input}, {output}, place, [=, this] {
      pg_.run_collective(collie::Collective::AllToAll, dtype, input.data_ptr(),
                         output.data_ptr(), count, collie::ReduceOp::Sum, 0,
                         place.options(timeout));
    });
  }
  // Splits count rows of dimension 0; an empty list means equal splits.
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const std::size_t rows = t.dim() == 0 ? 1 : static_cast<std::size_t>(t.size(0));
    const std::size_t row = rows == 0 ? 0 : count_of(t) / rows;
    std::vector<std::size_t> out(n);
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "collie: alltoall_base: ", rows, " rows of the ", which,
                  " do not split into ", n, " equal parts");
      for (auto& c : out) c = rows / n * row;
      return out;
    }
    TORCH_CHECK(splits.size() == n, "collie: alltoall_base: ", splits.size(), " ", which,
                " splits for ", n, " ranks");
    std::size_t sum = 0;
    for (std::size_t j = 0; j < n; ++j) {
      TORCH_CHECK(splits[j] >= 0, "collie: alltoall_base: a negative split");
      out[j] = static_cast<std::size_t>(splits[j]) * row;
      sum += static_cast<std::size_t>(splits[j]);
    }
    TORCH_CHECK(sum == rows, "collie: alltoall_base: the ", which, " splits add up to ", sum,
                " rows but it has ", rows);
    return out;
  };
  const auto send = counts(input, input_splits, "input");
  const auto recv = counts(output, output_splits, "output");
  return collective(c10d::OpType::ALLTOALL_BASE, {input}, {output}, place, [=, this] {
    const auto in = on_host(input);
    auto out = place.on_device() ? at::empty(output.sizes(), host_options(output)) : output;
    pg_.run_vector_collective(collie::Collective::AllToAll, dtype, in.data_ptr(), send,
                              out.data_ptr(), recv, 0, CallPlace().options(timeout));
    if (place.on_device()) {
      output.copy_(out);
      place.synchronize();
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::alltoall(std::vector<at::Tensor>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::AllToAllOptions& opts) {
  const auto n = static_cast<std::size_t>(getSize());
  TORCH_CHECK(outputs.size() == n && inputs.size() == n, "collie: alltoall: ", inputs.size(),
              " inputs and ", outputs.size(), " outputs for ", n, " ranks");
  const auto dtype = check_tensor(inputs.front(), "alltoall");
  const auto place = CallPlace::of(inputs.front());
  std::vector<std::size_t> send, recv;
  for (std::size_t j = 0; j < n; ++j) {
    check_tensor(inputs[j], "alltoall");
    check_tensor(outputs[j], "alltoall");
    place.check(inputs[j], "alltoall");
    place.check(outputs[j], "alltoall");
    TORCH_CHECK(inputs[j].scalar_type() == inputs.front().scalar_type() &&
                    outputs[j].scalar_type() == inputs.front().scalar_type(),
                "collie: alltoall: every tensor must have the same dtype");
    send.push_back(count_of(inputs[j]));
    recv.push_back(count_of(outputs[j]));
  }
  const auto timeout = opts.timeout;
  return collective(c10d::OpType::ALLTOALL, inputs, outputs, place, [=, this] {
    const auto in = on_host(flatten(inputs));
    const auto total = std::accumulate(recv.begin(), recv.end(), std::size_t{0});
    auto out = at::empty({static_cast<std::int64_t>(total)}, host_options(inputs.front()));
    pg_.run_vector_collective(collie::Collective::AllToAll, dtype, in.data_ptr(), send,
                              out.data_ptr(), recv, 0, CallPlace().options(timeout));
    unflatten(out, outputs);
    place.synchronize();
  });
}

void ProcessGroupCollie::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  pybind11::gil_scoped_acquire gil;
  const auto seconds = static_cast<double>(opts.timeout.count()) / 1000.0;
  const auto monitored = pybind11::module_::import("collie_torch.monitored");
#if TORCH_VERSION_MAJOR >= 2
  // torch's tables know the ProcessGroup around this backend, which
  // monitored.py finds by the backend's address (backend_address()).
  monitored.attr("monitored_barrier_of_backend")(reinterpret_cast<std::uintptr_t>(this), seconds,
                                                 wait_all_ranks);
#else
  // The group's Python object, which torch's own tables know it by.
  const auto self = c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(this);
  monitored.attr("monitored_barrier")(pybind11::cast(self), seconds, wait_all_ranks);
#endif
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::barrier(const c10d::BarrierOptions& opts) {
  const CallPlace place;
  return collective(c10d::OpType::BARRIER, {}, {}, place,
                    [=, this] { pg_.barrier(place.options(opts.timeout)); });
}

collie::ProcessGroup ProcessGroupCollie::join(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout) {
  const auto id = identify(store);
  // Rank 0's process serves torch's TCPStore there: a connection from every
  // rank, and one more from each other rank's StoreCloseWatch, 2(n-1) open
  // files where a default soft limit allows 1,024.
  if (rank == 0 && hosted_by_rank_zero(id)) collie::store::raise_open_file_limit();
  collie::InitOptions o;
  o.store = collie_served(id, timeout);
  if (o.store) {
    o.store_served_at = id.host + ":" + std::to_string(id.port);
    o.store_key_prefix = id.prefix;
  } else {
    o.store = adapt(store);
  }
  o.store_name = id.name;
  o.route_to = id.host;
  o.rank = rank;
  o.world_size = size;
  if (timeout.count() > 0) o.timeout = timeout;
  return collie::init(o);
}

int ProcessGroupCollie::rank_of(std::int64_t r, const char* what) const {
  TORCH_CHECK(r >= 0 && r < getSize(), "collie: ", what, " rank ", r,
              ": the group has ranks 0 to ", getSize() - 1);
  return static_cast<int>(r);
}

}  // namespace collie_torch
