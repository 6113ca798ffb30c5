// A real etcd cluster for tests (Debian's etcd-server), with certificates
// made by openssl when TLS is asked for.
//
//   collie::test::ScratchDir dir;
//   collie::test::EtcdCluster etcd(dir, EtcdCluster::on_loopback(3, /*tls=*/true));
//   if (!etcd.ok()) { WARN("skipped: " << etcd.why()); return; }
//   options.endpoints = etcd.endpoints();   // "127.0.0.1:40123", ...
//   options.tls = etcd.client_tls();
//   etcd.stop(1);                            // member 1 dies (SIGKILL)
//
// On loopback, each member's ports are ones that were free a moment ago
// (momentarily_free_port): etcd 3.4 cannot take port 0, because its JSON
// gateway dials the address it was told rather than the one it bound. A
// member whose port was taken in between fails to start, and the cluster
// is started again on other ports. With network namespaces (netns.hpp),
// member i runs on host `on_hosts[i]` on etcd's usual ports 2379 and 2380,
// which nothing else in those namespaces uses.
#pragma once

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/store/etcd_store.hpp>

#include "eventually.hpp"
#include "netns.hpp"
#include "scratch_dir.hpp"
#include "store_fixture.hpp"
#include "subprocess.hpp"

namespace collie::test {

class EtcdCluster {
 public:
  struct Options {
    int members = 1;
    bool tls = false;
    const NetworkNamespaces* hosts = nullptr;  // null: loopback
    std::vector<int> on_hosts;                 // with hosts: member i's host
  };
  static Options on_loopback(int members = 1, bool tls = false) {
    Options o;
    o.members = members;
    o.tls = tls;
    return o;
  }

  EtcdCluster(const ScratchDir& dir, Options options) : dir_(dir), o_(std::move(options)) {
    if (::access("/usr/bin/etcd", X_OK) != 0) {
      why_ = "etcd is missing (tools/setup.sh --test installs Debian's etcd-server)";
      return;
    }
    if (o_.tls && ::access("/usr/bin/openssl", X_OK) != 0) {
      why_ = "openssl is missing (tools/setup.sh --test installs it)";
      return;
    }
    for (int attempt = 0; attempt < 5 && !ok_; ++attempt) {
      stop_all();
      addresses();
      if (o_.tls && !certificates()) return;
      ok_ = start_all();
    }
    if (!ok_ && why_.empty()) why_ = "etcd did not start: " + last_error_;
  }

