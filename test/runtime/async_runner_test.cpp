// The task queue of async collectives and of the torch backend's calls
// (runtime/include/collie/async_runner.hpp): tasks run one at a time in the order
// posted, on the runner's thread or on a caller's that waits for the head
// of the queue; with a grace period, the runner's thread leaves a task to
// its caller until then, and still runs those nobody waits for.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "support/catch.hpp"

#include <collie/async_runner.hpp>
#include "support/eventually.hpp"

using namespace std::chrono_literals;
using collie::AsyncRunner;

namespace {

struct Log {
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::atomic<int> finished{0};
  AsyncRunner::Task task(int i) {
    return {[this, i] {
              std::lock_guard lock(mu);
              order.push_back(i);
              threads.push_back(std::this_thread::get_id());
            },
            [this] { ++finished; }};
  }
};

}  // namespace

TEST_CASE("async runner: tasks nobody waits for run on its thread, in order", "[runner]") {
  for (auto grace : {0us, 20000us}) {
    INFO("grace " << grace.count() << " us");
    Log log;
    AsyncRunner runner(grace);
    for (int i = 0; i < 50; ++i)
      REQUIRE(runner.post(log.task(i)));
    REQUIRE(collie::test::eventually([&] { return log.finished.load() == 50; }, 60s));
    std::lock_guard lock(log.mu);
    for (int i = 0; i < 50; ++i) {
      CHECK(log.order[static_cast<std::size_t>(i)] == i);
      CHECK(log.threads[static_cast<std::size_t>(i)] != std::this_thread::get_id());
    }
  }
}

TEST_CASE("async runner: with a grace period, a caller that waits at once runs its task itself",
          "[runner]") {
  // A grace far longer than the test: the runner's thread never takes the
  // head first, so every call runs in the caller's thread, in order.
  Log log;
  AsyncRunner runner(std::chrono::microseconds(std::chrono::seconds(600)));
  for (int i = 0; i < 100; ++i) {
    AsyncRunner::Ticket ticket = 0;
    REQUIRE(runner.post(log.task(i), &ticket));
    runner.run_if_next(ticket);
    CHECK(log.finished.load() == i + 1);
  }
  std::lock_guard lock(log.mu);
  for (int i = 0; i < 100; ++i) {
    CHECK(log.order[static_cast<std::size_t>(i)] == i);
    CHECK(log.threads[static_cast<std::size_t>(i)] == std::this_thread::get_id());
  }
}

TEST_CASE("async runner: a task behind another is not run by its caller out of turn, and stop "
          "runs what is queued",
          "[runner]") {
  Log log;
  std::vector<AsyncRunner::Ticket> tickets(3);
  {
    AsyncRunner runner(std::chrono::microseconds(std::chrono::seconds(600)));
    for (int i = 0; i < 3; ++i)
      REQUIRE(runner.post(log.task(i), &tickets[static_cast<std::size_t>(i)]));
    runner.run_if_next(tickets[2]);  // not the head: nothing runs
    CHECK(log.finished.load() == 0);
    runner.run_if_next(tickets[0]);
    CHECK(log.finished.load() == 1);
    runner.stop();
    CHECK_FALSE(runner.post(log.task(3)));
  }  // the destructor joins once the queue is done
  CHECK(log.finished.load() == 3);
  std::lock_guard lock(log.mu);
  CHECK(log.order == std::vector<int>{0, 1, 2});
}

TEST_CASE("async runner: after its callers ran every task, the runner still runs one nobody "
          "waits for, and tasks posted behind it",
          "[runner]") {
  // Its looks back off while callers run their own tasks (up to 5 ms
  // apart); a task left alone must still run on its thread, and a task
  // posted behind it wakes the thread.
  Log log;
  AsyncRunner runner(1000us);
  for (int i = 0; i < 200; ++i) {
    AsyncRunner::Ticket ticket = 0;
    REQUIRE(runner.post(log.task(i), &ticket));
    runner.run_if_next(ticket);
    // Most often run right here; on a busy machine its grace period may be
    // over first, and the runner's thread has it.
    REQUIRE(collie::test::eventually([&] { return log.finished.load() == i + 1; }, 60s));
  }
  for (int i = 200; i < 203; ++i) REQUIRE(runner.post(log.task(i)));
  REQUIRE(collie::test::eventually([&] { return log.finished.load() == 203; }, 60s));
  std::lock_guard lock(log.mu);
  for (int i = 0; i < 203; ++i) {
    CHECK(log.order[static_cast<std::size_t>(i)] == i);
    if (i >= 200) CHECK(log.threads[static_cast<std::size_t>(i)] != std::this_thread::get_id());
  }
}
