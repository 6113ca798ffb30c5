// Data-parallel training in miniature: fit y = w x + b by gradient descent,
// each rank on its own shard of the data, the gradients averaged across
// ranks with all_reduce(avg) at every step. Because the shards are equal,
// the averaged gradient is the full-data gradient, so every rank reaches the
// weights a single process reaches on all the data; the program computes
// that single-process run too and compares.
//
//   collie launch -n 4 -- linear_regression
//   [rank 0] Rank 0: w = 3.0012, b = 1.9987 after 500 steps (single process: w = 3.0012,
//            b = 1.9987): same
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include <collie/collie.hpp>

namespace {

constexpr int kSamples = 4800;  // divisible by 1, 2, 3, 4, 5, 6, 8
constexpr int kSteps = 500;
constexpr double kRate = 0.5;

// The data set: x in [0, 1), y = 3 x + 2 plus a deterministic wobble.
double x_of(int i) {
  return static_cast<double>(i) / kSamples;
}
double y_of(int i) {
  return 3 * x_of(i) + 2 + 0.05 * std::sin(i * 12.9898);
}

// d(mean squared error)/d(w, b) over samples [first, last).
void gradient(int first, int last, double w, double b, double g[2]) {
  g[0] = g[1] = 0;
  for (int i = first; i < last; ++i) {
    const double err = w * x_of(i) + b - y_of(i);
    g[0] += 2 * err * x_of(i);
    g[1] += 2 * err;
  }
  g[0] /= last - first;
  g[1] /= last - first;
}

}  // namespace

int main() {
  collie::ProcessGroup pg = collie::init();
  if (kSamples % pg.size() != 0) {
    std::fprintf(stderr, "%d samples do not split evenly over %d ranks\n", kSamples, pg.size());
    return 1;
  }
  const int shard = kSamples / pg.size();
  const int first = pg.rank() * shard;
  double w = 0, b = 0;
  for (int step = 0; step < kSteps; ++step) {
    double g[2];
    gradient(first, first + shard, w, b, g);
    pg.all_reduce(std::span(g), collie::ReduceOp::Avg);  // the mean of the shards' gradients
    w -= kRate * g[0];
    b -= kRate * g[1];
  }
  // The same training in one process, on all the data.
  double w1 = 0, b1 = 0;
  for (int step = 0; step < kSteps; ++step) {
    double g[2];
    gradient(0, kSamples, w1, b1, g);
    w1 -= kRate * g[0];
    b1 -= kRate * g[1];
  }
  const bool same = std::fabs(w - w1) < 1e-9 && std::fabs(b - b1) < 1e-9;
  std::printf("Rank %d: w = %.4f, b = %.4f after %d steps (single process: w = %.4f, b = %.4f): %s\n",
              pg.rank(), w, b, kSteps, w1, b1, same ? "same" : "DIFFERENT");
  return same ? 0 : 1;
}
