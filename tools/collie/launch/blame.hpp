// Whom a failed job's ranks blame, for `collie launch`'s summary: each
// rank's first failed collective said in the store whom it lost or waited
// for (keys::blame). A blamed rank that itself blamed another (rank 0 timed
// out waiting for rank 1, which waited for the stopped rank 2) is a link of
// a chain: its end is the culprit, and it counts every rank before it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <collie/store/store.hpp>

namespace collie::cli {

struct BlameVerdict {
  int culprit = -1;
  std::vector<int> blamers;  // sorted
  int quoted = -1;           // the blamer quoted: one that blamed the culprit directly
  std::string said;          // what it said
};

// From each blamer's record (world rank -> whom it blamed and what it said):
// the rank at the end of the most blamers' chains. nullopt when nobody
// blamed another rank.
std::optional<BlameVerdict> judge_blames(const std::map<int, std::pair<int, std::string>>& records);

// Reads the blame records of attempt `attempt` from the job's store (the
// latest group made in it: ranks that made their group again blame in its
// namespace) and judges them; nullopt when there are none.
std::optional<BlameVerdict> read_blames(store::Store& store, int attempt);

}  // namespace collie::cli
