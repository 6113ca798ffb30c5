// One rank of the master-worker tests run under `collie launch`
// (master_worker_launch_test.cpp), and the rate benchmark. Modes:
//
//   kill        4+ ranks: worker 2 is SIGKILLed with work queued on every
//               worker; prints each future's fate and how long it took
//   master-dies the master SIGKILLs itself with work queued on the workers
//   master-term the same with SIGTERM
//   stop        worker 1 is SIGSTOPped with work queued: a wait that times
//               out says so (run with a short COLLIE_STALL_TIME); SIGCONT
//               and the work finishes
//   chain MiB   a copy 1 -> 2 -> 3 -> 1 of MiB; prints the bytes the master's
//               process read and wrote meanwhile (over TCP, its sockets')
//   flood N     N operations queued without waiting; prints the master's
//               resident memory before and after
//   rate N KiB  N elementwise sums of two KiB-sized float32 buffers on worker
//               1, against the same sums run here in one process
//   rate-queued-first N KiB   the same sums, all queued while the worker
//               sleeps: the worker's own rate, the master idle meanwhile
//   latency N   N operations, each waited for: a command's round trip
// MW_WINDOW sets Options::window (operations in flight per worker).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <collie/collie.hpp>
#include <collie/master_worker.hpp>

namespace mw = collie::mw;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// "ok" or "failed: <its error>"
template <class E>
std::string fate(const E& e) {
  try {
    e.wait(30s);
    return "ok";
  } catch (const collie::Error& err) {
    return std::string("failed: ") + err.what();
  }
}

void kill_worker(mw::Master& m) {
  const int n = m.world_size();
  const auto pid = static_cast<pid_t>(m.call(2, "pid", {}, {}).get());
  std::vector<mw::Buffer> a;
  for (int w = 1; w < n; ++w) {
    a.push_back(m.alloc<float>(w, 1 << 16));
    m.fill(a.back(), w);
  }
  // Worker 2 is busy for a while; more is queued behind, on it and on the
  // others, and a copy from worker 1 to worker 2 depends on both.
  const auto started = std::filesystem::temp_directory_path() /
                       ("collie-mw-spin-" + std::to_string(getpid()));
  std::filesystem::remove(started);
  auto busy = m.call(2, "spin", {}, {}, {2000}, started.string());
  auto behind = m.scale(a[1], 2);
  auto copy_in = m.copy(a[1], a[0]);
  auto on_1 = m.scale(a[0], 3);
  auto on_3 = m.scale(a[2], 3);
  // The spin has started (a bounded wait for that event, not a guess).
  for (const auto give_up = Clock::now() + 60s;
       !std::filesystem::exists(started) && Clock::now() < give_up;)
    std::this_thread::sleep_for(1ms);
  std::filesystem::remove(started);
  const auto killed = Clock::now();
  kill(pid, SIGKILL);
  for (auto* e : {static_cast<mw::Event*>(&busy), &behind, &copy_in}) {
    const std::string f = fate(*e);
    std::printf("depends on worker 2: %s after %.0f ms: %s\n", e->what().c_str(), ms_since(killed),
                f.c_str());
  }
  std::printf("worker 1: %s\n", fate(on_1).c_str());
  std::printf("worker 3: %s\n", fate(on_3).c_str());
  // Calls on worker 2's buffers throw at once; collectives need every worker.
  try {
    m.fill(a[1], 0);
    std::printf("a dead worker's buffer: no error\n");
  } catch (const collie::ConnectionError& e) {
    std::printf("a dead worker's buffer: ConnectionError: %s\n", e.what());
  }
  try {
    m.alloc<float>(2, 4);
    std::printf("alloc on a dead worker: no error\n");
  } catch (const collie::ConnectionError& e) {
    std::printf("alloc on a dead worker: ConnectionError: %s\n", e.what());
  }
  try {
    m.all_reduce(a);
    std::printf("all_reduce with a dead worker: no error\n");
  } catch (const collie::ConnectionError& e) {
    std::printf("all_reduce with a dead worker: ConnectionError: %s\n", e.what());
  }
  // The master goes on with the others: worker 1's data, copied to 3.
  auto b3 = m.alloc<float>(3, 1 << 16);
  m.copy(b3, a[0]);
  const auto v = m.read<float>(b3).get();
  bool right = true;
  for (float x : v) right = right && x == 3.0f;
  std::printf("after: worker 1 -> worker 3 %s\n", right ? "right" : "WRONG");
}

void master_dies(mw::Master& m, int signal_number) {
  for (int w = 1; w < m.world_size(); ++w) m.call(w, "spin", {}, {}, {100});
  std::printf("master: dying\n");
  std::fflush(stdout);
  raise(signal_number);
}

void stop_worker(mw::Master& m) {
  const auto pid = static_cast<pid_t>(m.call(1, "pid", {}, {}).get());
  kill(pid, SIGSTOP);
  auto b = m.alloc<float>(1, 16);
  auto f = m.fill(b, 2);
  try {
    f.wait(4s);
    std::printf("stopped: no timeout\n");
  } catch (const collie::TimeoutError& e) {
    std::printf("stopped: TimeoutError: %s\n", e.what());
  }
  kill(pid, SIGCONT);
  f.wait(30s);
  std::printf("continued: %s\n", m.reduce(b).get() == 32.0 ? "right" : "WRONG");
}

