// scatter: rank 0 holds [1, 2, ..., n]; rank i receives i + 1.
//
//   collie launch -n 4 -- scatter
//   [rank 2] Rank 2 has data 3
#include <cstdio>
#include <numeric>
#include <span>
#include <vector>

#include <collie/collie.hpp>

int main() {
  collie::ProcessGroup pg = collie::init();
  std::vector<float> pieces;  // only the root's is read
  if (pg.rank() == 0) {
    pieces.resize(static_cast<std::size_t>(pg.size()));
    std::iota(pieces.begin(), pieces.end(), 1.0f);
  }
  float data = 0;
  pg.scatter(std::span<const float>(pieces), std::span(&data, 1), /*root=*/0);
  std::printf("Rank %d has data %g\n", pg.rank(), static_cast<double>(data));
}
