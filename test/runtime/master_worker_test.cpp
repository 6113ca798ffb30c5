// Master-worker mode (master_worker.hpp), with the ranks as threads of this
// process: every dtype through alloc/write/read, order, copies between
// workers, collectives among them, futures, freeing, and failures that
// poison only what they wrote.
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/master_worker.hpp>

#include "runtime/fake_device.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::DataType;
using collie::test::expect;
using collie::test::run_ranks;
namespace mw = collie::mw;

namespace {

// Runs `program` as the master of a world of `world` ranks.
void run_job(int world, const mw::Kernels& kernels, const std::function<void(mw::Master&)>& program,
             mw::Options options = {}) {
  run_ranks(world, [&](collie::ProcessGroup& pg) {
    expect(mw::run(pg, kernels, program, options) == 0, "run() returns 0");
  });
}

// Bytes that differ at every position and for every seed (made 8 at a
// time: 64 MiB of them is quick even unoptimized under the sanitizers).
std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint64_t w = x ^ (x >> 29);
    std::memcpy(v.data() + i, &w, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<std::byte>(i * 131 + seed);
  return v;
}

// A kernel "hold" that returns 1 once `go` is set.
mw::Kernels holding(std::atomic<bool>& go) {
  mw::Kernels k;
  k.add("hold", [&go](mw::KernelArgs&) {
    while (!go.load()) std::this_thread::sleep_for(1ms);
    return 1.0;
  });
  return k;
}

}  // namespace

TEST_CASE("master-worker: every dtype goes through alloc, write and read intact, at every size",
          "[master_worker][volume]") {
  const int world = GENERATE(2, 5);
  mw::Kernels none;
  run_job(world, none, [&](mw::Master& m) {
    expect(m.world_size() == world, "world_size");
    const std::size_t eager = 64 * 1024;
    for (DataType t : collie::kDataTypes) {
      const std::size_t es = collie::dtype_size(t);
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, eager / es - 1, eager / es,
                                eager / es + 1, std::size_t{70000}}) {
        const int worker = 1 + static_cast<int>(count % static_cast<std::size_t>(world - 1));
        auto b = m.alloc(worker, t, count);
        auto data = pattern(count * es, static_cast<unsigned>(count) + 7);
        if (t == DataType::Bool)
          for (auto& x : data) x = static_cast<std::byte>(static_cast<unsigned>(x) & 1u);
        auto w = m.write(b, data.data(), data.size());
        std::vector<std::byte> back(data.size(), std::byte{0x5a});
        m.read(b, back.data(), back.size()).wait();
        expect(w.ready(), "a write is done before the read after it");
        expect(back == data, fmt::format("{} x {} on worker {}", collie::dtype_name(t), count,
                                         worker));
      }
    }
  });
}

TEST_CASE("master-worker: 64 MiB buffers on every worker at once go there and back intact",
          "[master_worker][volume]") {
  // 4 workers (2 under the sanitizers, where 256 MiB of instrumented copies
  // outlast the test's minute on a busy machine).
  const int world = COLLIE_TEST_SANITIZED ? 3 : 5;
  mw::Kernels none;
  run_job(world, none, [&](mw::Master& m) {
    std::vector<mw::Buffer> big;
    std::vector<std::vector<std::byte>> sent, got;
    for (int w = 1; w < world; ++w) {
      big.push_back(m.alloc<float>(w, 16u << 20));
      sent.push_back(pattern(64u << 20, static_cast<unsigned>(w)));
      got.emplace_back(64u << 20);
    }
    std::vector<mw::Event> reads;
    for (std::size_t i = 0; i < big.size(); ++i) {
      m.write(big[i], sent[i].data(), sent[i].size());
      reads.push_back(m.read(big[i], got[i].data(), got[i].size()));
    }
    for (std::size_t i = 0; i < big.size(); ++i) {
      reads[i].wait();
      expect(got[i] == sent[i], "64 MiB on worker " + std::to_string(i + 1));
    }
  });
}

