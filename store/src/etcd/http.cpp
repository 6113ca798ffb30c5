// JSON over HTTP to etcd's members, with failover (http.hpp).
#include "http.hpp"

#include "api.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <collie/address.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>

namespace collie::store::etcd {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      throw Error("etcd store: libcurl could not be initialised");
  });
}

// "https://a:2379" -> "a:2379"
std::string member_name(const std::string& url) {
  const auto at = url.find("://");
  return at == std::string::npos ? url : url.substr(at + 3);
}

// What is written into a request's reply: the whole body, or lines handed
// on as they come.
struct Sink {
  std::string body;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  std::size_t scanned = 0;
  bool stopped = false;  // on_line said stop
};

std::size_t on_data(char* data, std::size_t size, std::size_t n, void* user) {
  auto& sink = *static_cast<Sink*>(user);
  sink.body.append(data, size * n);
  if (sink.on_line == nullptr) return size * n;
  std::size_t start = 0;
  for (auto end = sink.body.find('\n', sink.scanned); end != std::string::npos;
       end = sink.body.find('\n', start)) {
    const std::string_view line(sink.body.data() + start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \r\t") != std::string_view::npos && !(*sink.on_line)(line)) {
      sink.stopped = true;
      return 0;  // ends the transfer (CURLE_WRITE_ERROR)
    }
  }
  sink.body.erase(0, start);
  sink.scanned = sink.body.size();
  return size * n;
}

int on_progress(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return waits_interrupted() != 0 ? 1 : 0;
}

// A member whose host goes silent (its link cut, the host powered off)
// sends no reset: a request on a connection kept open to it would wait out
// the whole call (a lease's keep-alive, a launcher's 300 s), and a watch
// would wait forever. Each connection to etcd therefore fails, and the
// call goes on to the next member, once its data has gone unacknowledged
// for kSilentMember (TCP_USER_TIMEOUT) or, idle (a watch, a request etcd
// is still working on), once keep-alive probes went unanswered for about
// as long. A member's kernel answers both however busy etcd is, so a slow
// etcd is waited for; only a silent host is left.
constexpr int kSilentMemberMs = 2000;
int on_socket(void*, curl_socket_t fd, curlsocktype purpose) {
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKOPT_OK;
  set_keep_alive(fd, 1, 1, 1);
  const unsigned int user_timeout = kSilentMemberMs;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  return CURL_SOCKOPT_OK;
}

}  // namespace

struct Http::Impl {
  std::vector<std::string> urls;  // "https://a:2379"
  std::vector<std::string> names;  // "a:2379"
  EtcdTls tls;

  std::mutex mu;
  std::vector<std::vector<CURL*>> idle;  // per member, handles not in use
  std::size_t preferred = 0;             // the member that answered last
  std::vector<std::string> failures;     // per member, since its last success

  ~Impl() {
    for (auto& handles : idle)
      for (CURL* h : handles)
        curl_easy_cleanup(h);
  }

  CURL* take(std::size_t member) {
    {
      std::lock_guard lock(mu);
      if (!idle[member].empty()) {
        CURL* h = idle[member].back();
        idle[member].pop_back();
        return h;
      }
    }
    CURL* h = curl_easy_init();
    if (h == nullptr) throw Error("etcd store: libcurl could not make a handle");
    return h;
  }
  void give_back(std::size_t member, CURL* h) {
    std::lock_guard lock(mu);
    idle[member].push_back(h);
  }

  void note_failure(std::size_t member, std::string what) {
    std::lock_guard lock(mu);
    failures[member] = std::move(what);
  }
  void note_success(std::size_t member) {
    std::lock_guard lock(mu);
    preferred = member;
    failures[member].clear();
  }
  std::size_t first() {
    std::lock_guard lock(mu);
    return preferred;
  }

