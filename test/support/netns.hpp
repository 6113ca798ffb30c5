// Hosts for multi-host tests: network namespaces joined by a bridge.
//
//   collie::test::NetworkNamespaces hosts(3);   // 10.77.0.1, .2, .3
//   if (!hosts.ok()) { WARN("skipped: " << hosts.why()); return; }
//   Subprocess p(hosts.exec(1, {"/path/to/collie", "launch", ...}));
//   hosts.cut(2);                              // host 2's link goes silent
//
// Each host is a network namespace with its own loopback and one veth whose
// other end is on a bridge of the test's own (names carry the test's pid,
// so tests beside it do not collide). A namespace is held by a process of
// its own (`unshare --net sleep`), and commands enter it with `nsenter
// --net`: unlike `ip netns`, nothing is mounted, so it works in a chroot
// too. Everything goes when the object does. It needs root (CAP_NET_ADMIN),
// iproute2's `ip` and util-linux's `unshare` and `nsenter`; without them
// ok() is false and why() says what is missing.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.hpp"

namespace collie::test {

class NetworkNamespaces {
 public:
  // `nics` links per host: link n on a bridge of its own, host i at
  // address(i, n).
  explicit NetworkNamespaces(int hosts, int nics = 1) {
    id_ = std::to_string(::getpid() % 100000);
    bridge_ = "cb" + id_;
    ip_ = find("ip");
    tc_ = find("tc");
    const auto unshare = find("unshare");
    nsenter_ = find("nsenter");
    if (ip_.empty() || unshare.empty() || nsenter_.empty()) {
      why_ =
          "iproute2's ip, or util-linux's unshare and nsenter, are missing (tools/setup.sh "
          "--test installs iproute2)";
      return;
    }
    for (int n = 0; n < nics; ++n) {
      const auto bridge = bridge_of(n);
      if (!ip({"link", "add", bridge, "type", "bridge"})) {
        why_ = "cannot make a bridge (network namespaces need root): " + last_error_;
        return;
      }
      bridges_.push_back(bridge);
      if (!ip({"link", "set", bridge, "up"})) {
        fail("bridge up");
        return;
      }
    }
    for (int i = 0; i < hosts; ++i) {
      // The namespace's holder: it prints its pid once inside, then sleeps.
      holders_.push_back(std::make_unique<Subprocess>(
          std::vector<std::string>{unshare, "--net", "sh", "-c", "echo ready; exec sleep 3600"}));
      if (holders_.back()->read_line(std::chrono::seconds(30)) != "ready") {
        fail("unshare --net (host " + std::to_string(i) + ")");
        return;
      }
      const auto pid = std::to_string(holders_.back()->pid());
      const auto n = std::to_string(i);
      for (int link = 0; link < nics; ++link) {
        const auto outer = outer_name(i, link);
        const auto inner = inner_name(i, link);
        if (!ip({"link", "add", outer, "type", "veth", "peer", "name", inner})) {
          fail("veth " + outer);
          return;
        }
        outer_.push_back(outer);
        if (!ip({"link", "set", inner, "netns", pid}) ||
            !ip({"link", "set", outer, "master", bridge_of(link)}) ||
            !ip({"link", "set", outer, "up"}) ||
            !in(i, {"addr", "add", address(i, link) + "/24", "dev", inner}) ||
            !in(i, {"link", "set", inner, "up"})) {
          fail("set up host " + n + "'s link " + std::to_string(link));
          return;
        }
      }
      if (!in(i, {"link", "set", "lo", "up"})) {
        fail("set up host " + n + "'s loopback");
        return;
      }
    }
    ok_ = true;
  }

  ~NetworkNamespaces() {
    // A namespace goes with its last process, and its veth end with it.
    for (auto& h : holders_) {
      h->signal(SIGKILL);
      h->wait(std::chrono::seconds(10));
    }
    for (const auto& outer : outer_)
      ip({"link", "delete", outer});
    for (const auto& bridge : bridges_)
      ip({"link", "delete", bridge});
  }