TEST_CASE("master-worker: ten thousand queued operations run in the master's order",
          "[master_worker]") {
  mw::Kernels none;
  run_job(3, none, [&](mw::Master& m) {
    // x = 3x + 1 and x = x + 5, alternating, in uint64 arithmetic that wraps:
    // any two operations swapped give another number.
    const std::size_t n = 10000;
    auto x = m.alloc<std::uint64_t>(2, 5);
    auto one = m.alloc<std::uint64_t>(2, 5);
    m.fill(x, 7);
    m.fill(one, 1);
    std::uint64_t want = 7;
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 3 == 0) {
        m.scale(x, 3);
        m.axpy(x, 1, one);
        want = want * 3 + 1;
      } else {
        m.axpy(x, 5, one);
        want += 5;
      }
    }
    auto got = m.read<std::uint64_t>(x).get();
    for (auto v : got) expect(v == want, fmt::format("{} after {} operations, want {}", v, n, want));
  });
}

TEST_CASE("master-worker: elementwise operations and reductions on the workers",
          "[master_worker]") {
  mw::Kernels none;
  run_job(2, none, [&](mw::Master& m) {
    const std::size_t n = 1000;
    std::vector<float> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i) * 0.5f;
      b[i] = 100.0f - static_cast<float>(i);
    }
    auto ba = m.alloc<float>(1, n), bb = m.alloc<float>(1, n), out = m.alloc<float>(1, n);
    m.write(ba, std::span<const float>(a));
    m.write(bb, std::span<const float>(b));
    m.binary(out, ba, collie::ReduceOp::Max, bb);
    auto mx = m.read<float>(out);
    m.binary(out, ba, collie::ReduceOp::Sum, bb);
    m.scale(out, 2);
    auto sum2 = m.read<float>(out);
    auto total = m.reduce(out, collie::ReduceOp::Sum);
    auto lowest = m.reduce(out, collie::ReduceOp::Min);
    double want_total = 0, want_low = 1e30;
    const auto got_max = mx.get(), got_sum = sum2.get();
    for (std::size_t i = 0; i < n; ++i) {
      expect(got_max[i] == std::max(a[i], b[i]), "max at " + std::to_string(i));
      const float s = (a[i] + b[i]) * 2.0f;
      expect(got_sum[i] == s, "(a+b)*2 at " + std::to_string(i));
      want_total += static_cast<double>(s);
      want_low = std::min(want_low, static_cast<double>(s));
    }
    expect(std::abs(total.get() - want_total) < 1e-6 * std::abs(want_total), "sum");
    expect(lowest.get() == want_low, "min");
    // Integers: integral scalars only, and they wrap.
    auto i8 = m.alloc<std::int8_t>(1, 3);
    m.fill(i8, 100);
    m.scale(i8, 3);
    auto wrapped = m.read<std::int8_t>(i8).get();
    expect(wrapped[0] == static_cast<std::int8_t>(44), "int8 wraps: 300 - 256");
    bool refused = false;
    try {
      m.scale(i8, 0.5);
    } catch (const collie::ArgumentError& e) {
      refused = std::string(e.what()).find("not an integer") != std::string::npos;
    }
    expect(refused, "a fractional factor on int8 is refused at the call");
    try {
      refused = false;
      m.fill(i8, 1000);
    } catch (const collie::ArgumentError& e) {
      refused = std::string(e.what()).find("range") != std::string::npos;
    }
    expect(refused, "1000 in int8 is refused at the call");
  });
}

