// How a torch group's errors name it and its ranks. Each torch group is a
// collie world of its own (process_group_collie.hpp), so collie's messages
// say "on world" and number ranks within the group: on a sub-group, "rank
// 1" may be global rank 2. A group's GroupNames knows every member's global
// rank (exchanged in the group's store when it is made) and rewrites an
// error to name the group ("on the torch group of global ranks 0, 2") and
// give both numbers of each rank it mentions ("rank 1 (global rank 2)").
// The default group's ranks are global ones: its errors stay as they are.
// Immutable once made: any thread.
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace collie_torch {

class GroupNames {
 public:
  // `global_ranks[r]`: the global rank of the group's rank r.
  explicit GroupNames(std::vector<int> global_ranks);

  // "the torch group of global ranks 0, 2" ("world" for the default group).
  const std::string& name() const { return name_; }
  // `message` with the group named and each rank's global rank beside it.
  std::string rewrite(const std::string& message) const;
  // The same error, its message rewritten (a std::runtime_error, as torch
  // raises every backend error as RuntimeError); `error` itself for the
  // default group, or one that is not a std::exception.
  std::exception_ptr rewrite(std::exception_ptr error) const;

 private:
  std::vector<int> global_;
  bool identity_ = true;  // global rank r is group rank r
  std::string name_;
};

}  // namespace collie_torch
