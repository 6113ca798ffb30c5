// Under a real Slurm: slurmctld and slurmd (Debian's slurm-wlm, installed
// by tools/setup.sh --test) for one node, on free ports, with a generated
// configuration (no munge: auth/none; slurmd in a mount namespace with an
// empty cgroup file system of its own), started by the test and stopped
// after it. srun sets no MASTER_ADDR or MASTER_PORT: collie finds both itself
// (docs/slurm.md). Skips, saying why, without the daemons or without root.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <netinet/in.h>
#include <regex>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

#include "support/build_paths.hpp"
#include "support/catch.hpp"

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::Subprocess;

namespace {

using collie::test::kCollie;
const std::string kWorker = collie::test::paths::kCollectiveWorker;

std::string find_program(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"}) {
    const auto path = std::string(dir) + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// slurmctld serves only where SlurmctldHost names this host.
std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// A port nobody listens on now (bound to 0, then let go).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// One node's Slurm, for the test's life.
class SingleNodeSlurm {
 public:
  SingleNodeSlurm() {
    const auto ctld = find_program("slurmctld"), slurmd = find_program("slurmd");
    srun_ = find_program("srun");
    sinfo_ = find_program("sinfo");
    unshare_ = find_program("unshare");
    if (ctld.empty() || slurmd.empty() || srun_.empty() || sinfo_.empty()) {
      why_ = "Slurm is not installed (tools/setup.sh --test installs slurm-wlm's daemons)";
      return;
    }
    if (::geteuid() != 0) {
      why_ = "slurmd runs jobs as root here; the test is not root";
      return;
    }
    if (unshare_.empty()) {
      why_ = "util-linux's unshare is missing";
      return;
    }
    conf_ = dir_.file("slurm.conf");
    env_ = {"SLURM_CONF=" + conf_};
    // Ports found free may be taken before the daemons bind them (by a
    // test beside this one): then they exit, and the test tries new ones.
    for (int attempt = 0; attempt < 4 && !ok_; ++attempt) {
      stop();
      write_conf();
      ctld_ = std::make_unique<Subprocess>(std::vector<std::string>{ctld, "-D", "-f", conf_}, env_);
      // slurmd will not start without a cgroup file system, and a chroot
      // (a fresh machine made with debootstrap) has none mounted: it runs
      // in a mount namespace of its own, with an empty one (it uses no
      // controller: proctrack/linuxproc, task/none), whatever the host has.
      slurmd_ = std::make_unique<Subprocess>(
          std::vector<std::string>{unshare_, "--mount", "--propagation", "unchanged", "sh", "-c",
                                   "mount --make-rprivate /sys && mount -t tmpfs none "
                                   "/sys/fs/cgroup && exec \"$0\" -D -N collie-node -f \"$1\"",
                                   slurmd, conf_},
          env_);
      bool exited = false;
      const bool idle = collie::test::eventually(
          [&] {
            if (ctld_->wait(0ms) || slurmd_->wait(0ms)) return exited = true;
            const auto r = collie::test::run({sinfo_, "-h", "-o", "%T"}, env_, {}, 10s);
            return r.exit_code == 0 && r.out.find("idle") != std::string::npos;
          },
          60s);
      const auto logs = "slurmd's log:\n" + read(dir_.file("slurmd.log")) + "\nslurmctld's log:\n" +
                        read(dir_.file("slurmctld.log"));
      if (idle && !exited) {
        ok_ = true;
      } else if (logs.find("Address already in use") == std::string::npos) {
        broken_ = true;
        why_ = "slurmctld and slurmd did not come up; " + logs;
        return;
      }
    }
    if (!ok_) {
      broken_ = true;
      why_ = "slurmctld and slurmd found no free ports in four tries";
      return;
    }
    ok_ = true;
  }

  ~SingleNodeSlurm() { stop(); }

  bool ok() const { return ok_; }
  // Installed, but did not come up: a failure, not a skip.
  bool broken() const { return broken_; }
  const std::string& why() const { return why_; }

  collie::test::RunResult srun(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{srun_};
    argv.insert(argv.end(), args.begin(), args.end());
    return collie::test::run(argv, env_, {}, 240s);
  }

 private:
  void stop() {
    for (auto* p : {slurmd_.get(), ctld_.get()}) {
      if (p == nullptr) continue;
      p->signal(SIGTERM);
      p->wait(20s);
    }
    slurmd_.reset();
    ctld_.reset();
  }

  // A configuration on ports free now, with fresh state and logs.
  void write_conf() {
    const auto at = [&](const char* name) { return dir_.file(name); };
    for (const char* d : {"state", "spool"}) {
      std::filesystem::remove_all(dir_.path() / d);
      std::filesystem::create_directories(dir_.path() / d);
    }
    for (const char* log : {"slurmd.log", "slurmctld.log"})
      std::filesystem::remove(dir_.path() / log);
    std::ofstream(conf_) << "ClusterName=collietest\n"
                         << "SlurmctldHost=" << host_name() << "(127.0.0.1)\n"
                         << "SlurmctldPort=" << free_port() << "\n"
                         << "SlurmdPort=" << free_port() << "\n"
                         << "AuthType=auth/none\nCredType=cred/none\n"
                         << "SlurmUser=root\nSlurmdUser=root\n"
                         << "StateSaveLocation=" << at("state") << "\n"
                         << "SlurmdSpoolDir=" << at("spool") << "\n"
                         << "SlurmctldPidFile=" << at("slurmctld.pid") << "\n"
                         << "SlurmdPidFile=" << at("slurmd.pid") << "\n"
                         << "SlurmctldLogFile=" << at("slurmctld.log") << "\n"
                         << "SlurmdLogFile=" << at("slurmd.log") << "\n"
                         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                         << "SchedulerType=sched/builtin\nSelectType=select/linear\n"
                         << "MpiDefault=none\nReturnToService=2\n"
                         << "SlurmdParameters=config_overrides\n"
                         << "JobCompType=jobcomp/none\n"
                         << "AccountingStorageType=accounting_storage/none\n"
                         << "NodeName=collie-node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n"
                         << "PartitionName=test Nodes=collie-node Default=YES MaxTime=INFINITE "
                            "State=UP OverSubscribe=YES\n";
    std::ofstream(dir_.file("cgroup.conf")) << "CgroupPlugin=cgroup/v1\n";
  }

  static std::string read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  collie::test::ScratchDir dir_;
  std::string conf_, srun_, sinfo_, unshare_;
  std::vector<std::string> env_;
  std::unique_ptr<Subprocess> ctld_, slurmd_;
  bool ok_ = false;
  bool broken_ = false;
  std::string why_;
};

}  // namespace

TEST_CASE("under srun, collie runs with no variable set by hand, and names a killed task",
          "[slurm]") {
  SingleNodeSlurm slurm;
  if (slurm.broken()) FAIL(slurm.why());
  if (!slurm.ok()) {
    WARN("skipped: " << slurm.why());
    return;
  }
  // No MASTER_ADDR or MASTER_PORT here or in srun's environment.
  REQUIRE(std::getenv("MASTER_PORT") == nullptr);
  {
    const auto r = slurm.srun({"-n", "4", kCollie, "bench", "all_reduce", "-b", "8", "-e", "1M"});
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE_FALSE(r.timed_out);
    CHECK(r.exit_code == 0);
    // 8 B to 1 MiB: 18 rows, each with 0 wrong out of place and in place.
    const std::regex row(
        R"(^\s+(\d+)\s+\d+\s+float32\s+sum\s.*\s(\d+)\s+\S+\s+\S+\s+\S+\s+(\d+)\s*$)");
    int rows = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (!std::regex_match(line, m, row)) continue;
      ++rows;
      INFO(line);
      CHECK(m[2] == "0");
      CHECK(m[3] == "0");
    }
    CHECK(rows == 18);
    CHECK_THAT(r.out, ContainsSubstring("# Out of bounds values : 0 OK"));
  }
  {
    // Task 2 kills itself mid-collective: srun fails, and the others name it.
    const auto r = slurm.srun({"-n", "4", kWorker, "victim"});
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE_FALSE(r.timed_out);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.out, ContainsSubstring("rank 2: dying"));
    for (int rank : {0, 1, 3})
      CHECK_THAT(r.out, ContainsSubstring("rank " + std::to_string(rank) + ": failed after ") &&
                            ContainsSubstring("rank 2 at 127.0.0.1:"));
  }
}
