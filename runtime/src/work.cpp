// Each kind of operation's Work (work.hpp), and the Work of an async task.
#include "work.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

namespace collie {

// ---- Work ----

Work::~Work() {
  if (!state_ || state_->test()) return;
  try {
    state_->wait(std::nullopt);
  } catch (const std::exception& e) {
    collie::log().error("a Work destroyed while pending failed: {}", e.what());
  }
}

Work::Work(std::unique_ptr<detail::WorkState> state) : state_(std::move(state)) {}

Work::Work() = default;

Work::Work(Work&&) noexcept = default;

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    Work old(std::move(*this));  // waits for what this one held
    state_ = std::move(other.state_);
  }
  return *this;
}

void Work::wait() {
  if (!state_) return;
  state_->wait(std::nullopt);
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!state_) return;
  state_->wait(timeout);
}

bool Work::is_completed() const {
  return !state_ || state_->test();
}

int Work::source() const {
  return state_ ? state_->source() : -1;
}

// ---- point to point ----

namespace {

class PointToPoint final : public detail::WorkState {
 public:
  PointToPoint(std::shared_ptr<transport::Transport> transport, transport::RequestPtr request)
      : transport_(std::move(transport)), request_(std::move(request)) {}
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    transport_->wait(request_, timeout);
  }
  bool test() const override { return transport_->test(request_); }

 private:
  std::shared_ptr<transport::Transport> transport_;
  transport::RequestPtr request_;
};

// A receive from any member: it takes the first message with its tag that
// some member's send left waiting in the transport, and until there is one
// it has the transport move what is on its way (polling at once at first,
// then a millisecond at a time).
class AnySource final : public detail::WorkState {
 public:
  AnySource(std::shared_ptr<transport::Transport> transport, std::vector<int> members,
            std::uint64_t tag, void* data, std::size_t bytes, std::chrono::milliseconds timeout,
            std::string what)
      : transport_(std::move(transport)),
        members_(std::move(members)),
        tag_(tag),
        data_(data),
        bytes_(bytes),
        timeout_(timeout),
        what_(std::move(what)) {}

  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    std::unique_lock lock(mu_);
    const auto limit = timeout.value_or(timeout_);
    const auto until = std::chrono::steady_clock::now() + limit;
    for (int polls = 0; !request_; ++polls) {
      claim();
      if (request_) break;
      const auto now = std::chrono::steady_clock::now();
      // Withdrawn (as a named receive that had not started) or failed: done
      // for good, and every later wait throws the same.
      if (!error_ && now >= until) {
        error_ = std::make_exception_ptr(
            TimeoutError(fmt::format("{}: no member sent a message with that tag within {:.3g} s",
                                     what_, std::chrono::duration<double>(limit).count())));
      }
      // Every other member failed, nothing of theirs waits: nobody is left
      // to send (a peer that closed after sending reads as failed too).
      // (What a peer sent before it failed was queued before it was marked
      // failed: one more look at the queue after seeing them all failed.)
      if (!error_ && polls % 64 == 63) {
        if (auto why = everyone_failed(); !why.empty()) {
          claim();
          if (request_) break;
          error_ = std::make_exception_ptr(ConnectionError(
              fmt::format("{}: every other rank has failed or left, and none sent a message with "
                          "that tag; {}",
                          what_, why)));
        }
      }
      if (error_) std::rethrow_exception(error_);
      // (Without the lock: test() and source() from other threads go on.)
      lock.unlock();
      transport_->wait_any({}, polls < 64 ? std::chrono::milliseconds(0)
                                          : std::min(std::chrono::milliseconds(1),
                                                     std::chrono::duration_cast<std::chrono::milliseconds>(until - now)));
      lock.lock();
    }
    const auto request = request_;
    lock.unlock();
    transport_->wait(request, std::max(std::chrono::milliseconds(1),
                                       std::chrono::duration_cast<std::chrono::milliseconds>(
                                           until - std::chrono::steady_clock::now())));
  }

  bool test() const override {
    std::lock_guard lock(mu_);
    if (error_) return true;
    if (!request_) claim();
    return request_ && transport_->test(request_);
  }

  int source() const override {
    std::lock_guard lock(mu_);
    return request_ && transport_->test(request_) ? source_ : -1;
  }

 private:
  // The failures of every member but this rank, or empty if one is alive.
  std::string everyone_failed() const {
    std::string why;
    const int self = transport_->rank();
    for (int peer : members_) {
      if (peer == self) continue;
      const auto failure = transport_->failure_of(peer);
      if (failure.empty()) return {};
      if (why.empty()) why = failure;
    }
    return why;
  }

  // Posts the receive for the first member with a message waiting (mu_ held).
  void claim() const {
    for (const auto& [peer, fingerprint] : transport_->queued_fingerprints(tag_)) {
      const auto it = std::find(members_.begin(), members_.end(), peer);
      if (it == members_.end()) continue;
      request_ = transport_->irecv(peer, tag_, data_, bytes_);
      source_ = static_cast<int>(it - members_.begin());
      return;
    }
  }

  std::shared_ptr<transport::Transport> transport_;
  std::vector<int> members_;
  std::uint64_t tag_;
  void* data_;
  std::size_t bytes_;
  std::chrono::milliseconds timeout_;
  std::string what_;
  mutable std::mutex mu_;
  mutable transport::RequestPtr request_;
  mutable int source_ = -1;
  std::exception_ptr error_;  // how a wait gave up before a message came
};

