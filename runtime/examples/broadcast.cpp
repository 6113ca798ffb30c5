// broadcast: rank 0 holds 2, every rank ends with 2.
//
//   collie launch -n 4 -- broadcast
//   [rank 3] Rank 3 has data 2
#include <cstdio>
#include <span>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  float data = 1;
  if (pg.rank() == 0) data += 1;
  pg.broadcast(std::span(&data, 1), /*root=*/0);
  std::printf("Rank %d has data %g\n", pg.rank(), static_cast<double>(data));
}
