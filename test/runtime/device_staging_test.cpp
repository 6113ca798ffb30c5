// Device buffers, staged through pinned host memory, checked on a stand-in
// for CUDA (fake_device.hpp: memory the CPU cannot touch, copies that run
// only when asked about, injected CUDA errors), so that every machine runs
// the staging code's logic: segmenting, the order of copies, the bounded
// pinned memory, the error paths. The same code on a real GPU is
// cuda_test.cpp's.
#include <atomic>
#include <dlfcn.h>
#include <numeric>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>

#include "collective_check.hpp"
#include "fake_device.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;
using collie::test::FakeDeviceScope;

namespace {

// 1 KiB segments: several per message at modest counts. Buffers up to
// `whole` bytes are staged whole: 64 by default here, so that the matrix's
// edge counts are and its 1009-element cases go segment by segment.
// Calls in chunks (chunked_call.hpp) only where `chunk` says.
void run_ranks(int world, const std::function<void(collie::ProcessGroup&)>& body,
               std::size_t segment_bytes = 1024, std::size_t whole = 64, std::size_t chunk = 0) {
  collie::test::run_ranks(world, body, 60s, [&](collie::InitOptions& o) {
    o.segment_bytes = segment_bytes;
    o.stage_whole_bytes = whole;
    o.stage_chunk_bytes = chunk;
  });
}

void run_cases(collie::ProcessGroup& pg, const std::vector<collie::check::CollectiveCase>& cases,
               collie::check::DeviceMemory& memory) {
  for (const auto& c : cases) {
    std::string first;
    std::size_t wrong = 0;
    try {
      wrong = collie::check::run_and_check(pg, c, first, &memory);
    } catch (const std::exception& e) {
      throw std::runtime_error(collie::check::describe(c) + ": " + e.what());
    }
    expect(wrong == 0,
           fmt::format("{}: {} wrong; first: {}", collie::check::describe(c), wrong, first));
  }
}

// The matrix's cases with their buffers on the device: both, or one of them.
std::vector<collie::check::CollectiveCase> on_device(
    const std::vector<collie::check::CollectiveCase>& cases) {
  std::vector<collie::check::CollectiveCase> out;
  std::size_t i = 0;
  for (auto c : cases) {
    // Most cases with both buffers on the device; every third with one.
    switch (i++ % 6) {
      case 2:
        c.input_on_device = true;
        break;
      case 5:
        c.output_on_device = true;
        break;
      default:
        c.input_on_device = c.output_on_device = true;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("every collective and algorithm on device buffers (CUDA stand-in), worlds 1 to 5",
          "[device]") {
  FakeDeviceScope device;
  for (int world = 1; world <= 5; ++world) {
    INFO("world " << world);
    const auto cases = on_device(collie::check::matrix(world, false));
    REQUIRE(cases.size() > 100);
    run_ranks(world, [&](collie::ProcessGroup& pg) { run_cases(pg, cases, *device); });
  }
  CHECK(device->copies() > 1000);
  // Each call on a device waited for the caller's stream first.
  CHECK(device->waits_on_caller_streams() > 100);
}

TEST_CASE("every dtype and op on device buffers (CUDA stand-in), 3 ranks", "[device][volume]") {
  FakeDeviceScope device;
  auto cases = collie::check::matrix(3, true);
  // The dtype x op part of the matrix (count 1009 spans segments).
  std::erase_if(cases, [](const auto& c) { return c.count != 1009; });
  for (auto& c : cases)
    c.input_on_device = c.output_on_device = true;
  REQUIRE(cases.size() > 150);
  // Segment by segment, then each buffer staged whole.
  for (std::size_t whole : {std::size_t{64}, std::size_t{1} << 20}) {
    INFO("staged whole up to " << whole << " bytes");
    run_ranks(
        3, [&](collie::ProcessGroup& pg) { run_cases(pg, cases, *device); }, 1024, whole);
  }
}

TEST_CASE("all_reduce, broadcast and reduce said to be on a device run in chunks, worlds 1 to 4",
          "[device]") {
  FakeDeviceScope device;
  // Chunks of 40 bytes: none (10 elements), two (11), and 101, a short one
  // last (1009); the collective's own segments are 1 KiB.
  const std::size_t chunk = 40;
  for (int world = 1; world <= 4; ++world) {
    INFO("world " << world);
    const auto before = device->copies();
    run_ranks(
        world,
        [&](collie::ProcessGroup& pg) {
          const auto me = static_cast<float>(pg.rank());
          const auto n = static_cast<float>(world);
          collie::CollectiveOptions said;
          said.memory = collie::MemoryKind::Cuda;
          for (std::size_t count : {std::size_t{10}, std::size_t{11}, std::size_t{1009}}) {
            const std::size_t bytes = count * sizeof(float);
            auto* in = static_cast<float*>(device->allocate(bytes));
            auto* out = static_cast<float*>(device->allocate(bytes));
            std::vector<float> host(count), got(count);
            auto fill = [&](float base) {
              for (std::size_t i = 0; i < count; ++i)
                host[i] = static_cast<float>(i % 13) + base;
              device->upload(in, host.data(), bytes);
            };
            auto expect_all = [&](const float* where, auto want, const std::string& what) {
              device->download(got.data(), where, bytes);
              for (std::size_t i = 0; i < count; ++i)
                expect(got[i] == want(i), fmt::format("{} count {}: element {} is {}, want {}",
                                                      what, count, i, got[i], want(i)));
            };
            const auto sum = [&](std::size_t i) {
              return n * static_cast<float>(i % 13) + n * (n - 1) / 2;
            };
            fill(me);
            pg.all_reduce(std::span(in, count), collie::ReduceOp::Sum, said);
            expect_all(in, sum, "all_reduce in place");
            fill(me);
            pg.all_reduce(std::span<const float>(in, count), std::span(out, count),
                          collie::ReduceOp::Max, said);
            expect_all(out, [&](std::size_t i) { return static_cast<float>(i % 13) + n - 1; },
                       "all_reduce max out of place");
            for (int root = 0; root < world; ++root) {
              fill(me + 100);
              pg.broadcast(std::span(in, count), root, said);
              expect_all(in, [&](std::size_t i) {
                return static_cast<float>(i % 13) + static_cast<float>(root) + 100;
              }, "broadcast");
              fill(me);
              pg.reduce(std::span<const float>(in, count), std::span(out, count), root,
                        collie::ReduceOp::Sum, said);
              if (pg.rank() == root) expect_all(out, sum, "reduce");
            }
            device->release(in);
            device->release(out);
          }
        },
        1024, 64, chunk);
    // Two copies a chunk and rank at least (the 1009-element calls alone
    // make 101 chunks each); segment by segment would make far fewer.
    INFO("copies: " << device->copies() - before);
    CHECK(device->copies() - before > 400 * static_cast<std::size_t>(world));
  }
}

TEST_CASE("staging holds a few segments of pinned memory, not a copy of the buffer", "[device]") {
  FakeDeviceScope device;
  const std::size_t count = std::size_t{1} << 16;  // 256 KiB of float32: 64 segments
  const std::size_t segment = 4096;
  run_ranks(
      3,
      [&](collie::ProcessGroup& pg) {
        for (auto algo : collie::collectives::algorithms_for(collie::Collective::AllReduce)) {
          auto* buf = static_cast<float*>(device->allocate(count * sizeof(float)));
          std::vector<float> host(count);
          for (std::size_t i = 0; i < count; ++i)
            host[i] = static_cast<float>((i % 97) + static_cast<std::size_t>(pg.rank()));
          device->upload(buf, host.data(), count * sizeof(float));
          collie::CollectiveOptions o;
          o.algorithm = algo;
          pg.all_reduce(std::span(buf, count), collie::ReduceOp::Sum, o);
          device->download(host.data(), buf, count * sizeof(float));
          for (std::size_t i = 0; i < count; ++i) {
            const auto want = static_cast<float>(3 * (i % 97) + 3);
            expect(host[i] == want,
                   fmt::format("{}: element {} is {}, expected {}",
                               collie::collectives::algorithm_name(algo), i, host[i], want));
          }
        }
      },
      segment);
  // 4 sends in flight and 8 receives (each with its target's copy): 20
  // segments at most, against 64 segments in the buffer.
  INFO("peak pinned bytes per engine: " << device->peak_pinned_per_engine());
  CHECK(device->peak_pinned_per_engine() > 0);
  CHECK(device->peak_pinned_per_engine() <= 20 * segment);
}

TEST_CASE("point-to-point on device buffers, to and from host buffers too", "[device]") {
  FakeDeviceScope device;
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    const int peer = 1 - pg.rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
      // Device to device, blocking; device to host and host to device, async.
      std::vector<std::int32_t> want(n), got(n);
      std::iota(want.begin(), want.end(), static_cast<std::int32_t>(n) * 7 + pg.rank());
      auto* mine = static_cast<std::int32_t*>(device->allocate(n * 4));
      auto* theirs = static_cast<std::int32_t*>(device->allocate(n * 4));
      device->upload(mine, want.data(), n * 4);
      if (pg.rank() == 0) {
        pg.send(std::span(mine, n), peer, 1);
        pg.recv(std::span(theirs, n), peer, 2);
      } else {
        pg.recv(std::span(theirs, n), peer, 1);
        pg.send(std::span(mine, n), peer, 2);
      }
      device->download(got.data(), theirs, n * 4);
      for (std::size_t i = 0; i < n; ++i)
        expect(got[i] == static_cast<std::int32_t>(n * 7 + i) + peer,
               fmt::format("blocking, {} elements: element {} is {}", n, i, got[i]));
      // Async: rank 0 sends from the device into rank 1's host buffer, and
      // rank 1 from the host into rank 0's device buffer.
      std::vector<std::int32_t> host_in(n);
      collie::Work s, r;
      if (pg.rank() == 0) {
        s = pg.isend(std::span(mine, n), peer, 3);
        r = pg.irecv(std::span(theirs, n), peer, 4);
      } else {
        s = pg.isend(std::span(want), peer, 4);
        r = pg.irecv(std::span(host_in), peer, 3);
      }
      s.wait();
      while (!r.is_completed())
        std::this_thread::yield();
      r.wait();
      if (pg.rank() == 0)
        device->download(got.data(), theirs, n * 4);
      else
        got = host_in;
      for (std::size_t i = 0; i < n; ++i)
        expect(got[i] == static_cast<std::int32_t>(n * 7 + i) + peer,
               fmt::format("async, {} elements: element {} is {}", n, i, got[i]));
    }
  });
}

TEST_CASE("a device error mid-collective fails every rank, naming the call and the error",
          "[device]") {
  // Staged segment by segment, and in chunks (the call said to be on a device).
  const bool chunked = GENERATE(false, true);
  INFO((chunked ? "in chunks of 4000 bytes" : "segment by segment"));
  FakeDeviceScope device;
  const std::size_t count = 20000;
  std::vector<std::string> errors(3);
  std::vector<std::string> later(3);
  run_ranks(3, [&](collie::ProcessGroup& pg) {
    auto* buf = static_cast<float*>(device->allocate(count * sizeof(float)));
    std::vector<float> host(count, 1.0f);
    device->upload(buf, host.data(), count * sizeof(float));
    // Rank 1's buffer fails half-way (its second half: after some segments moved).
    if (pg.rank() == 1)
      device->fail_copies_touching(buf + count / 2, count / 2 * sizeof(float),
                                   "cudaErrorIllegalAddress (an illegal memory access was "
                                   "encountered)");
    pg.barrier();
    collie::CollectiveOptions o;
    o.algorithm = collie::Algorithm::Ring;
    if (chunked) o.memory = collie::MemoryKind::Cuda;
    try {
      pg.all_reduce(std::span(buf, count), collie::ReduceOp::Sum, o);
    } catch (const collie::Error& e) {
      errors[static_cast<std::size_t>(pg.rank())] = e.what();
    }
    try {
      pg.all_reduce(std::span(host), collie::ReduceOp::Sum);
    } catch (const collie::Error& e) {
      later[static_cast<std::size_t>(pg.rank())] = e.what();
    }
  }, 1024, 64, chunked ? 4000 : 0);
  INFO(errors[0] << "\n" << errors[1] << "\n" << errors[2]);
  // The failing rank names the call and the CUDA error.
  CHECK_THAT(errors[1], ContainsSubstring("rank 1: all_reduce(float32, 20000, sum)") &&
                            ContainsSubstring("cudaErrorIllegalAddress"));
  // Its peers fail too, naming it, at once rather than at the timeout.
  for (int r : {0, 2}) {
    CHECK_THAT(errors[static_cast<std::size_t>(r)], ContainsSubstring(fmt::format("rank {}:", r)) &&
                                                        ContainsSubstring("rank 1 ") &&
                                                        ContainsSubstring("its device failed"));
  }
  // And the group stays broken for everyone.
  for (const auto& e : later)
    CHECK_THAT(e, ContainsSubstring("the group is unusable"));
}

TEST_CASE("pinned memory running out mid-collective fails every rank, naming it", "[device]") {
  FakeDeviceScope device;
  const std::size_t count = 20000;
  std::vector<std::string> errors(3);
  run_ranks(3, [&](collie::ProcessGroup& pg) {
    auto* buf = static_cast<float*>(device->allocate(count * sizeof(float)));
    std::vector<float> host(count, 1.0f);
    device->upload(buf, host.data(), count * sizeof(float));
    // Rank 1's third pinned block cannot be had: two segments are on their way.
    if (pg.rank() == 1) collie::test::FakeDevice::fail_pinned_on_this_thread(2);
    try {
      pg.all_reduce(std::span(buf, count));
    } catch (const collie::Error& e) {
      errors[static_cast<std::size_t>(pg.rank())] = e.what();
    }
    collie::test::FakeDevice::fail_pinned_on_this_thread(-1);
  });
  INFO(errors[0] << "\n" << errors[1] << "\n" << errors[2]);
  CHECK_THAT(errors[1], ContainsSubstring("rank 1: all_reduce(float32, 20000, sum)") &&
                            ContainsSubstring("cudaHostAlloc") &&
                            ContainsSubstring("cudaErrorMemoryAllocation"));
  for (int r : {0, 2})
    CHECK_THAT(errors[static_cast<std::size_t>(r)],
               ContainsSubstring("rank 1 ") && ContainsSubstring("its device failed"));
}

TEST_CASE("a device error in point-to-point names the rank, the peer and the size", "[device]") {
  FakeDeviceScope device;
  std::string error;
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    if (pg.rank() != 0) return;
    auto* buf = static_cast<std::int32_t*>(device->allocate(1000 * 4));
    collie::test::FakeDevice::fail_pinned_on_this_thread(0);
    try {
      pg.send(std::span(buf, 1000), 1, 5);
    } catch (const collie::Error& e) {
      error = e.what();
    }
    collie::test::FakeDevice::fail_pinned_on_this_thread(-1);
  });
  CHECK_THAT(error, StartsWith("rank 0: send to rank 1 (4000 bytes): ") &&
                        ContainsSubstring("cudaErrorMemoryAllocation"));
}

