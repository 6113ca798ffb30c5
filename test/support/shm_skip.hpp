// Tests that run on the shared-memory backend skip it, saying why, where
// this machine cannot share memory between processes (no memfd_create or
// pidfd_open: an old kernel, a seccomp profile; /proc not readable).
#pragma once

#include <string>

#include "support/catch.hpp"

#include <collie/transport/shm.hpp>

// In a test (or a GENERATE branch) whose backend is `which_`: returns
// from it when that is "shm" and shared memory is unusable here.
#define COLLIE_SKIP_WITHOUT_SHM(which_)                                             \
  do {                                                                               \
    if ((which_) == std::string("shm")) {                                            \
      if (const auto why_ = collie::transport::shared_memory_unusable(); !why_.empty()) { \
        WARN("skipped on shared memory: " << why_);                                  \
        return;                                                                      \
      }                                                                              \
    }                                                                                \
  } while (false)
