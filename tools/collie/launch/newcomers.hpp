// Whether a replacement `collie launch --keep-going` started has been
// admitted by the others (ProcessGroup::expand()): read in the job's store,
// where a newcomer says who it is under its ticket and finds its admission
// (collie/keys.hpp, expand/...).
#pragma once

#include <string>
#include <sys/types.h>

#include <collie/store/store.hpp>

namespace collie::cli {

// True if the process `pid` on `host` came to attempt `attempt`'s run as a
// newcomer and the members admitted it; false if it has not come yet, or
// waits. Throws what the store throws.
bool newcomer_admitted(store::Store& store, int attempt, pid_t pid, const std::string& host);

}  // namespace collie::cli