TEST_CASE("memory kinds: said, mixed, and on two devices", "[device]") {
  FakeDeviceScope device;
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> host(64, 1.0f);
    collie::CollectiveOptions cuda;
    cuda.memory = collie::MemoryKind::Cuda;
    // A host buffer said to be on a device: a clear error, before any message.
    try {
      pg.all_reduce(std::span(host), collie::ReduceOp::Sum, cuda);
      expect(false, "a host buffer passed as device memory");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("memory the CPU addresses") != std::string::npos, e.what());
    }
    // Device input and output on two devices.
    auto* d0 = static_cast<float*>(device->allocate_on(0, 64 * 4));
    auto* d1 = static_cast<float*>(device->allocate_on(1, 64 * 4));
    try {
      pg.all_reduce(std::span<const float>(d0, 64), std::span(d1, 64));
      expect(false, "buffers on two devices");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("on cuda:0 and the output on cuda:1") != std::string::npos,
             e.what());
    }
    // Said on a device, and there: works.
    device->upload(d1, host.data(), 64 * 4);
    pg.all_reduce(std::span(d1, 64), collie::ReduceOp::Sum, cuda);
    std::vector<float> out(64);
    device->download(out.data(), d1, 64 * 4);
    for (float v : out)
      expect(v == 2.0f, fmt::format("a sum is {}", v));
    // Auto finds them: a device input into a host output.
    pg.all_reduce(std::span<const float>(d1, 64), std::span(out));
    for (float v : out)
      expect(v == 4.0f, fmt::format("a sum is {}", v));
  });
}