TEST_CASE("master-worker: copies go worker to worker, a chain and crossing both ways at once",
          "[master_worker]") {
  mw::Kernels none;
  run_job(4, none, [&](mw::Master& m) {
    const std::size_t n = 5000;
    std::vector<mw::Buffer> chain;
    for (int w : {1, 2, 3, 1}) chain.push_back(m.alloc<std::int32_t>(w, n));
    std::vector<std::int32_t> start(n);
    std::iota(start.begin(), start.end(), -2000);
    m.write(chain[0], std::span<const std::int32_t>(start));
    for (std::size_t i = 1; i < chain.size(); ++i) m.copy(chain[i], chain[i - 1]);
    expect(m.read<std::int32_t>(chain.back()).get() == start, "1 -> 2 -> 3 -> 1");
    // 64 MiB from 1 to 2 and from 2 to 1 in the same breath: each worker's
    // stream has its send and its receive in flight together. (16 MiB under
    // the sanitizers: still far more than a ring or a socket buffer holds.)
    const std::size_t big = COLLIE_TEST_SANITIZED ? 4u << 20 : 16u << 20;
    auto a1 = m.alloc<float>(1, big), a2 = m.alloc<float>(2, big);
    auto b1 = m.alloc<float>(1, big), b2 = m.alloc<float>(2, big);
    m.fill(a1, 1.5);
    m.fill(a2, -2.5);
    auto x = m.copy(b2, a1);
    auto y = m.copy(b1, a2);
    x.wait(60s);
    y.wait(60s);
    auto r2 = m.read<float>(b2), r1 = m.read<float>(b1);
    const auto v2 = r2.get(), v1 = r1.get();
    for (std::size_t i = 0; i < big; i += 4099) {
      expect(v2[i] == 1.5f, "1 -> 2 at " + std::to_string(i));
      expect(v1[i] == -2.5f, "2 -> 1 at " + std::to_string(i));
    }
    expect(v2.back() == 1.5f && v1.back() == -2.5f, "the last elements");
  });
}

TEST_CASE("master-worker: all_reduce, broadcast and all_gather among the workers",
          "[master_worker]") {
  const int world = GENERATE(2, 4);
  mw::Kernels none;
  run_job(world, none, [&](mw::Master& m) {
    const int nw = world - 1;
    const std::size_t n = 3001;
    std::vector<mw::Buffer> bufs, outs, gathered;
    for (int w = 1; w <= nw; ++w) {
      bufs.push_back(m.alloc<std::int64_t>(w, n));
      std::vector<std::int64_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = w * 1000 + static_cast<std::int64_t>(i);
      m.write(bufs.back(), std::span<const std::int64_t>(v)).wait();
      gathered.push_back(m.alloc<std::int64_t>(w, n * static_cast<std::size_t>(nw)));
    }
    m.all_gather(bufs, gathered);
    m.all_reduce(bufs, collie::ReduceOp::Sum);
    for (int w = 1; w <= nw; ++w) {
      auto g = m.read<std::int64_t>(gathered[static_cast<std::size_t>(w - 1)]).get();
      auto s = m.read<std::int64_t>(bufs[static_cast<std::size_t>(w - 1)]).get();
      for (std::size_t i = 0; i < n; ++i) {
        std::int64_t want = 0;
        for (int k = 1; k <= nw; ++k) {
          want += k * 1000 + static_cast<std::int64_t>(i);
          expect(g[static_cast<std::size_t>(k - 1) * n + i] == k * 1000 + static_cast<std::int64_t>(i),
                 "all_gather");
        }
        expect(s[i] == want, "all_reduce on worker " + std::to_string(w));
      }
    }
    m.fill(bufs[0], 0);
    m.fill(bufs.back(), 42);
    m.broadcast(bufs, nw).wait();
    for (const auto& b : bufs)
      for (auto v : m.read<std::int64_t>(b).get()) expect(v == 42, "broadcast from the last worker");
  });
}

