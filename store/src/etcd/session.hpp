// The etcd store's session: the members (http.hpp), the job's prefix, the
// lease and the thread that keeps it alive, and a call's way to etcd and
// back with its errors: a reply, or at the deadline an error that says
// whether etcd has a quorum and what each member answered.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <collie/store/etcd_store.hpp>

#include "api.hpp"
#include "http.hpp"

namespace collie::store::etcd {

class Session {
 public:
  // Reaches a member and takes the lease (within options.timeout).
  explicit Session(EtcdOptions options);
  // Stops the keeper and revokes the lease.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const EtcdOptions& options() const { return options_; }
  Http& http() { return http_; }
  std::int64_t lease() const { return lease_.load(); }
  // "etcd at a:2379, b:2379 (prefix /collie/job/)"
  std::string describe() const;

  // Where the store's keys, barriers and markers live.
  std::string data(std::string_view key) const { return options_.prefix + "k/" + std::string(key); }
  std::string data_prefix() const { return options_.prefix + "k/"; }
  std::string barrier(std::string_view name) const;
  std::string marker() const { return options_.prefix + "m/" + id_; }
  const std::string& id() const { return id_; }

  Clock::time_point deadline(Timeout t) const;

  // POSTs `request` and returns the parsed reply. At the deadline throws
  // (fail()); an error reply throws RequestError (a request etcd refuses,
  // as too large), AuthenticationError (permission) or Error. `ambiguous`
  // as Http::post.
  Json call(std::string_view path, const Json& request, Clock::time_point deadline,
            std::string_view what, Timeout timeout, bool* ambiguous = nullptr);

  // The error of a call that ran out of time: TimeoutError, or
  // ConnectionError when no member answered or etcd has no quorum.
  [[noreturn]] void fail(std::string_view what, Timeout timeout, std::string_view more = {});

  // Reads and rewrites one key atomically: `change` gets its value (nullopt:
  // missing) and returns the new one, or nullopt to write nothing. A
  // transaction on the key's revision, retried on conflict; one whose reply
  // was lost is found by the marker it wrote, never done twice. Returns the
  // value written (or, when nothing was, the value read).
  struct Rewrite {
    bool written = false;
    std::optional<std::string> value;
  };
  Rewrite rewrite(std::string_view key,
                  const std::function<std::optional<std::string>(const std::optional<std::string>&)>&
                      change,
                  std::string_view what, Timeout timeout);

  // A number for a marker or an entry that no other call of this store has.
  std::uint64_t next_sequence() { return ++sequence_; }

 private:
  void grant(Clock::time_point deadline);
  void keep_alive();

  EtcdOptions options_;
  Http http_;
  std::string id_;  // this store's random name, for its marker and entries
  std::atomic<std::int64_t> lease_{0};
  std::atomic<std::uint64_t> sequence_{0};

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread keeper_;
};

}  // namespace collie::store::etcd
