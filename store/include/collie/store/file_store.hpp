// FileStore: the Store interface over one file on a shared file system, for
// jobs that have a shared directory but no reachable master (file:// init).
//
//   collie::store::FileStore store("/shared/job-42/store");
//   store.set("addr/3", "10.0.0.4:41234");
//
// The file is an append-only log of records (set, delete, barrier count).
// Every operation takes an exclusive lock on the file (Linux open-file-
// description locks, which NFSv4 also honours), reads the records other
// processes appended since its last look, and appends its own. So add,
// compare_set and multi_set are atomic across processes.
//
// A file cannot push, so blocking calls (get, wait, multi_get, barrier) poll
// it, from 1 ms up to every 50 ms, until their timeout. Every call, blocking
// or not, waits for the lock at most its timeout (TimeoutError naming the
// file), so a process stopped while holding it cannot hang the others. The log only grows:
// use a fresh file per job (the directory's owner deletes it afterwards).
//
// Thread-safe; several FileStore objects, in one process or many, may share
// a file.
#pragma once

#include <memory>
#include <string>

#include <collie/store/store.hpp>

namespace collie::store {

class FileStore final : public Store {
 public:
  // Opens (creating if needed) the file at `path`. Throws collie::Error
  // naming the path if it cannot be opened or locked.
  explicit FileStore(std::string path,
                     std::chrono::milliseconds timeout = std::chrono::seconds(300));
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  // Every call of the Store interface (store.hpp), as it documents them.
  COLLIE_STORE_OVERRIDES

  const std::string& path() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie::store