  NetworkNamespaces(const NetworkNamespaces&) = delete;
  NetworkNamespaces& operator=(const NetworkNamespaces&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  // Host i's address on link n: 10.77.n.(i + 1).
  static std::string address(int i, int n = 0) {
    return "10.77." + std::to_string(n) + "." + std::to_string(i + 1);
  }

  // argv that runs `command` on host i.
  std::vector<std::string> exec(int i, const std::vector<std::string>& command) const {
    std::vector<std::string> argv{
        nsenter_,
        "--net=/proc/" + std::to_string(holders_[static_cast<std::size_t>(i)]->pid()) + "/ns/net"};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

  // Runs fn() on a thread of its own inside host i's network namespace and
  // returns what it returns: sockets it makes, and threads it starts, stay
  // in that namespace (whichever thread uses them later).
  template <class F>
  auto on_host(int i, F fn) const {
    using R = decltype(fn());
    std::optional<R> result;
    std::exception_ptr error;
    std::thread t([&] {
      try {
        enter(i);
        result.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
    });
    t.join();
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }
  // Moves the calling thread into host i's network namespace (setns):
  // sockets it makes from now on are host i's. Throws if it cannot.
  void enter(int i) const {
    const auto path =
        "/proc/" + std::to_string(holders_[static_cast<std::size_t>(i)]->pid()) + "/ns/net";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("cannot enter host " + std::to_string(i) + "'s namespace: " + why);
    }
    ::close(fd);
  }

  // Host i's link goes silent: its end leaves the bridge, so what it sends
  // is dropped and nothing reaches it, without an error on either side
  // (a pulled cable, a switch that died).
  bool cut(int i, int n = 0) { return ip({"link", "set", outer_name(i, n), "nomaster"}); }

  // Host i's link (`link`: its link n) shaped to `rate` (tc's words: "400mbit") both ways, as
  // tools/cluster.sh shapes its hosts: a token bucket of 256 KB. False
  // (why() says) where tc cannot.
  bool shape(int i, const std::string& rate, int link = 0) {
    const auto n = std::to_string(i);
    const std::vector<std::string> tbf{"root", "tbf", "rate", rate, "burst", "256kb", "latency",
                                       "20ms"};
    auto outer = std::vector<std::string>{tc_, "qdisc", "replace", "dev", outer_name(i, link)};
    auto inner = exec(i, {tc_, "qdisc", "replace", "dev", inner_name(i, link)});
    outer.insert(outer.end(), tbf.begin(), tbf.end());
    inner.insert(inner.end(), tbf.begin(), tbf.end());
    for (const auto& argv : {outer, inner}) {
      const auto r = run(argv, {}, {}, std::chrono::seconds(30));
      if (r.exit_code != 0) {
        why_ = "tc cannot shape host " + n + "'s link: " + r.err;
        return false;
      }
    }
    return true;
  }

 private:
  // Link n's bridge, and host i's ends of its link n (link 0 keeps the
  // names of a host with one).
  std::string bridge_of(int n) const {
    return n == 0 ? bridge_ : bridge_ + "n" + std::to_string(n);
  }
  std::string outer_name(int i, int n) const {
    return "cv" + id_ + "a" + std::to_string(i) + (n == 0 ? "" : "n" + std::to_string(n));
  }
  std::string inner_name(int i, int n) const {
    return "cv" + id_ + "b" + std::to_string(i) + (n == 0 ? "" : "n" + std::to_string(n));
  }

  static std::string find(const std::string& name) {
    for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
      const auto path = std::string(dir) + "/" + name;
      if (::access(path.c_str(), X_OK) == 0) return path;
    }
    return "";
  }

  bool ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv{ip_};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run(argv, {}, {}, std::chrono::seconds(30));
    last_error_ = r.err;
    return r.exit_code == 0;
  }
  // `ip` inside host i.
  bool in(int i, const std::vector<std::string>& args) {
    auto argv = exec(i, {ip_});
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run(argv, {}, {}, std::chrono::seconds(30));
    last_error_ = r.err;
    return r.exit_code == 0;
  }
  void fail(const std::string& step) { why_ = "network namespaces: " + step + ": " + last_error_; }

  std::string id_, bridge_, ip_, tc_, nsenter_;
  std::vector<std::string> bridges_;
  std::vector<std::unique_ptr<Subprocess>> holders_;
  std::vector<std::string> outer_;
  bool ok_ = false;
  std::string why_;
  std::string last_error_;
};

}  // namespace collie::test
