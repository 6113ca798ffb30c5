// Device buffers on a real GPU: every collective, algorithm, dtype and op,
// 2 and 4 ranks (threads of this process sharing the GPU), checked element
// by element against the reference of tools/check. Needs a CUDA device:
// without one each test says so and skips (device_staging_test.cpp runs the
// same staging code on a stand-in everywhere).
#include <numeric>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>

#include "collective_check.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;

namespace {

bool have_gpu() {
  if (collie::cuda::device_count() > 0) return true;
  WARN("skipped: needs a CUDA device; here: " << collie::cuda::status());
  return false;
}

void run_matrix(int world, bool full, std::size_t segment_bytes) {
  auto cases = collie::check::matrix(world, full);
  std::size_t i = 0;
  for (auto& c : cases) {
    // Both buffers on the device, and every fourth case one of them.
    switch (i++ % 8) {
      case 3:
        c.input_on_device = true;
        break;
      case 7:
        c.output_on_device = true;
        break;
      default:
        c.input_on_device = c.output_on_device = true;
    }
  }
  collie::test::run_ranks(
      world,
      [&](collie::ProcessGroup& pg) {
        auto memory = collie::check::cuda_memory(0);
        for (const auto& c : cases) {
          std::string first;
          std::size_t wrong = 0;
          try {
            wrong = collie::check::run_and_check(pg, c, first, memory.get());
          } catch (const std::exception& e) {
            throw std::runtime_error(collie::check::describe(c) + ": " + e.what());
          }
          expect(wrong == 0,
                 fmt::format("{}: {} wrong; first: {}", collie::check::describe(c), wrong, first));
        }
      },
      120s,
      [&](collie::InitOptions& o) {
        // Small segments; buffers up to 64 bytes staged whole: the edge
        // counts are, the 1009-element cases go segment by segment.
        o.segment_bytes = segment_bytes;
        o.stage_whole_bytes = 64;
      });
}

}  // namespace

TEST_CASE("GPU: every collective x algorithm x dtype x op on device buffers, 2 ranks", "[cuda]") {
  if (!have_gpu()) return;
  INFO(collie::cuda::status());
  run_matrix(2, true, 1024);
}

TEST_CASE("GPU: every collective x algorithm x dtype x op on device buffers, 4 ranks", "[cuda]") {
  if (!have_gpu()) return;
  run_matrix(4, true, 1024);
}

TEST_CASE("GPU: large device buffers with the default segments, 2 and 3 ranks", "[cuda]") {
  if (!have_gpu()) return;
  for (int world : {2, 3}) {
    collie::test::run_ranks(world, [&](collie::ProcessGroup& pg) {
      const std::size_t n = (std::size_t{8} << 20) / 4 + 3;  // 8 MiB of float32, and 3
      std::vector<float> host(n);
      for (std::size_t i = 0; i < n; ++i)
        host[i] = static_cast<float>(i % 1000) + static_cast<float>(pg.rank());
      collie::cuda::DeviceBuffer buf(n * 4);
      buf.upload(host.data(), n * 4);
      pg.all_reduce(std::span(static_cast<float*>(buf.data()), n));
      buf.download(host.data(), n * 4);
      const auto w = static_cast<float>(world);
      for (std::size_t i = 0; i < n; ++i) {
        const float want = w * static_cast<float>(i % 1000) + w * (w - 1) / 2;
        expect(host[i] == want, fmt::format("element {} is {}, expected {}", i, host[i], want));
      }
    });
  }
}

TEST_CASE("GPU: point-to-point between device and host buffers", "[cuda]") {
  if (!have_gpu()) return;
  collie::test::run_ranks(2, [&](collie::ProcessGroup& pg) {
    const int peer = 1 - pg.rank();
    for (std::size_t n : {std::size_t{1}, std::size_t{4096}, std::size_t{3} << 20}) {
      std::vector<std::int32_t> want(n), got(n);
      std::iota(want.begin(), want.end(), static_cast<std::int32_t>(pg.rank()));
      collie::cuda::DeviceBuffer mine(n * 4), theirs(n * 4);
      mine.upload(want.data(), n * 4);
      auto* m = static_cast<std::int32_t*>(mine.data());
      auto* t = static_cast<std::int32_t*>(theirs.data());
      if (pg.rank() == 0) {
        pg.send(std::span(m, n), peer);
        auto w = pg.irecv(std::span(t, n), peer);
        w.wait();
        theirs.download(got.data(), n * 4);
      } else {
        pg.recv(std::span(got), peer);  // into host memory
        auto w = pg.isend(std::span(m, n), peer);
        w.wait();
      }
      for (std::size_t i = 0; i < n; ++i)
        expect(got[i] == static_cast<std::int32_t>(i) + peer,
               fmt::format("{} elements: element {} is {}", n, i, got[i]));
    }
  });
}