  // One request to one member.
  Outcome attempt(std::size_t member, bool get, std::string_view path, const std::string& body,
                  Clock::time_point deadline, Sink& sink, long& status) {
    CURL* h = take(member);
    const auto url = urls[member] + std::string(path);
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Content-Type: application/json");
    // A watch on a member that loses its leader is cancelled, not left
    // silent (etcd's "hasleader" metadata, through the gateway).
    headers = curl_slist_append(headers, "Grpc-Metadata-hasleader: true");
    const auto left = std::max<long long>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (get) {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(left));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min<long long>(left, 3000)));
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, on_socket);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!tls.cacert.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, tls.cacert.c_str());
    if (!tls.cert.empty()) curl_easy_setopt(h, CURLOPT_SSLCERT, tls.cert.c_str());
    if (!tls.key.empty()) curl_easy_setopt(h, CURLOPT_SSLKEY, tls.key.c_str());
    char error[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
    const CURLcode code = curl_easy_perform(h);
    curl_off_t sent_at = 0;
    curl_easy_getinfo(h, CURLINFO_PRETRANSFER_TIME_T, &sent_at);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
    curl_slist_free_all(headers);
    give_back(member, h);

    if (code == CURLE_OK) return Outcome::Answered;
    if (sink.stopped || code == CURLE_ABORTED_BY_CALLBACK) return Outcome::Interrupted;
    std::string what = error[0] != '\0' ? std::string(error) : curl_easy_strerror(code);
    if (code == CURLE_OPERATION_TIMEDOUT) what = "no answer within the call's time";
    note_failure(member, what);
    switch (code) {
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_CONNECT:
      case CURLE_SSL_CONNECT_ERROR:
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_CACERT_BADFILE:
        return Outcome::NotSent;
      default:
        return sent_at > 0 ? Outcome::Ambiguous : Outcome::NotSent;
    }
  }

  // An answer that says "ask another member": no leader, or (possibly
  // done) a proposal that timed out or lost its leader.
  bool unavailable(std::size_t member, long status, const std::string& body, bool& ambiguous) {
    if (status == 200) return false;
    // (A stream's reply is a line; its first is the error.)
    const auto json = nlohmann::json::parse(body.substr(0, body.find('\n')), nullptr, false);
    const auto [code, message] = error_of(json);
    if (code != 14 && code != 4) return false;  // Unavailable, DeadlineExceeded
    if (message.find("no leader") == std::string::npos) ambiguous = true;
    note_failure(member, message.empty() ? "unavailable" : message);
    return true;
  }
};

Http::Http(const EtcdOptions& options) : impl_(std::make_unique<Impl>()) {
  global_init();
  for (const auto& e : options.endpoints) {
    std::string url = e;
    if (url.find("://") == std::string::npos)
      url = (options.insecure ? "http://" : "https://") + url;
    while (!url.empty() && url.back() == '/')
      url.pop_back();
    impl_->urls.push_back(url);
    impl_->names.push_back(member_name(url));
  }
  impl_->tls = options.tls;
  impl_->idle.resize(impl_->urls.size());
  impl_->failures.resize(impl_->urls.size());
  for (const auto& n : impl_->names)
    members_text_ += (members_text_.empty() ? "" : ", ") + n;
}

Http::~Http() = default;

