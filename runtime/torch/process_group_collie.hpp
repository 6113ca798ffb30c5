// A torch process group that is a collie group: a c10d::ProcessGroup on
// torch 1.13 (Debian 12's), a c10d::Backend for CPU and CUDA tensors on
// torch 2 (which wraps it in its own ProcessGroup).
//
// Each torch process group (the default one, and each new_group) is a collie
// group of its own: its ranks meet in the store torch hands the backend
// (torch_store.hpp), under "collie/" there, and open their own mesh (shared
// memory between ranks of one host, TCP between hosts, as collie::init
// does). Collectives and sends and receives run and complete as works.hpp
// says; tensors are checked as tensors.hpp says.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <collie/process_group.hpp>

#include <collie/async_runner.hpp>
#include "group_names.hpp"
#include "torch_store.hpp"
#include "works.hpp"

namespace collie_torch {

#if TORCH_VERSION_MAJOR >= 2
using TorchBackend = c10d::Backend;
#else
using TorchBackend = c10d::ProcessGroup;
#endif

class CallPlace;

class ProcessGroupCollie final : public TorchBackend {
 public:
  // Joins the collie group of torch's group `rank` of `size` in `store`.
  // `profiling_name` leads the titles of its calls in torch's profiler
  // ("collie:all_reduce"; torch's suite, run with collie's groups made under
  // the name "gloo", looks for "gloo:all_reduce"). `global_rank`: this
  // process's rank in the default group, for a sub-group (its errors give
  // both numbers of every rank, group_names.hpp); -1 for the default group.
  ProcessGroupCollie(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, std::string profiling_name = "collie",
                     int global_rank = -1);
  // A torch group on a collie group made elsewhere (an elastic group's,
  // elastic.hpp): its ranks are the group's, its errors as collie says them.
  explicit ProcessGroupCollie(collie::ProcessGroup group);
  // Runs what was queued, without holding the GIL.
  ~ProcessGroupCollie() override;
  // The collie group under it.
  const collie::ProcessGroup& group() const { return pg_; }

  const std::string getBackendName() const override { return "collie"; }
  // What carries this group's messages ("tcp on 127.0.0.1:41234", ...).
  std::string describe() const { return pg_.describe_transport(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  // Every rank's list of inputs, in one all_gather of them laid end to end:
  // outputs[r][j] gets rank r's inputs[j] (one dtype, as gloo's;
  // sparse_calls.cpp).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
#if TORCH_VERSION_MAJOR >= 2
  // Each pair as its own all_gather and reduce_scatter, in one Work
  // (coalesced_calls.cpp).
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // torch's sequence numbers (gloo's too): every rank starts from 0 when the
  // group is made, and counts its collectives, which every rank calls in one
  // order, so the numbers agree.
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  // The group's monitored_barrier method (torch leaves it to gloo):
  // collie_torch's, in monitored.py, which names the ranks that did not
  // arrive, as gloo's does.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  uint64_t getSequenceNumberForGroup() override { return sequence_; }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

 private:
  static collie::ProcessGroup join(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout);
  // The rank a call names (a root, a peer), checked to be one of the group.
  int rank_of(std::int64_t r, const char* what) const;
  // Queues a collective on `inputs` into `outputs`, run at `place`; its
  // Work completes when it ran.
  c10::intrusive_ptr<c10d::Work> collective(c10d::OpType type, std::vector<at::Tensor> inputs,
                                            std::vector<at::Tensor> outputs,
                                            const CallPlace& place, std::function<void()> run);
  // "collie:all_reduce": a call's title in torch's profiler, as gloo's.
  std::string profiling_title(c10d::OpType type) const;
  // The sum of a sparse COO tensor over the group, in place (sparse_calls.cpp).
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(const at::Tensor& t,
                                                  const c10d::AllreduceOptions& opts);
  // A send or receive posted as `work`.
  c10::intrusive_ptr<c10d::Work> point_to_point(c10d::OpType type, const at::Tensor& t,
                                                collie::Work work);

  // Rank 0's TCPStore, where a rank other than 0 waits for it to close
  // when it drops the world group (torch_store.hpp); empty otherwise.
  std::unique_ptr<StoreCloseWatch> close_watch_;
  collie::ProcessGroup pg_;
  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();  // sends, receives
  std::shared_ptr<Completer> settler_ =  // collectives' futures
      std::make_shared<Completer>(Completer::Threads::AsNeeded);
  std::atomic<std::uint64_t> sequence_{0};  // collectives called (setSequenceNumberForGroup)
  std::string profiling_name_;
  std::shared_ptr<const GroupNames> names_;  // how its errors name it and its ranks
  // A call waits half a millisecond for its caller to run it (async_runner.hpp).
  std::shared_ptr<collie::AsyncRunner> runner_ =
      std::make_shared<collie::AsyncRunner>(std::chrono::microseconds(500));
};

#if TORCH_VERSION_MAJOR >= 2
// The backend torch 2's next request for the same group's CUDA backend
// would be given (module.cpp) is going: forget it.
void forget_just_made(const ProcessGroupCollie* backend);
#endif

}  // namespace collie_torch
