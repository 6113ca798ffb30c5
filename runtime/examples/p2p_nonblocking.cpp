// Non-blocking point-to-point: isend and irecv return at once with a Work;
// the buffer belongs to collie until wait() returns.
//
//   collie launch -n 2 -- p2p_nonblocking
//   [rank 0] Rank 0 started sending
//   [rank 1] Rank 1 started receiving
//   [rank 1] Rank 1 has data 1
#include <cstdio>
#include <span>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  int data = 0;
  collie::Work work;
  if (pg.rank() == 0) {
    data = 1;
    work = pg.isend(std::span(&data, 1), /*dst=*/1);
    std::printf("Rank 0 started sending\n");
  } else if (pg.rank() == 1) {
    work = pg.irecv(std::span(&data, 1), /*src=*/0);
    std::printf("Rank 1 started receiving\n");
  }
  work.wait();  // do not touch `data` before this
  std::printf("Rank %d has data %d\n", pg.rank(), data);
  return 0;
}