std::optional<Reply> Http::post(std::string_view path, const std::string& body,
                                Clock::time_point deadline, bool* ambiguous) {
  const std::size_t n = impl_->urls.size();
  auto backoff = std::chrono::milliseconds(20);
  std::size_t member = impl_->first();
  bool unsure = false;
  for (std::size_t tried = 0;; ++tried) {
    if (tried > 0 && tried % n == 0) {
      // A whole round failed: wait a little before the next one.
      const auto until = std::min(deadline, Clock::now() + backoff);
      while (Clock::now() < until) {
        if (waits_interrupted() != 0) break;
        std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(),
                                                              std::chrono::milliseconds(50)));
      }
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    if (waits_interrupted() != 0)
      throw InterruptedError(fmt::format("etcd store: a call to etcd at {} ended by {}",
                                         members_text_, signal_name(waits_interrupted())));
    if (Clock::now() >= deadline) break;
    Sink sink;
    long status = 0;
    const auto outcome = impl_->attempt(member, false, path, body, deadline, sink, status);
    if (outcome == Outcome::Interrupted) continue;  // thrown above
    if (outcome == Outcome::Ambiguous) unsure = true;
    if (outcome == Outcome::Answered && !impl_->unavailable(member, status, sink.body, unsure)) {
      impl_->note_success(member);
      if (ambiguous != nullptr) *ambiguous = unsure;
      return Reply{status, std::move(sink.body), impl_->names[member]};
    }
    member = (member + 1) % n;
  }
  if (ambiguous != nullptr) *ambiguous = unsure;
  return std::nullopt;
}

bool Http::stream(std::string_view path, const std::string& body, Clock::time_point deadline,
                  const std::function<bool(std::string_view)>& on_line) {
  const std::size_t member = impl_->first();
  Sink sink;
  sink.on_line = &on_line;
  long status = 0;
  const auto outcome = impl_->attempt(member, false, path, body, deadline, sink, status);
  if (sink.stopped) return true;
  if (waits_interrupted() != 0)
    throw InterruptedError(fmt::format("etcd store: a wait on etcd at {} ended by {}",
                                       members_text_, signal_name(waits_interrupted())));
  if (outcome == Outcome::Answered) {
    bool unused = false;
    if (!impl_->unavailable(member, status, sink.body, unused) && status != 200)
      impl_->note_failure(member, fmt::format("HTTP {}: {}", status, sink.body.substr(0, 200)));
  }
  // Ended, or this member failed: the next call starts on the next one.
  if (Clock::now() < deadline) {
    std::lock_guard lock(impl_->mu);
    if (impl_->preferred == member) impl_->preferred = (member + 1) % impl_->urls.size();
  }
  return false;
}

std::string Http::health(std::chrono::milliseconds budget, bool* quorum) {
  const std::size_t n = impl_->urls.size();
  std::vector<std::string> said(n);
  std::vector<char> healthy(n, 0);
  const auto deadline = Clock::now() + budget;
  std::vector<std::thread> askers;
  for (std::size_t m = 0; m < n; ++m) {
    askers.emplace_back([&, m] {
      Sink sink;
      long status = 0;
      try {
        const auto outcome = impl_->attempt(m, true, "/health", "", deadline, sink, status);
        if (outcome != Outcome::Answered) {
          std::lock_guard lock(impl_->mu);
          said[m] = impl_->names[m] + " did not answer (" + impl_->failures[m] + ")";
          return;
        }
      } catch (const std::exception& e) {
        said[m] = impl_->names[m] + ": " + e.what();
        return;
      }
      const auto json = nlohmann::json::parse(sink.body, nullptr, false);
      const bool ok = json.is_object() && json.value("health", "") == "true";
      healthy[m] = ok ? 1 : 0;
      said[m] = impl_->names[m] + (ok ? " is healthy" : " answered but has no leader");
    });
  }
  for (auto& t : askers)
    t.join();
  std::string text;
  bool any = false;
  for (std::size_t m = 0; m < n; ++m) {
    text += (m == 0 ? "" : "; ") + said[m];
    any = any || healthy[m] != 0;
  }
  if (quorum != nullptr) *quorum = any;
  return text;
}

std::string Http::failures() const {
  std::lock_guard lock(impl_->mu);
  std::string text;
  for (std::size_t m = 0; m < impl_->names.size(); ++m) {
    if (impl_->failures[m].empty()) continue;
    text += (text.empty() ? "" : "; ") + impl_->names[m] + ": " + impl_->failures[m];
  }
  return text;
}

}  // namespace collie::store::etcd
