// gather: every rank sends 1; rank 0 ends with [1, 1, 1, 1].
//
//   collie launch -n 4 -- gather
//   [rank 0] Rank 0 has data [1, 1, 1, 1]
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  const float mine = 1;
  std::vector<float> all;  // written on the root only
  if (pg.rank() == 0) all.resize(static_cast<std::size_t>(pg.size()));
  pg.gather(std::span(&mine, 1), std::span(all), /*root=*/0);
  if (pg.rank() == 0) {
    std::string text;
    for (float x : all) text += (text.empty() ? "" : ", ") + std::to_string(static_cast<int>(x));
    std::printf("Rank %d has data [%s]\n", pg.rank(), text.c_str());
  }
}