TEST_CASE("without a GPU, CUDA says what is missing and host buffers just work", "[device]") {
  INFO(collie::cuda::status());
  if (collie::cuda::device_count() > 0) {
    WARN("skipped: this machine has a CUDA device (cuda_test.cpp covers it)");
    return;
  }
  if (collie::cuda::built_in())
    CHECK_THAT(collie::cuda::status(), ContainsSubstring("built in; not usable here"));
  else
    CHECK_THAT(collie::cuda::status(), ContainsSubstring("CUDA not built in"));
  CHECK_THROWS_WITH(collie::cuda::DeviceBuffer(16), ContainsSubstring("device memory of 16 bytes"));
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(100, 1.0f);
    pg.all_reduce(std::span(v));
    for (float x : v)
      expect(x == 2.0f, "a host all_reduce");
    collie::CollectiveOptions cuda;
    cuda.memory = collie::MemoryKind::Cuda;
    try {
      pg.all_reduce(std::span(v), collie::ReduceOp::Sum, cuda);
      expect(false, "memory=cuda without CUDA");
    } catch (const collie::Error& e) {
      const std::string what = e.what();
      expect(what.find("rank ") == 0 && what.find("all_reduce") != std::string::npos &&
                 (what.find("not usable here") != std::string::npos ||
                  what.find("not built in") != std::string::npos),
             what);
    }
  });
}

TEST_CASE("host buffers never load the CUDA driver", "[device]") {
  // A host-only program on a GPU machine must not pay for a CUDA context.
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr) {
    WARN("skipped: this process loaded the CUDA driver before the test");
    return;
  }
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(5000, 1.0f);
    pg.all_reduce(std::span(v));
    pg.all_gather(std::span<const float>(v.data(), 100), std::span(v.data() + 1000, 200));
    if (pg.rank() == 0)
      pg.send(std::span(v), 1);
    else
      pg.recv(std::span(v), 0);
    expect(v[0] == 2.0f, "a host all_reduce");
  });
  CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == nullptr);
}