TEST_CASE("master-worker: kernels run by name, and one that throws poisons only its outputs",
          "[master_worker]") {
  mw::Kernels k;
  k.add("square_into", [](mw::KernelArgs& a) {
    auto in = a.input<double>(0);
    auto out = a.output<double>(0);
    double total = 0;
    for (std::size_t i = 0; i < in.size(); ++i) total += out[i] = in[i] * in[i];
    return total + a.scalar(0);
  });
  k.add("explode", [](mw::KernelArgs&) -> double { throw std::runtime_error("boom"); });
  k.add("text_length", [](mw::KernelArgs& a) { return static_cast<double>(a.text().size()); });
  std::string unknown, direct, later, other;
  run_job(3, k, [&](mw::Master& m) {
    auto x = m.alloc<double>(1, 4), y = m.alloc<double>(1, 4), z = m.alloc<double>(1, 4);
    m.fill(x, 3);
    auto total = m.call(1, "square_into", {x}, {y}, {0.5});
    expect(total.get() == 36.5, "the kernel's value");
    expect(m.read<double>(y).get() == std::vector<double>(4, 9.0), "its output");
    expect(m.call(1, "text_length", {}, {}, {}, "hello").get() == 5.0, "the text argument");
    try {
      m.call(1, "no_such_kernel", {}, {});
    } catch (const collie::ArgumentError& e) {
      unknown = e.what();
    }
    auto bad = m.call(1, "explode", {x}, {y, z});
    try {
      bad.wait();
    } catch (const collie::Error& e) {
      direct = e.what();
    }
    // y and z are poisoned: what uses them fails naming the first cause;
    // x, an input, and the other worker are untouched.
    auto after = m.scale(z, 2);
    try {
      after.wait();
    } catch (const collie::Error& e) {
      later = e.what();
    }
    expect(m.read<double>(x).get() == std::vector<double>(4, 3.0), "the input is intact");
    auto w2 = m.alloc<double>(2, 2);
    m.fill(w2, 1);
    expect(m.reduce(w2).get() == 2.0, "the other worker goes on");
    // A copy from a poisoned buffer poisons its destination on the other worker.
    auto dst = m.alloc<double>(2, 4);
    auto c = m.copy(dst, y);
    try {
      c.wait();
    } catch (const collie::Error& e) {
      other = e.what();
    }
    bool read_failed = false;
    try {
      m.read<double>(dst).get();
    } catch (const collie::Error& e) {
      read_failed = std::string(e.what()).find("boom") != std::string::npos;
    }
    expect(read_failed, "the copy's destination is poisoned with the first cause");
  });
  CHECK_THAT(unknown, ContainsSubstring("no_such_kernel"));
  CHECK_THAT(direct, ContainsSubstring("call(explode) on worker 1 failed") &&
                         ContainsSubstring("worker 1 (rank 1 on") && ContainsSubstring("boom"));
  CHECK_THAT(later, ContainsSubstring("scale(") && ContainsSubstring("poisoned") &&
                        ContainsSubstring("boom"));
  CHECK_THAT(other, ContainsSubstring("copy(") && ContainsSubstring("poisoned"));
}

TEST_CASE("master-worker: futures wait with timeouts, and freed buffers give memory back",
          "[master_worker]") {
  std::atomic<bool> go{false};
  const mw::Kernels k = holding(go);
  std::string timed_out;
  run_job(2, k, [&](mw::Master& m) {
    auto held = m.call(1, "hold", {}, {});
    auto after = m.alloc<float>(1, 10);
    auto f = m.fill(after, 1);
    try {
      f.wait(20ms);
    } catch (const collie::TimeoutError& e) {
      timed_out = e.what();
    }
    expect(!held.ready() && !f.ready(), "nothing runs past the held kernel");
    go = true;
    expect(held.get() == 1.0, "the kernel's value");
    f.wait();
    const double base = m.memory(1).get();
    {
      auto big = m.alloc<std::uint8_t>(1, 10u << 20);
      m.fill(big, 1);
      expect(m.memory(1).get() == base + (10u << 20), "10 MiB held");
    }
    expect(m.memory(1).get() == base, "and given back when the last handle went");
  });
  CHECK_THAT(timed_out, ContainsSubstring("fill(float32[10]") && ContainsSubstring("20 ms"));
}

TEST_CASE("master-worker: a world of one has no workers", "[master_worker]") {
  mw::Kernels none;
  std::string error;
  run_job(1, none, [&](mw::Master& m) {
    expect(m.world_size() == 1, "world_size");
    try {
      m.alloc<float>(1, 4);
    } catch (const collie::ArgumentError& e) {
      error = e.what();
    }
  });
  CHECK_THAT(error, ContainsSubstring("not a worker"));
}

