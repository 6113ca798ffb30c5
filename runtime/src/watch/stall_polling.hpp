// The stall responder on a store collie does not serve (etcd): a thread
// that waits in the job's own view for the next query, a slice at a time so
// that the group's end stops it within one (500 ms), and answers it. The
// queries and answers are stall.hpp's, in the same keys.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "watch/stall.hpp"

namespace collie {

class StallPolling {
 public:
  StallPolling(std::shared_ptr<store::Store> store, int rank, ProgressLookup lookup);
  ~StallPolling();
  StallPolling(const StallPolling&) = delete;
  StallPolling& operator=(const StallPolling&) = delete;

 private:
  void run();

  std::shared_ptr<store::Store> store_;
  int rank_;
  ProgressLookup lookup_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace collie