// A point-to-point message from or to device memory, staged whole through
// one pinned block: a send's was filled before it was posted; a receive's
// is copied to the device once the message is in.
// A DeviceError led by the call: "rank 0: send to rank 1 (4096 bytes): ...".
device::DeviceError named(const device::CallName& call, std::size_t bytes,
                          const std::exception& e) {
  return device::DeviceError(fmt::format("{} ({} bytes): {}", call.text(), bytes, e.what()));
}

class StagedPointToPoint final : public detail::WorkState {
 public:
  StagedPointToPoint(std::shared_ptr<transport::Transport> transport, transport::RequestPtr request,
                     std::shared_ptr<device::Engine> engine, std::byte* block, void* target,
                     std::size_t bytes, device::CallName call)
      : transport_(std::move(transport)),
        request_(std::move(request)),
        engine_(std::move(engine)),
        block_(block),
        target_(target),
        bytes_(bytes),
        call_(call) {}
  ~StagedPointToPoint() override {
    // (A Work waits for a pending request before its state goes.)
    if (!transport_->test(request_)) {
      try {
        transport_->wait(request_, std::chrono::milliseconds(0));
      } catch (const std::exception&) {
      }
    }
    engine_->drain();
    engine_->give_pinned(block_);
  }
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    transport_->wait(request_, timeout);
    finish();
  }
  bool test() const override {
    if (!transport_->test(request_)) return false;
    try {
      transport_->wait(request_, std::chrono::milliseconds(0));  // done: throws its error, if any
      finish();
    } catch (const std::exception&) {
      // wait() reports it
    }
    return true;
  }

 private:
  void finish() const {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    if (finished_) return;
    finished_ = true;
    if (target_ == nullptr) return;
    try {
      engine_->wait(engine_->to_device(target_, block_, bytes_));
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(named(call_, bytes_, e));
      std::rethrow_exception(error_);
    }
  }

  std::shared_ptr<transport::Transport> transport_;
  transport::RequestPtr request_;
  std::shared_ptr<device::Engine> engine_;
  std::byte* block_;
  void* target_;  // a receive's device buffer; null for a send
  std::size_t bytes_;
  device::CallName call_;  // for errors
  mutable std::mutex mu_;
  mutable bool finished_ = false;
  mutable std::exception_ptr error_;
};

