// all_gather: every rank sends 1; every rank ends with [1, 1, 1, 1].
//
//   collie launch -n 4 -- all_gather
//   [rank 3] Rank 3 has data [1, 1, 1, 1]
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  const float mine = 1;
  std::vector<float> all(static_cast<std::size_t>(pg.size()));
  pg.all_gather(std::span(&mine, 1), std::span(all));
  std::string text;
  for (float x : all) text += (text.empty() ? "" : ", ") + std::to_string(static_cast<int>(x));
  std::printf("Rank %d has data [%s]\n", pg.rank(), text.c_str());
}
