// Waiting for an event in a test: polls a condition until it holds or a
// deadline passes (never a fixed sleep standing for the event).
#pragma once

#include <chrono>
#include <thread>

namespace collie::test {

// True once `done()` holds; false if it still does not after `limit`.
template <class F>
bool eventually(F done, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace collie::test
