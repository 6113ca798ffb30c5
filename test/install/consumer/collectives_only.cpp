// A program that runs collectives, including collie.hpp alone: it must
// compile without Asio's headers (run_consumer_test.cmake checks which
// headers it reads) and run in a world of one.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <collie/collie.hpp>

int main() {
  char dir[] = "/tmp/collie-collectives-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  collie::InitOptions init;
  init.init_method = std::string("file://") + dir + "/store";
  init.rank = 0;
  init.world_size = 1;
  auto pg = collie::init(init);
  std::vector<int> v = {6};
  pg.all_reduce(std::span(v), collie::ReduceOp::Sum);
  std::vector<int> b = {7};
  collie::Work w = pg.broadcast_async(std::span(b), 0);
  w.wait();
  std::printf("collectives_only: all_reduce %d, broadcast %d\n", v[0], b[0]);
  std::filesystem::remove_all(dir);
  return 0;
}
