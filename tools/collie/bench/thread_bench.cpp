// collie_thread_bench: collectives with the ranks as threads of one process
// (one CUDA context for all of them), on host buffers and, with --device
// cuda, on device buffers beside them. `collie bench` runs every rank as a
// process; on a machine with one GPU those processes share it, and the GPU
// switching between their contexts dominates small device calls. Here it
// does not, as with one GPU per rank.
//
//   collie_thread_bench [--ranks N] [--device host|cuda] [--iters N]
//
// Prints one line per collective and size: the mean time of --iters calls
// (20 times as many below 1 MiB) after 3 warm-up calls and a barrier, the
// maximum across ranks, on host buffers and (--device cuda) device buffers.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <collie/error.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>

namespace {

struct Args {
  int ranks = 2;
  bool cuda = false;
  int iters = 20;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw collie::ArgumentError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--ranks")
      a.ranks = std::stoi(value());
    else if (arg == "--iters")
      a.iters = std::stoi(value());
    else if (arg == "--device") {
      const auto d = value();
      if (d != "host" && d != "cuda") throw collie::ArgumentError("--device: host or cuda");
      a.cuda = d == "cuda";
    } else if (arg == "-h" || arg == "--help") {
      std::puts("collie_thread_bench [--ranks N] [--device host|cuda] [--iters N]");
      std::exit(0);
    } else {
      throw collie::ArgumentError("unknown argument " + arg);
    }
  }
  if (a.ranks < 1 || a.iters < 1) throw collie::ArgumentError("--ranks and --iters: at least 1");
  return a;
}

template <class Call>
double mean_us(collie::ProcessGroup& pg, int iters, Call call) {
  for (int i = 0; i < 3; ++i)
    call();
  pg.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    call();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() /
         iters;
}

void rank_main(const Args& a, const std::string& store, int rank) {
  collie::InitOptions o;
  o.init_method = "file://" + store;
  o.rank = rank;
  o.world_size = a.ranks;
  auto pg = collie::init(o);
  if (rank == 0) {
    std::printf("# collie_thread_bench: %d ranks as threads of one process; %s\n", a.ranks,
                a.cuda ? collie::cuda::status().c_str() : "host buffers");
    std::printf("# %-10s %10s %12s %12s\n", "collective", "bytes", "host (us)",
                a.cuda ? "cuda (us)" : "");
  }
  for (const char* what : {"all_reduce", "broadcast"}) {
    for (std::size_t bytes :
         {std::size_t{8}, std::size_t{4} << 10, std::size_t{256} << 10, std::size_t{1} << 20,
          std::size_t{4} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
      const std::size_t n = std::max<std::size_t>(bytes / 4, 1);
      std::vector<float> host(n, 1.0f);
      collie::cuda::DeviceBuffer device;
      if (a.cuda) {
        device = collie::cuda::DeviceBuffer(n * 4);
        device.upload(host.data(), n * 4);
      }
      double times[2] = {0, 0};
      for (int on_device = 0; on_device <= (a.cuda ? 1 : 0); ++on_device) {
        const std::span<float> buf =
            on_device ? std::span(static_cast<float*>(device.data()), n) : std::span(host);
        const bool reduce = std::string(what) == "all_reduce";
        // (Sums grow over the calls; only the time matters here.)
        times[on_device] =
            mean_us(pg, bytes >= (std::size_t{1} << 20) ? a.iters : a.iters * 20, [&] {
              if (reduce)
                pg.all_reduce(buf, collie::ReduceOp::Max);
              else
                pg.broadcast(buf, 0);
            });
      }
      // The slowest rank's time (a broadcast's root finishes first).
      pg.all_reduce(std::span(times), collie::ReduceOp::Max);
      if (rank == 0) {
        std::printf("  %-10s %10zu %12.1f", what, n * 4, times[0]);
        if (a.cuda) std::printf(" %12.1f", times[1]);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.cuda && collie::cuda::device_count() == 0)
      throw collie::Error("--device cuda: " + collie::cuda::status());
    const auto dir = std::filesystem::temp_directory_path() /
                     ("collie_thread_bench." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::vector<std::thread> ranks;
    std::vector<std::string> errors(static_cast<std::size_t>(a.ranks));
    for (int r = 0; r < a.ranks; ++r) {
      ranks.emplace_back([&, r] {
        try {
          rank_main(a, (dir / "store").string(), r);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : ranks)
      t.join();
    std::filesystem::remove_all(dir);
    for (const auto& e : errors) {
      if (e.empty()) continue;
      std::fprintf(stderr, "collie_thread_bench: %s\n", e.c_str());  // the first error
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie_thread_bench: %s\n", e.what());
    return 2;
  }
}
