// The collective checker's matrix of cases (collective_check.hpp).
#include <collie/collectives/algorithms.hpp>

#include "collective_check.hpp"

namespace collie::check {

std::vector<CollectiveCase> matrix(int world, bool full) {
  std::vector<CollectiveCase> cases;
  const std::size_t big = 1009;  // a prime: uneven chunks; several segments of 1 KiB
  for (auto coll : collectives::kCollectives) {
    for (auto algo : collectives::algorithms_for(coll)) {
      CollectiveCase base;
      base.collective = coll;
      base.algorithm = algo;
      base.root = world - 1;
      // Every dtype, and every op it supports.
      for (auto t : kDataTypes) {
        if (!full && t != DataType::Float32 && t != DataType::Int32) continue;
        for (auto op : kReduceOps) {
          if (!collectives::reduces(coll) && op != ReduceOp::Sum) continue;
          if (!supports(t, op)) continue;
          if (!full && op != ReduceOp::Sum && !(op == ReduceOp::Avg && t == DataType::Float32))
            continue;
          auto c = base;
          c.dtype = t;
          c.op = op;
          c.count = coll == Collective::Barrier ? 1 : big;
          cases.push_back(c);
        }
      }
      if (coll == Collective::Barrier) continue;
      // Edge counts; in-place; async; every root.
      for (std::size_t count :
           {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(world - 1)}) {
        auto c = base;
        c.count = count;
        cases.push_back(c);
      }
      auto inplace = base;
      inplace.count = 17;
      inplace.in_place = true;
      if (coll == Collective::AllReduce || coll == Collective::Reduce) cases.push_back(inplace);
      auto async = base;
      async.count = 33;
      async.async = true;
      async.in_place = coll == Collective::AllReduce || coll == Collective::Reduce;
      cases.push_back(async);
      if (collectives::has_root(coll)) {
        for (int root = 0; root < world; ++root) {
          auto c = base;
          c.root = root;
          c.count = static_cast<std::size_t>(world) + 2;
          c.in_place = coll == Collective::Reduce;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

}  // namespace collie::check
