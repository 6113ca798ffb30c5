// Hosts for multi-host tests: network namespaces joined by a bridge.
//
//   collie::test::NetworkNamespaces hosts(3);   // 10.77.0.1, .2, .3
//   if (!hosts.ok()) SKIP(hosts.why());
//   Subprocess p(hosts.exec(1, {"/path/to/collie", "launch", ...}));
//   hosts.cut(2);                              // host 2's link goes silent
//
// Each host is a namespace with its own loopback and one veth whose other
// end is on a bridge of the test's own (names carry the test's pid, so
// tests beside it do not collide). Everything is removed when the object
// goes. It needs root (CAP_NET_ADMIN) and iproute2's `ip`; without them
// ok() is false and why() says what is missing.
#pragma once

#include <string>
#include <unistd.h>
#include <vector>

#include "subprocess.hpp"

namespace collie::test {

class NetworkNamespaces {
 public:
  explicit NetworkNamespaces(int hosts) {
    const auto id = std::to_string(::getpid() % 100000);
    bridge_ = "cb" + id;
    if (::access("/usr/sbin/ip", X_OK) != 0 && ::access("/sbin/ip", X_OK) != 0 &&
        ::access("/usr/bin/ip", X_OK) != 0) {
      why_ = "iproute2's `ip` is not installed (tools/setup.sh --test installs it)";
      return;
    }
    if (!ip({"link", "add", bridge_, "type", "bridge"})) {
      why_ = "cannot make a bridge (network namespaces need root): " + last_error_;
      return;
    }
    made_bridge_ = true;
    if (!ip({"link", "set", bridge_, "up"})) {
      fail("bridge up");
      return;
    }
    for (int i = 0; i < hosts; ++i) {
      const auto n = std::to_string(i);
      const auto ns = "collie-" + id + "-" + n;
      const auto outer = "cv" + id + "a" + n;
      const auto inner = "cv" + id + "b" + n;
      if (!ip({"netns", "add", ns})) {
        fail("netns add " + ns);
        return;
      }
      namespaces_.push_back(ns);
      if (!ip({"link", "add", outer, "type", "veth", "peer", "name", inner})) {
        fail("veth " + outer);
        return;
      }
      outer_.push_back(outer);
      if (!ip({"link", "set", inner, "netns", ns}) ||
          !ip({"link", "set", outer, "master", bridge_}) || !ip({"link", "set", outer, "up"}) ||
          !ip({"-n", ns, "addr", "add", address(i) + "/24", "dev", inner}) ||
          !ip({"-n", ns, "link", "set", inner, "up"}) ||
          !ip({"-n", ns, "link", "set", "lo", "up"})) {
        fail("set up " + ns);
        return;
      }
    }
    ok_ = true;
  }

  ~NetworkNamespaces() {
    for (const auto& ns : namespaces_)
      ip({"netns", "delete", ns});
    for (const auto& outer : outer_)
      ip({"link", "delete", outer});
    if (made_bridge_) ip({"link", "delete", bridge_});
  }

  NetworkNamespaces(const NetworkNamespaces&) = delete;
  NetworkNamespaces& operator=(const NetworkNamespaces&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  // Host i's address: 10.77.0.(i + 1).
  static std::string address(int i) { return "10.77.0." + std::to_string(i + 1); }
  // The interface host i has (besides lo).
  std::string interface(int i) const { return "cv" + id() + "b" + std::to_string(i); }

  // argv that runs `command` on host i.
  std::vector<std::string> exec(int i, const std::vector<std::string>& command) const {
    std::vector<std::string> argv{ip_path(), "netns", "exec",
                                  namespaces_[static_cast<std::size_t>(i)]};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

  // Host i's link goes silent: its end leaves the bridge, so what it sends
  // is dropped and nothing reaches it, without an error on either side
  // (a pulled cable, a switch that died).
  bool cut(int i) { return ip({"link", "set", outer_[static_cast<std::size_t>(i)], "nomaster"}); }

 private:
  static std::string ip_path() {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"})
      if (::access(p, X_OK) == 0) return p;
    return "ip";
  }
  std::string id() const { return bridge_.substr(2); }

  bool ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv{ip_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run(argv, {}, {}, std::chrono::seconds(30));
    last_error_ = r.err;
    return r.exit_code == 0;
  }
  void fail(const std::string& step) { why_ = "network namespaces: " + step + ": " + last_error_; }

  std::string bridge_;
  bool made_bridge_ = false;
  std::vector<std::string> namespaces_;
  std::vector<std::string> outer_;
  bool ok_ = false;
  std::string why_;
  std::string last_error_;
};

}  // namespace collie::test
