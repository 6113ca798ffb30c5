// Blocking point-to-point: rank 0 sends the number 1 to rank 1.
//
//   collie launch -n 2 -- p2p_blocking
//   [rank 1] Rank 1 has data 1
#include <cstdio>
#include <span>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  int data = 0;
  if (pg.rank() == 0) {
    data = 1;
    pg.send(std::span(&data, 1), /*dst=*/1);  // returns when `data` may be reused
  } else if (pg.rank() == 1) {
    pg.recv(std::span(&data, 1), /*src=*/0);  // returns when `data` holds the message
  }
  std::printf("Rank %d has data %d\n", pg.rank(), data);
  return 0;
}
