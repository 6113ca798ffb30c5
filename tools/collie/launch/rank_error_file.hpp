// A rank's error file, as torch's @record writes it where
// TORCHELASTIC_ERROR_FILE says: the exception that ended the rank, for the
// launcher's failure summary (torchrun's "root cause").
#pragma once

#include <optional>
#include <string>

namespace collie::cli {

struct RankError {
  std::string message;    // "ValueError: boom"
  std::string traceback;  // Python's, as the rank printed it ("" if none)
  long long timestamp = 0;  // seconds since the epoch, when the file says
};

// The error recorded in `path`; nullopt when there is no such file or it is
// not torch's format (a rank may write anything there).
std::optional<RankError> read_rank_error(const std::string& path);

}  // namespace collie::cli