TEST_CASE("master-worker: buffers in a worker's device memory, staged where the CPU works on them",
          "[master_worker][device]") {
  // The stand-in for CUDA (fake_device.hpp): its memory crashes the test if
  // the CPU touches it, and its copies run only when asked about.
  collie::test::FakeDeviceScope fake;
  mw::Kernels k;
  k.add("where", [](mw::KernelArgs& a) { return static_cast<double>(a.output_slots()[0].device); });
  run_job(3, k, [&](mw::Master& m) {
    const std::size_t n = 70000;  // above the inline write limit
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) - 500.0f;
    auto d1 = m.alloc<float>(1, n, /*device=*/0);
    auto d2 = m.alloc<float>(2, n, /*device=*/1);
    auto h2 = m.alloc<float>(2, n);
    expect(d1.device() == 0 && d1.describe().find("(cuda:0)") != std::string::npos, "describe");
    m.write(d1, std::span<const float>(v));
    expect(m.read<float>(d1).get() == v, "write and read through device memory");
    m.copy(d2, d1);  // device to device, across workers
    m.scale(d2, 2);
    m.axpy(d2, 1, d2);  // y += y: 4 v
    m.copy(h2, d2);     // device to host on one worker
    auto got = m.read<float>(h2).get();
    for (std::size_t i = 0; i < n; ++i) expect(got[i] == 4.0f * v[i], "scale, axpy, copies");
    expect(m.reduce(d1, collie::ReduceOp::Max).get() == 499.0, "reduce on device memory");
    auto small = m.alloc<std::int32_t>(1, 3, 0);
    const std::vector<std::int32_t> s = {1, 2, 3};
    m.write(small, std::span<const std::int32_t>(s));
    m.binary(small, small, collie::ReduceOp::Sum, small);
    expect(m.read<std::int32_t>(small).get() == std::vector<std::int32_t>{2, 4, 6}, "x + x");
    expect(m.call(1, "where", {}, {d1}).get() == 0.0, "a kernel sees the device");
    // A collective among the workers on device buffers.
    auto e1 = m.alloc<double>(1, 5, 0), e2 = m.alloc<double>(2, 5, 1);
    m.fill(e1, 1.5);
    m.fill(e2, 2.5);
    m.all_reduce({e1, e2});
    expect(m.read<double>(e2).get() == std::vector<double>(5, 4.0), "all_reduce on devices");
  });
}

TEST_CASE("master-worker: no wait outlasts the run's timeout, and each names the worker that holds it",
          "[master_worker]") {
  std::atomic<bool> go{false};
  const mw::Kernels k = holding(go);
  std::string waited, synchronized, windowed;
  mw::Options o;
  o.timeout = 500ms;
  o.window = 2;
  run_job(
      2, k,
      [&](mw::Master& m) {
        auto held = m.call(1, "hold", {}, {});
        auto b = m.alloc<float>(1, 4);
        try {
          held.wait();  // no timeout given: the run's
        } catch (const collie::TimeoutError& e) {
          waited = e.what();
        }
        try {
          m.synchronize();
        } catch (const collie::TimeoutError& e) {
          synchronized = e.what();
        }
        try {
          m.fill(b, 1);  // the third in a window of 2
        } catch (const collie::TimeoutError& e) {
          windowed = e.what();
        }
        go = true;
        m.synchronize();
        expect(held.get() == 1.0, "the held kernel finishes once let go");
      },
      o);
  CHECK_THAT(waited, ContainsSubstring("call(hold) on worker 1") &&
                         ContainsSubstring("not done after 500 ms"));
  CHECK_THAT(synchronized, ContainsSubstring("synchronize: no progress for 500 ms") &&
                               ContainsSubstring("worker 1 (rank 1") &&
                               ContainsSubstring("has finished nothing for") &&
                               ContainsSubstring("the oldest: call(hold)"));
  CHECK_THAT(windowed, ContainsSubstring("no room in the window of 2") &&
                           ContainsSubstring("worker 1 (rank 1"));
}