  ~EtcdCluster() { stop_all(); }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  // "host:port" of each member's client port.
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < hosts_.size(); ++i)
      out.push_back(hosts_[i] + ":" + std::to_string(client_ports_[i]));
    return out;
  }
  std::string endpoint_list() const {
    std::string out;
    for (const auto& e : endpoints())
      out += (out.empty() ? "" : ",") + e;
    return out;
  }

  // Options for a store on this cluster.
  store::EtcdOptions store_options(const std::string& prefix = "/collie/test/") const {
    store::EtcdOptions s;
    s.endpoints = endpoints();
    s.prefix = prefix;
    s.insecure = !o_.tls;
    if (o_.tls) s.tls = client_tls();
    s.timeout = std::chrono::seconds(30);
    return s;
  }
  store::EtcdTls client_tls() const {
    return {dir_.file("etcd-ca.pem"), dir_.file("etcd-client.pem"),
            dir_.file("etcd-client-key.pem")};
  }
  // A certificate from another CA: etcd must refuse it.
  store::EtcdTls stranger_tls() const {
    return {dir_.file("etcd-ca.pem"), dir_.file("etcd-stranger.pem"),
            dir_.file("etcd-stranger-key.pem")};
  }

  // Member i dies (SIGKILL) / starts again with its data (it rejoins).
  void stop(int i) {
    auto& m = members_[static_cast<std::size_t>(i)];
    if (!m) return;
    m->signal(SIGKILL);
    m->wait(std::chrono::seconds(30));
    m.reset();
  }
  // Waits until it serves again (and so has caught up with the others).
  bool start(int i) {
    const auto ready = [&] { return count(read_log(i), "ready to serve client requests"); };
    const auto before = ready();
    members_[static_cast<std::size_t>(i)] = std::make_unique<Subprocess>(argv(i, "existing"));
    return eventually([&] { return ready() > before; }, std::chrono::seconds(60));
  }

 private:
  void addresses() {
    hosts_.clear();
    client_ports_.clear();
    peer_ports_.clear();
    for (int i = 0; i < o_.members; ++i) {
      if (o_.hosts != nullptr) {
        hosts_.push_back(NetworkNamespaces::address(o_.on_hosts[static_cast<std::size_t>(i)]));
        client_ports_.push_back(2379);
        peer_ports_.push_back(2380);
      } else {
        hosts_.push_back("127.0.0.1");
        client_ports_.push_back(momentarily_free_port());
        peer_ports_.push_back(momentarily_free_port());
      }
    }
  }

  bool openssl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"/usr/bin/openssl"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run(argv, {}, {}, std::chrono::seconds(60));
    if (r.exit_code != 0) why_ = "openssl " + args[0] + " failed: " + r.err;
    return r.exit_code == 0;
  }

  // A CA, one server certificate for every member's address (serverAuth and
  // clientAuth: etcd's gateway presents it to etcd itself), a client's, and
  // a stranger's from a CA of its own.
  bool certificates() {
    const auto f = [&](const char* name) { return dir_.file(name); };
    std::string san = "subjectAltName=IP:127.0.0.1";
    for (const auto& h : hosts_)
      san += ",IP:" + h;
    std::ofstream(f("etcd-server.ext")) << san << "\nextendedKeyUsage=serverAuth,clientAuth\n";
    std::ofstream(f("etcd-client.ext")) << "extendedKeyUsage=clientAuth\n";
    const auto key = [&](const std::string& out) {
      return openssl({"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-out", out});
    };
    const auto ca = [&](const std::string& name) {
      return key(f((name + "-key.pem").c_str())) &&
             openssl({"req", "-x509", "-new", "-key", f((name + "-key.pem").c_str()), "-days", "2",
                      "-subj", "/CN=" + name, "-out", f((name + ".pem").c_str())});
    };
    const auto signed_by = [&](const std::string& name, const std::string& by,
                               const std::string& ext) {
      return key(f((name + "-key.pem").c_str())) &&
             openssl({"req", "-new", "-key", f((name + "-key.pem").c_str()), "-subj",
                      "/CN=" + name, "-out", f((name + ".csr").c_str())}) &&
             openssl({"x509", "-req", "-in", f((name + ".csr").c_str()), "-CA",
                      f((by + ".pem").c_str()), "-CAkey", f((by + "-key.pem").c_str()),
                      "-CAcreateserial", "-days", "2", "-extfile", f(ext.c_str()), "-out",
                      f((name + ".pem").c_str())});
    };
    return ca("etcd-ca") && ca("etcd-other-ca") &&
           signed_by("etcd-server", "etcd-ca", "etcd-server.ext") &&
           signed_by("etcd-client", "etcd-ca", "etcd-client.ext") &&
           signed_by("etcd-stranger", "etcd-other-ca", "etcd-client.ext");
  }

  std::vector<std::string> argv(int i, const std::string& state) const {
    const auto n = std::to_string(i);
    const std::string scheme = o_.tls ? "https://" : "http://";
    std::string cluster;
    for (std::size_t m = 0; m < hosts_.size(); ++m) {
      if (m > 0) cluster += ',';
      cluster += fmt::format("m{}=http://{}:{}", m, hosts_[m], peer_ports_[m]);
    }
    const auto at = static_cast<std::size_t>(i);
    const auto client = scheme + hosts_[at] + ":" + std::to_string(client_ports_[at]);
    const auto peer = "http://" + hosts_[at] + ":" + std::to_string(peer_ports_[at]);
    std::vector<std::string> command{"/usr/bin/etcd",
                                     "--name", "m" + n,
                                     "--data-dir", dir_.file("etcd-data-" + n),
                                     "--listen-client-urls", client,
                                     "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer,
                                     "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", cluster,
                                     "--initial-cluster-state", state,
                                     "--initial-cluster-token", "collie-test",
                                     // A busy 2-core machine must not lose its leader.
                                     "--heartbeat-interval", "100",
                                     "--election-timeout", "1500"};
    if (o_.tls) {
      command.insert(command.end(),
                     {"--client-cert-auth", "--trusted-ca-file", dir_.file("etcd-ca.pem"),
                      "--cert-file", dir_.file("etcd-server.pem"), "--key-file",
                      dir_.file("etcd-server-key.pem")});
    }
    // Its log goes to a file: a pipe nobody reads would fill and stop it.
    command.insert(command.begin(),
                   {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>" + log(i)});
    if (o_.hosts != nullptr) return o_.hosts->exec(o_.on_hosts[at], command);
    return command;
  }

  std::string log(int i) const { return dir_.file("etcd-" + std::to_string(i) + ".log"); }

  bool start_all() {
    members_.clear();
    for (int i = 0; i < o_.members; ++i) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_.file("etcd-data-" + std::to_string(i)), ignored);
      std::filesystem::remove(log(i), ignored);
      members_.push_back(std::make_unique<Subprocess>(argv(i, "new")));
    }
    for (int i = 0; i < o_.members; ++i) {
      std::string text;
      const bool ready = eventually(
          [&] {
            text = read_log(i);
            return text.find("ready to serve client requests") != std::string::npos ||
                   text.find("address already in use") != std::string::npos;
          },
          std::chrono::seconds(60));
      if (!ready || text.find("ready to serve client requests") == std::string::npos) {
        last_error_ = text.substr(text.size() > 2000 ? text.size() - 2000 : 0);
        return false;
      }
    }
    return true;
  }

  static std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  }

  std::string read_log(int i) const {
    std::ifstream in(log(i));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void stop_all() {
    for (std::size_t i = 0; i < members_.size(); ++i)
      stop(static_cast<int>(i));
    members_.clear();
  }

  const ScratchDir& dir_;
  Options o_;
  std::vector<std::string> hosts_;
  std::vector<std::uint16_t> client_ports_, peer_ports_;
  std::vector<std::unique_ptr<Subprocess>> members_;
  bool ok_ = false;
  std::string why_;
  std::string last_error_;
};

}  // namespace collie::test
