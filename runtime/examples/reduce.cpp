// reduce: every rank holds 1; rank 0 ends with their sum (4 with 4 ranks).
//
//   collie launch -n 4 -- reduce
//   [rank 0] Rank 0 has data 4
#include <cstdio>
#include <span>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  float data = 1;
  pg.reduce(std::span(&data, 1), /*root=*/0, collie::ReduceOp::Sum);
  std::printf("Rank %d has data %g\n", pg.rank(), static_cast<double>(data));
}
