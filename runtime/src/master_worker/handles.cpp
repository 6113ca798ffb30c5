// Master-worker mode's handles (master_worker.hpp): Event and Future (an
// operation's outcome), Buffer, Kernels and KernelArgs.
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/master_worker.hpp>

#include "master_state.hpp"

namespace collie::mw {

using detail::OpState;

// ---- Event ----

Event::Event() = default;
Event::Event(std::shared_ptr<OpState> op) : op_(std::move(op)) {}

void Event::wait() const {
  if (op_) wait(op_->sync->timeout);
}

void Event::wait(std::chrono::milliseconds timeout) const {
  if (!op_) return;
  std::unique_lock lock(op_->sync->mu);
  if (!op_->sync->cv.wait_for(lock, timeout, [&] { return op_->done; })) {
    auto report = op_->sync->stall_reports.find(op_->worker);
    throw TimeoutError(fmt::format("{}: not done after {} ms{}", op_->what, timeout.count(),
                                   report == op_->sync->stall_reports.end()
                                       ? std::string()
                                       : "; " + report->second));
  }
  if (op_->error.empty()) return;
  if (op_->connection) throw ConnectionError(op_->error);
  throw RequestError(op_->error);
}

bool Event::ready() const {
  if (!op_) return true;
  std::lock_guard lock(op_->sync->mu);
  return op_->done;
}

const std::string& Event::what() const {
  static const std::string none = "(nothing)";
  return op_ ? op_->what : none;
}

double Event::value() const {
  return op_ ? op_->value : 0;
}
std::shared_ptr<void> Event::kept() const {
  return op_ ? op_->keep : nullptr;
}

// ---- Buffer ----

int Buffer::worker() const {
  return state_ ? state_->worker : 0;
}
DataType Buffer::dtype() const {
  return state_ ? state_->dtype : DataType::Float32;
}
std::size_t Buffer::count() const {
  return state_ ? state_->count : 0;
}
std::size_t Buffer::bytes() const {
  return state_ ? state_->count * dtype_size(state_->dtype) : 0;
}
std::uint64_t Buffer::id() const {
  return state_ ? state_->id : 0;
}
int Buffer::device() const {
  return state_ ? state_->device : -1;
}
std::string Buffer::describe() const {
  if (!state_) return "(no buffer)";
  return fmt::format("{}[{}] #{} on worker {}{}", dtype_name(state_->dtype), state_->count,
                     state_->id, state_->worker,
                     state_->device >= 0 ? fmt::format(" (cuda:{})", state_->device) : "");
}

// ---- kernels ----

void Kernels::add(std::string name, Kernel kernel) {
  if (name.empty()) throw ArgumentError("master-worker: a kernel needs a name");
  if (!kernel) throw ArgumentError(fmt::format("master-worker: kernel '{}' is empty", name));
  if (kernels_.contains(name))
    throw ArgumentError(fmt::format("master-worker: kernel '{}' is registered twice", name));
  kernels_.emplace(std::move(name), std::move(kernel));
}

const Kernel* Kernels::find(std::string_view name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

double KernelArgs::scalar(std::size_t i) const {
  if (i >= scalars_.size())
    throw ArgumentError(fmt::format("kernel: scalar {} asked for, {} given", i, scalars_.size()));
  return scalars_[i];
}

const KernelArgs::Slot& KernelArgs::slot(const std::vector<Slot>& slots, std::size_t i,
                                         DataType want, const char* kind) const {
  if (i >= slots.size())
    throw ArgumentError(fmt::format("kernel: {} {} asked for, {} given", kind, i, slots.size()));
  if (slots[i].dtype != want)
    throw ArgumentError(fmt::format("kernel: {} {} is {}, read as {}", kind, i,
                                    dtype_name(slots[i].dtype), dtype_name(want)));
  return slots[i];
}

}  // namespace collie::mw
