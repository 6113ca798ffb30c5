// What `collie launch` says when an attempt fails: the ranks' error files
// (torch's @record, TORCHELASTIC_ERROR_FILE) and the root cause quoted from
// them, and the table of this node's ranks.
#pragma once

#include <string>

#include "ranks.hpp"

namespace collie::cli {

// Where the ranks' error files go: a directory of the launcher's own
// ($TMPDIR/collie-launch-XXXXXX), removed when it ends. A launcher killed
// by SIGKILL cannot remove it: each holds a lock on a file in its
// directory (flock: the kernel lets go when the process is gone, however
// it ends), and the next launcher of the same user removes the
// directories whose lock it can take.
class ErrorFiles {
 public:
  ErrorFiles();
  ~ErrorFiles();
  ErrorFiles(const ErrorFiles&) = delete;
  ErrorFiles& operator=(const ErrorFiles&) = delete;

  // The file of `rank` in `attempt` (its directory made); "" if there is
  // no directory to put it in.
  std::string path(int attempt, int rank) const;

 private:
  std::string dir_;
  int lock_ = -1;  // the lock file, held while this launcher lives
};

// What the first rank here that recorded its exception raised, with the
// end of its traceback: torchrun's "root cause" ("" if none did).
std::string root_cause(const ErrorFiles& files, int attempt, const LocalRanks& ranks,
                       const LocalRank* first_failure);

// "ranks on node N:" and a line per rank: its pid, how it ended, and which
// failed first or was blamed.
std::string rank_table(int node_rank, const LocalRanks& ranks, const LocalRank* first_failure,
                       int blamed);

}  // namespace collie::cli
