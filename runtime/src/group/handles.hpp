// The runtime's side of the public handles (process_group.hpp): what a
// Work waits on (detail::WorkState, one kind per operation: work.cpp), and
// how the runtime makes a ProcessGroup or a Work, whose constructors are not
// the user's (detail::Access).
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include <collie/process_group.hpp>

namespace collie {

class detail::WorkState {
 public:
  virtual ~WorkState() = default;
  virtual void wait(std::optional<std::chrono::milliseconds> timeout) = 0;
  virtual bool test() const = 0;
  virtual int source() const { return -1; }
};

struct detail::Access {
  static ProcessGroup group(std::shared_ptr<Group> g) { return ProcessGroup(std::move(g)); }
  static Work work(std::unique_ptr<WorkState> state) { return Work(std::move(state)); }
  static const std::shared_ptr<Group>& group_of(const ProcessGroup& pg) { return pg.impl_; }
};

}  // namespace collie
