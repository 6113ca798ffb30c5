// Which processors of this machine other collie launchers have bound ranks
// to, so that two jobs started side by side do not bind theirs to the same
// ones (as two `mpirun`s each binding from processor 0 do).
//
// A claim is an exclusive flock(2) on one file per processor,
// `collie-cpu-<N>` in COLLIE_CPU_CLAIMS (default /dev/shm, which every
// process of the machine sees, network namespaces included). The lock
// belongs to the claiming launcher's open file: it ends when the launcher
// and the ranks it forked exit, however they end, so no claim outlives its
// job. The files themselves stay (empty, one per processor) for the next
// job. A file another user made is locked through a read-only descriptor;
// one that is not a plain file counts as claimed.
//
// A claim decides placement only: a claimed processor is never refused to
// anyone, and a directory that cannot be used leaves the ranks unbound.
#pragma once

#include <string>
#include <vector>

namespace collie::cli {

class CpuClaims {
 public:
  CpuClaims() = default;
  CpuClaims(const CpuClaims&) = delete;
  CpuClaims& operator=(const CpuClaims&) = delete;
  CpuClaims(CpuClaims&& other) noexcept;
  CpuClaims& operator=(CpuClaims&& other) noexcept;
  ~CpuClaims();

  // Claims the first `want` of `cpus`, in their order, that no live claim
  // holds, in directory `dir`; holds none (cpus() empty) when fewer are
  // free or `dir` cannot be used.
  static CpuClaims take(const std::vector<int>& cpus, int want, const std::string& dir);
  // COLLIE_CPU_CLAIMS, else /dev/shm.
  static std::string default_dir();

  const std::vector<int>& cpus() const { return cpus_; }

 private:
  void release();
  std::vector<int> cpus_;
  std::vector<int> fds_;
};

}  // namespace collie::cli
