// all_reduce: every rank holds 1, and every rank ends with the sum (4 with
// 4 ranks).
//
//   collie launch -n 4 -- all_reduce
//   [rank 1] Rank 1 has data 4
#include <cstdio>
#include <span>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  float data = 1;
  pg.all_reduce(std::span(&data, 1), collie::ReduceOp::Sum);
  std::printf("Rank %d has data %g\n", pg.rank(), static_cast<double>(data));
}