// rchar + wchar of this process: every byte its sockets moved (and its files).
long io_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long value = 0, total = 0;
  while (io >> key >> value)
    if (key == "rchar:" || key == "wchar:") total += value;
  return total;
}

void chain(mw::Master& m, long mib) {
  const std::size_t count = static_cast<std::size_t>(mib) << 18;
  std::vector<mw::Buffer> b;
  for (int w : {1, 2, 3, 1}) b.push_back(m.alloc<float>(w, count));
  m.fill(b[0], 7).wait();
  const long before = io_bytes();
  for (std::size_t i = 1; i < b.size(); ++i) m.copy(b[i], b[i - 1]);
  const double last = m.reduce(b.back(), collie::ReduceOp::Min).get();
  const long moved = io_bytes() - before;
  std::printf("chain: %ld MiB 1 -> 2 -> 3 -> 1 %s; the master's process moved %ld bytes\n", mib,
              last == 7.0 ? "right" : "WRONG", moved);
}

void flood(mw::Master& m, long n) {
  auto b = m.alloc<float>(1, 1);
  m.fill(b, 0).wait();
  const long before = rss_kib();
  const auto t = Clock::now();
  for (long i = 0; i < n; ++i) m.scale(b, 1);
  m.synchronize();
  std::printf("flood: %ld operations in %.0f ms; master rss %ld KiB before, %ld KiB after\n", n,
              ms_since(t), before, rss_kib());
}

void rate(mw::Master& m, long n, long kib) {
  const std::size_t count = static_cast<std::size_t>(kib) << 8;
  // Here, in one process.
  std::vector<float> x(count, 1.0f), y(count, 2.0f);
  auto t = Clock::now();
  for (long i = 0; i < n; ++i) collie::reduce(collie::DataType::Float32, collie::ReduceOp::Sum, x.data(), y.data(), count);
  const double local = ms_since(t);
  // On worker 1, queued.
  auto bx = m.alloc<float>(1, count), by = m.alloc<float>(1, count);
  m.fill(bx, 1);
  m.fill(by, 2).wait();
  t = Clock::now();
  for (long i = 0; i < n; ++i) m.combine(bx, by);
  m.synchronize();
  const double queued = ms_since(t);
  std::printf("rate: %ld sums of %ld KiB: local %.1f us each, queued on a worker %.1f us each: "
              "%.2fx the local rate\n",
              n, kib, local * 1000 / n, queued * 1000 / n, local / queued);
}

// The worker alone: every sum queued while it sleeps 500 ms, then timed
// to the end (the master idle meanwhile, but for the completions).
void rate_queued_first(mw::Master& m, long n, long kib) {
  const std::size_t count = static_cast<std::size_t>(kib) << 8;
  auto bx = m.alloc<float>(1, count), by = m.alloc<float>(1, count);
  m.fill(bx, 1);
  m.fill(by, 2).wait();
  const auto t = Clock::now();
  m.call(1, "spin", {}, {}, {500});
  for (long i = 0; i < n; ++i) m.combine(bx, by);
  m.synchronize();
  std::printf("rate, queued first: %ld sums of %ld KiB: %.1f us each on the worker\n", n, kib,
              (ms_since(t) - 500) * 1000 / n);
}

// One operation at a time, each waited for: the round trip of a command.
void latency(mw::Master& m, long n) {
  auto b = m.alloc<float>(1, 1);
  m.fill(b, 0).wait();
  const auto t = Clock::now();
  for (long i = 0; i < n; ++i) m.fill(b, 1).wait();
  std::printf("latency: %ld operations waited for one by one: %.1f us each\n", n,
              ms_since(t) * 1000 / n);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const long arg = argc > 2 ? std::stol(argv[2]) : 0;
  const long arg2 = argc > 3 ? std::stol(argv[3]) : 1;
  mw::Kernels k;
  k.add("pid", [](mw::KernelArgs&) { return static_cast<double>(getpid()); });
  // Busy for scalar 0 ms; with a text, first creates the file it names, so
  // that the master knows the call has started.
  k.add("spin", [](mw::KernelArgs& a) {
    if (!a.text().empty()) std::fclose(std::fopen(a.text().c_str(), "w"));
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(a.scalar(0))));
    return 0.0;
  });
  try {
    collie::ProcessGroup world = collie::init();
    mw::Options options;
    if (const char* w = std::getenv("MW_WINDOW")) options.window = std::stoul(w);
    return mw::run(world, k, [&](mw::Master& m) {
      if (mode == "kill") kill_worker(m);
      else if (mode == "master-dies") master_dies(m, SIGKILL);
      else if (mode == "master-term") master_dies(m, SIGTERM);
      else if (mode == "stop") stop_worker(m);
      else if (mode == "chain") chain(m, arg);
      else if (mode == "flood") flood(m, arg);
      else if (mode == "rate") rate(m, arg, arg2);
      else if (mode == "rate-queued-first") rate_queued_first(m, arg, arg2);
      else if (mode == "latency") latency(m, arg);
      else throw collie::ArgumentError("unknown mode '" + mode + "'");
      std::fflush(stdout);
    }, options);
  } catch (const collie::Error& e) {
    std::fprintf(stderr, "rank error: %s\n", e.what());
    return 1;
  }
}
