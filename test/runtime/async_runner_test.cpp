// The task queue of async collectives and of the torch backend's calls
// (runtime/include/collie/async_runner.hpp): tasks start in the order
// posted, up to its width at once, on the
// runner's threads or on a caller's that waits for the head of the queue;
// with a grace period, the runner's thread leaves a task to its caller
// until then, and still runs those nobody waits for.
#include <algorithm>
#include <atomic>
#include <condition_variable>
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

namespace {

std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Tasks that record how many ran at once, and that hold until released.
struct Overlap {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0, most = 0;
  std::vector<int> started;
  std::vector<bool> released;
  std::atomic<int> finished{0};
  explicit Overlap(int n) : released(static_cast<std::size_t>(n), false) {}
  AsyncRunner::Task task(int i) {
    return {[this, i] {
                          std::unique_lock lock(mu);
                          started.push_back(i);
                          most = std::max(most, ++running);
                          cv.notify_all();
                          cv.wait(lock, [&] { return released[static_cast<std::size_t>(i)]; });
                          --running;
                        },
                        [this] { ++finished; }};
  }
  void release(int i) {
    std::lock_guard lock(mu);
    released[static_cast<std::size_t>(i)] = true;
    cv.notify_all();
  }
  void release_all() {
    std::lock_guard lock(mu);
    std::fill(released.begin(), released.end(), true);
    cv.notify_all();
  }
  // Declared after the runner: should a check fail, the tasks still end
  // before the runner's destructor joins its threads.
  struct Releaser {
    Overlap& o;
    ~Releaser() { o.release_all(); }
  };
  // Waits (up to a minute) until `n` tasks have started.
  bool started_count(std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 60s, [&] { return started.size() >= n; });
  }
};

}  // namespace

TEST_CASE("async runner: with a width of 2, two tasks run at once, started in order, and the "
          "second may finish first",
          "[runner]") {
  Overlap o(4);
  AsyncRunner runner({}, 2);
  Overlap::Releaser releaser{o};
  for (int i = 0; i < 4; ++i)
    REQUIRE(runner.post(o.task(i)));
  // Tasks 0 and 1 are taken in order, both held; which of their threads
  // gets to record first is theirs to race.
  REQUIRE(o.started_count(2));
  {
    std::lock_guard lock(o.mu);
    CHECK(sorted(o.started) == std::vector<int>{0, 1});
    CHECK(o.running == 2);
  }
  o.release(1);  // the second ends while the first still runs
  REQUIRE(collie::test::eventually([&] { return o.finished.load() == 1; }, 60s));
  REQUIRE(o.started_count(3));  // its place goes to task 2, not to 3
  {
    std::lock_guard lock(o.mu);
    CHECK(sorted(o.started) == std::vector<int>{0, 1, 2});
  }
  for (int i : {0, 2, 3})
    o.release(i);
  REQUIRE(collie::test::eventually([&] { return o.finished.load() == 4; }, 60s));
  std::lock_guard lock(o.mu);
  CHECK(o.started.back() == 3);
  CHECK(o.most == 2);
}

TEST_CASE("async runner: with a width of 2, a caller runs its task itself in the free place "
          "while another runs, but not one out of turn",
          "[runner]") {
  Overlap o(3);
  AsyncRunner runner(std::chrono::microseconds(std::chrono::seconds(600)), 2);
  Overlap::Releaser releaser{o};
  std::vector<AsyncRunner::Ticket> tickets(3);
  for (int i = 0; i < 3; ++i)
    REQUIRE(runner.post(o.task(i), &tickets[static_cast<std::size_t>(i)]));
  // Task 0 held on a thread of this test's; then this thread may take task
  // 1 (the head, a place free), never task 2 before it.
  std::thread first([&] { runner.run_if_next(tickets[0]); });
  REQUIRE(o.started_count(1));
  runner.run_if_next(tickets[2]);  // not the head: nothing runs
  {
    std::lock_guard lock(o.mu);
    CHECK(o.started == std::vector<int>{0});
  }
  std::thread second([&] { runner.run_if_next(tickets[1]); });
  REQUIRE(o.started_count(2));
  runner.run_if_next(tickets[2]);  // the head now, but both places taken
  {
    std::lock_guard lock(o.mu);
    CHECK(o.started == std::vector<int>{0, 1});
    CHECK(o.running == 2);
  }
  o.release(1);
  second.join();
  o.release(2);
  runner.run_if_next(tickets[2]);  // a place is free: it runs here
  CHECK(o.finished.load() == 2);
  {
    std::lock_guard lock(o.mu);
    CHECK(o.started == std::vector<int>{0, 1, 2});
    CHECK(o.running == 1);  // task 0 still
  }
  o.release(0);
  first.join();
  CHECK(o.finished.load() == 3);
}

TEST_CASE("async runner: with a width of 1, a long task holds the ones behind it", "[runner]") {
  Overlap o(2);
  Overlap mine(1);
  AsyncRunner runner({}, 1);
  Overlap::Releaser releaser{o}, mine_releaser{mine};
  REQUIRE(runner.post(o.task(0)));
  REQUIRE(runner.post(o.task(1)));
  REQUIRE(o.started_count(1));
  AsyncRunner::Ticket ticket = 0;
  REQUIRE(runner.post(mine.task(0), &ticket));
  runner.run_if_next(ticket);  // no place free: returns at once
  o.release(0);
  REQUIRE(o.started_count(2));
  {
    std::lock_guard lock(o.mu);
    CHECK(o.running == 1);
  }
  o.release(1);
  mine.release(0);
  REQUIRE(collie::test::eventually([&] { return mine.finished.load() == 1; }, 60s));
  CHECK(o.most == 1);
}
