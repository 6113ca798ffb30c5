// A parameter server in master-worker mode (collie/master_worker.hpp): fit
// y = w x + b by gradient descent. The data is sharded on the workers (a
// kernel makes each shard there: it never crosses the network); each step
// every worker computes its shard's gradient (a registered kernel), the
// workers average the gradients among themselves (all_reduce), and each
// applies the step to its copy of the weights. The master only queues the
// work, and reads the weights back now and then. Equal shards make the
// averaged gradient the full-data one, so the answer is the one a single
// process reaches on all the data; the program computes that too, and
// compares.
//
//   collie launch -n 4 -- parameter_server
//   [rank 0] step 100: loss 0.0013, w = 2.9983, b = 2.0009
//   ...
//   [rank 0] w = 3.0000, b = 2.0001 after 500 steps on 3 workers (single process: w = 3.0000,
//            b = 2.0001): same
#include <cmath>
#include <cstdio>
#include <vector>

#include <collie/collie.hpp>
#include <collie/master_worker.hpp>

namespace {

constexpr int kSamples = 4800;  // divisible by 1 to 6 and 8 workers
constexpr int kSteps = 500;
constexpr double kRate = 0.5;

double x_of(int i) {
  return static_cast<double>(i) / kSamples;
}
double y_of(int i) {
  return 3 * x_of(i) + 2 + 0.05 * std::sin(i * 12.9898);
}

// d(mean squared error)/d(w, b) over (x, y); returns the mean squared error.
double gradient(std::span<const double> x, std::span<const double> y, double w, double b,
                double g[2]) {
  g[0] = g[1] = 0;
  double loss = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = w * x[i] + b - y[i];
    loss += err * err;
    g[0] += 2 * err * x[i];
    g[1] += 2 * err;
  }
  const auto n = static_cast<double>(x.size());
  g[0] /= n;
  g[1] /= n;
  return loss / n;
}

collie::mw::Kernels kernels() {
  collie::mw::Kernels k;
  // outputs: x, y; scalars: the shard's first sample.
  k.add("make_shard", [](collie::mw::KernelArgs& a) {
    auto x = a.output<double>(0);
    auto y = a.output<double>(1);
    const int first = static_cast<int>(a.scalar(0));
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = x_of(first + static_cast<int>(i));
      y[i] = y_of(first + static_cast<int>(i));
    }
    return 0.0;
  });
  // inputs: x, y, weights (w, b); output: the gradient; returns the loss.
  k.add("gradient", [](collie::mw::KernelArgs& a) {
    auto w = a.input<double>(2);
    auto g = a.output<double>(0);
    return gradient(a.input<double>(0), a.input<double>(1), w[0], w[1], g.data());
  });
  return k;
}

void master(collie::mw::Master& m, bool& same) {
  const int workers = m.world_size() - 1;
  if (workers < 1 || kSamples % workers != 0) {
    std::fprintf(stderr, "%d samples do not split over %d workers\n", kSamples, workers);
    same = false;
    return;
  }
  const std::size_t shard = kSamples / static_cast<std::size_t>(workers);
  std::vector<collie::mw::Buffer> x, y, weights, grads;
  for (int w = 1; w <= workers; ++w) {
    x.push_back(m.alloc<double>(w, shard));
    y.push_back(m.alloc<double>(w, shard));
    weights.push_back(m.alloc<double>(w, 2));
    grads.push_back(m.alloc<double>(w, 2));
    m.call(w, "make_shard", {}, {x.back(), y.back()}, {static_cast<double>((w - 1) * shard)});
    m.fill(weights.back(), 0);
  }
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<collie::mw::Future<double>> loss;
    for (int w = 0; w < workers; ++w)
      loss.push_back(m.call(w + 1, "gradient", {x[w], y[w], weights[w]}, {grads[w]}));
    m.all_reduce(grads, collie::ReduceOp::Avg);
    for (int w = 0; w < workers; ++w) m.axpy(weights[w], -kRate, grads[w]);
    if (step % 100 == 0) {
      double mean = 0;
      for (auto& l : loss) mean += l.get() / workers;
      const auto wb = m.read<double>(weights[0]).get();
      std::printf("step %d: loss %.4f, w = %.4f, b = %.4f\n", step, mean, wb[0], wb[1]);
    }
  }
  // Every worker holds the same weights.
  const auto wb = m.read<double>(weights[0]).get();
  for (int w = 1; w < workers; ++w) same = same && m.read<double>(weights[w]).get() == wb;
  // The same training in one process, on all the data.
  std::vector<double> all_x(kSamples), all_y(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    all_x[i] = x_of(i);
    all_y[i] = y_of(i);
  }
  double w1 = 0, b1 = 0;
  for (int step = 0; step < kSteps; ++step) {
    double g[2];
    gradient(all_x, all_y, w1, b1, g);
    w1 -= kRate * g[0];
    b1 -= kRate * g[1];
  }
  same = same && std::fabs(wb[0] - w1) < 1e-9 && std::fabs(wb[1] - b1) < 1e-9;
  std::printf("w = %.4f, b = %.4f after %d steps on %d workers (single process: w = %.4f, "
              "b = %.4f): %s\n",
              wb[0], wb[1], kSteps, workers, w1, b1, same ? "same" : "DIFFERENT");
}

}  // namespace

int main() {
  try {
    collie::ProcessGroup world = collie::init();
    bool same = true;
    const auto k = kernels();
    collie::mw::run(world, k, [&](collie::mw::Master& m) { master(m, same); });
    return same ? 0 : 1;
  } catch (const collie::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
