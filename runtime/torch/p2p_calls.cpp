// torch's sends and receives as collie's (process_group_collie.hpp):
// posted at once, completed by whichever thread waits (works.hpp).
#include "call_place.hpp"
#include "process_group_collie.hpp"
#include "tensors.hpp"

namespace collie_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::send(std::vector<at::Tensor>& tensors, int dst,
                                    int tag) {
  const auto& t = single(tensors, "send");
  check_tensor(t, "send");
  rank_of(dst, "send to");
  CallPlace::of(t).synchronize();
  auto work = pg_.isend(t.data_ptr(), t.nbytes(), dst, tag);
  return point_to_point(c10d::OpType::SEND, t, std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::recv(std::vector<at::Tensor>& tensors, int src,
                                    int tag) {
  const auto& t = single(tensors, "recv");
  check_tensor(t, "recv");
  rank_of(src, "recv from");
  CallPlace::of(t).synchronize();
  auto work = pg_.irecv(t.data_ptr(), t.nbytes(), src, tag);
  return point_to_point(c10d::OpType::RECV, t, std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::recvAnysource(std::vector<at::Tensor>& tensors,
                                             int tag) {
  const auto& t = single(tensors, "recv");
  check_tensor(t, "recv");
  CallPlace::of(t).synchronize();
  auto work = pg_.irecv_any(t.data_ptr(), t.nbytes(), tag);
  return point_to_point(c10d::OpType::RECVANYSOURCE, t, std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollie::point_to_point(c10d::OpType type,
                                                                  const at::Tensor& t,
                                                                  collie::Work work) {
  return c10::make_intrusive<PointToPointWork>(getRank(), type, profiling_title(type),
                                               std::vector<at::Tensor>{t}, std::move(work),
                                               completer_, names_);
}

}  // namespace collie_torch