// ---- async collectives ----

struct AsyncState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::string what;
  std::chrono::milliseconds timeout{0};
};

class AsyncTask final : public detail::WorkState {
 public:
  explicit AsyncTask(std::shared_ptr<AsyncState> s) : s_(std::move(s)) {}
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    std::unique_lock lock(s_->mu);
    const auto limit = timeout.value_or(s_->timeout + std::chrono::seconds(5));
    if (!s_->cv.wait_for(lock, limit, [&] { return s_->done; })) {
      throw TimeoutError(fmt::format("{} is still running after {} ms", s_->what, limit.count()));
    }
    if (s_->error) std::rethrow_exception(s_->error);
  }
  bool test() const override {
    std::lock_guard lock(s_->mu);
    return s_->done;
  }

 private:
  std::shared_ptr<AsyncState> s_;
};

}  // namespace

Work any_source_work(std::shared_ptr<transport::Transport> transport, std::vector<int> members,
                     std::uint64_t tag, void* data, std::size_t bytes,
                     std::chrono::milliseconds timeout, std::string what) {
  return detail::Access::work(std::make_unique<AnySource>(std::move(transport), std::move(members), tag, data,
                                          bytes, timeout, std::move(what)));
}

Work point_to_point_work(std::shared_ptr<transport::Transport> transport,
                         transport::RequestPtr request) {
  return detail::Access::work(std::make_unique<PointToPoint>(std::move(transport), std::move(request)));
}

Work staged_send(std::shared_ptr<transport::Transport> transport, int peer, std::uint64_t tag,
                 const void* data, std::size_t bytes, std::shared_ptr<device::Engine> engine,
                 const device::CallName& call) {
  std::byte* block = nullptr;
  transport::RequestPtr request;
  try {
    block = engine->take_pinned(bytes);
    engine->wait(engine->to_host(block, data, bytes));
    request = transport->isend(peer, tag, block, bytes);
  } catch (const device::DeviceError& e) {
    engine->drain();
    if (block != nullptr) engine->give_pinned(block);
    throw named(call, bytes, e);
  } catch (...) {
    engine->drain();
    if (block != nullptr) engine->give_pinned(block);
    throw;
  }
  return detail::Access::work(std::make_unique<StagedPointToPoint>(std::move(transport), std::move(request),
                                                   std::move(engine), block, nullptr, bytes, call));
}

Work staged_recv(std::shared_ptr<transport::Transport> transport, int peer, std::uint64_t tag,
                 void* data, std::size_t bytes, std::shared_ptr<device::Engine> engine,
                 const device::CallName& call) {
  std::byte* block = nullptr;
  try {
    block = engine->take_pinned(bytes);
  } catch (const device::DeviceError& e) {
    throw named(call, bytes, e);
  }
  transport::RequestPtr request;
  try {
    request = transport->irecv(peer, tag, block, bytes);
  } catch (...) {
    engine->give_pinned(block);
    throw;
  }
  return detail::Access::work(std::make_unique<StagedPointToPoint>(std::move(transport), std::move(request),
                                                   std::move(engine), block, data, bytes, call));
}

Work run_async(AsyncRunner& runner, std::string what, std::chrono::milliseconds timeout,
               std::function<void()> task) {
  auto state = std::make_shared<AsyncState>();
  state->what = std::move(what);
  state->timeout = timeout;
  AsyncRunner::Task job;
  job.run = [state, task = std::move(task)] {
    try {
      task();
    } catch (...) {
      std::lock_guard lock(state->mu);
      state->error = std::current_exception();
    }
  };
  job.finish = [state] {
    std::lock_guard lock(state->mu);
    state->done = true;
    state->cv.notify_all();
  };
  if (!runner.post(std::move(job)))
    throw Error(fmt::format("{}: its group is being destroyed", state->what));
  return detail::Access::work(std::make_unique<AsyncTask>(std::move(state)));
}

}  // namespace collie
