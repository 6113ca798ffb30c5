// Ranks as threads of the test process, meeting through a file:// store.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <collie/process_group.hpp>

#include "support/scratch_dir.hpp"

namespace collie::test {

// A check inside a rank's thread (Catch's assertions belong to the main
// thread): throws, and run_ranks() rethrows it there.
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Runs body(pg) for every rank of a world of `world`, each on its own
// thread, joined through a file:// store in a fresh directory with the given
// timeout; `adjust` may change the other InitOptions. After every rank has
// finished, a rank's error is rethrown here (several: all their messages).
inline void run_ranks(int world, const std::function<void(ProcessGroup&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      const std::function<void(InitOptions&)>& adjust = {}) {
  ScratchDir dir;
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      InitOptions o;
      o.init_method = "file://" + (dir.path() / "store").string();
      o.rank = r;
      o.world_size = world;
      o.timeout = timeout;
      if (adjust) adjust(o);
      auto pg = init(o);
      body(pg);
    }));
  }
  // One rank failed: its exception as it is. Several: every rank's message
  // (the first to fail is often not rank 0, whose error may only say that
  // a peer went away).
  std::vector<std::pair<int, std::exception_ptr>> failed;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    try {
      ranks[r].get();
    } catch (...) {
      failed.emplace_back(static_cast<int>(r), std::current_exception());
    }
  }
  if (failed.size() == 1) std::rethrow_exception(failed.front().second);
  if (failed.empty()) return;
  std::string all;
  for (const auto& [rank, error] : failed) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      all += "\nrank " + std::to_string(rank) + ": " + e.what();
    } catch (...) {
      all += "\nrank " + std::to_string(rank) + ": (not a std::exception)";
    }
  }
  throw std::runtime_error(std::to_string(failed.size()) + " ranks failed:" + all);
}

}  // namespace collie::test
