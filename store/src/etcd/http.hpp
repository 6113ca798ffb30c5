// The etcd store's HTTP side: JSON requests to etcd's v3 gateway over
// libcurl, TLS with a client certificate (or plain HTTP when the user said
// --insecure), and failover between the cluster's members.
//
//   Http http(options);
//   auto reply = http.post("/v3/kv/range", R"({"key":"Zm9v"})", deadline);
//
// A request goes to the member that answered last; a member that cannot be
// reached, or answers that it has no leader, is left for the next, round
// the list, until the call's deadline. Each thread keeps one libcurl handle
// per member (its connection stays open between calls). What a failure
// looked like, per member, is kept for the error a call throws at its
// deadline ("a:2379 refused the connection; b:2379 has no leader").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <collie/store/etcd_store.hpp>

namespace collie::store::etcd {

using Clock = std::chrono::steady_clock;

// A reply etcd gave: its HTTP status and body (JSON).
struct Reply {
  long status = 0;
  std::string body;
  std::string member;  // "host:port" that answered
};

// How one attempt on one member ended.
enum class Outcome {
  Answered,     // a reply (any status)
  NotSent,      // no connection: the request surely did nothing
  Ambiguous,    // sent, no reply: it may have been done
  Interrupted,  // interrupt_waits(), or the caller's stream handler said stop
};

class Http {
 public:
  explicit Http(const EtcdOptions& options);
  ~Http();
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  // POSTs `body` to `path` on one member after another until one answers
  // with something other than "no leader", or the deadline passes.
  // `ambiguous` is set when some attempt was sent and got no answer (a
  // write may have been done). Returns nullopt at the deadline. Throws
  // InterruptedError when waits are interrupted.
  std::optional<Reply> post(std::string_view path, const std::string& body,
                            Clock::time_point deadline, bool* ambiguous = nullptr);

  // A streaming POST (watch) to one member, trying the next on failure:
  // every line of the reply goes to `on_line`, which returns false to end
  // the stream. Returns when `on_line` said stop (true), or at the deadline,
  // or when the stream ends (false: call again to go on, from where the
  // lines said). Throws InterruptedError.
  bool stream(std::string_view path, const std::string& body, Clock::time_point deadline,
              const std::function<bool(std::string_view line)>& on_line);

  // What each member says of itself now (GET /health, at most `budget`,
  // all members at once): "a:2379 has no leader, b:2379 did not answer".
  // `quorum` is set when some member reports a healthy cluster.
  std::string health(std::chrono::milliseconds budget, bool* quorum);

  // What went wrong with each member since the last success, for errors.
  std::string failures() const;
  // "a:2379, b:2379, c:2379"
  const std::string& members() const { return members_text_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string members_text_;
};

}  // namespace collie::store::etcd
