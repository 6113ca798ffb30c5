// The stall responder on a store collie does not serve (stall_polling.hpp).
#include <atomic>
#include <sstream>
#include <thread>

#include <collie/error.hpp>
#include <collie/keys.hpp>
#include <collie/log.hpp>
#include <collie/store/store.hpp>

#include "watch/stall_polling.hpp"

namespace collie {

namespace {

// How long one wait for a query lasts: how long the group's end may wait
// for the responder, and how often it asks etcd when nothing happens.
constexpr auto kSlice = std::chrono::milliseconds(500);

}  // namespace

StallPolling::StallPolling(std::shared_ptr<store::Store> store, int rank, ProgressLookup lookup)
    : store_(std::move(store)), rank_(rank), lookup_(std::move(lookup)) {
  thread_ = std::thread([this] { run(); });
}

StallPolling::~StallPolling() {
  stop_ = true;
  thread_.join();
}

void StallPolling::run() {
  for (std::uint64_t next = 1; !stop_;) {
    const auto query = keys::stall_query(static_cast<std::int64_t>(next));
    try {
      try {
        store_->wait(std::vector<std::string>{query}, kSlice);
      } catch (const TimeoutError&) {
        continue;
      }
      const auto text = store_->get(query, std::chrono::seconds(5));
      std::uint32_t slot = 0;
      std::uint64_t sequence = 0;
      std::istringstream in(text);
      std::optional<std::string> answer;
      if (in >> slot >> sequence) answer = lookup_(slot, sequence);
      if (answer) {
        store_->set(keys::stall_answer(static_cast<std::int64_t>(next), rank_), *answer,
                    std::chrono::seconds(5));
      }
      ++next;
    } catch (const std::exception& e) {
      collie::log().debug("rank {}: the stall responder stops ({})", rank_, e.what());
      return;
    }
  }
}

}  // namespace collie
