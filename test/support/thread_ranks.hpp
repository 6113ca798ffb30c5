// Ranks as threads of the test process, meeting through a file:// store.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
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
// timeout; `adjust` may change the other InitOptions. The first error of any
// rank is rethrown here, after every rank has finished.
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
  for (auto& f : ranks) f.get();
}

}  // namespace collie::test
