// Resolving a job from init method and environment: every launcher's
// variables, and a clear error for everything missing or contradictory.
#include <map>
#include <vector>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/job_config.hpp>

using namespace std::chrono_literals;
using collie::InitOptions;
using collie::JobConfig;

namespace {

collie::EnvironmentLookup env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

JobConfig resolve(std::map<std::string, std::string> vars, InitOptions options = {}) {
  return collie::resolve_job_config(options, env(std::move(vars)));
}

}  // namespace

TEST_CASE("env:// reads torchrun's variables", "[init]") {
  const auto c = resolve({{"RANK", "3"},
                          {"WORLD_SIZE", "8"},
                          {"LOCAL_RANK", "1"},
                          {"MASTER_ADDR", "10.0.0.1"},
                          {"MASTER_PORT", "29500"},
                          {"COLLIE_STORE_HOSTED", "1"},
                          {"COLLIE_RESTART_COUNT", "2"}});
  CHECK(c.method == JobConfig::Method::Env);
  CHECK(c.rank == 3);
  CHECK(c.world_size == 8);
  CHECK(c.local_rank == 1);
  CHECK(c.master_addr == "10.0.0.1");
  CHECK(c.master_port == 29500);
  CHECK(c.store_hosted_by_launcher);
  CHECK(c.restart_count == 2);
  CHECK(c.timeout == 300s);
  CHECK_THAT(c.rank_source, ContainsSubstring("RANK"));
}

TEST_CASE("env:// falls back to Slurm, with the master from the node list", "[init]") {
  auto c = resolve({{"SLURM_PROCID", "5"},
                    {"SLURM_NTASKS", "16"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_JOB_NODELIST", "gpu[007-010,12],cpu1"},
                    {"MASTER_PORT", "4000"}});
  CHECK(c.rank == 5);
  CHECK(c.world_size == 16);
  CHECK(c.local_rank == 1);
  CHECK(c.master_addr == "gpu007");
  CHECK(c.master_port == 4000);
  CHECK_THAT(c.rank_source, ContainsSubstring("Slurm"));
  // An explicit MASTER_ADDR wins over the node list.
  c = resolve({{"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "2"},
               {"SLURM_JOB_NODELIST", "a[1-2]"},
               {"MASTER_ADDR", "head"},
               {"MASTER_PORT", "4000"}});
  CHECK(c.master_addr == "head");
}

TEST_CASE("under srun or mpirun without MASTER_*, the address and a port come from the job",
          "[init]") {
  // One node: loopback; a port from the job and step ids, alike on every rank.
  std::map<std::string, std::string> slurm{{"SLURM_PROCID", "0"},
                                           {"SLURM_NTASKS", "4"},
                                           {"SLURM_JOB_ID", "4242"},
                                           {"SLURM_STEP_ID", "0"},
                                           {"SLURM_STEP_NUM_NODES", "1"},
                                           {"SLURM_JOB_NODELIST", "node7"}};
  auto c = resolve(slurm);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port >= 20000);
  CHECK(c.master_port <= 29999);
  CHECK_THAT(c.port_source, ContainsSubstring("Slurm job's id (4242 0)") &&
                                ContainsSubstring("COLLIE_PORT_RANGE 20000-29999"));
  const auto port = c.master_port;
  slurm["SLURM_PROCID"] = "3";
  CHECK(resolve(slurm).master_port == port);
  // Another step of the job (srun after srun, or beside it): another port.
  slurm["SLURM_STEP_ID"] = "1";
  CHECK(resolve(slurm).master_port != port);
  // Another job, likewise; a range of one port is that port.
  slurm["SLURM_JOB_ID"] = "4243";
  CHECK(resolve(slurm).master_port != port);
  slurm["COLLIE_PORT_RANGE"] = "31000-31000";
  CHECK(resolve(slurm).master_port == 31000);
  for (const char* bad : {"31000", "2-1", "0-5", "1-70000", "a-b", "1-2x"}) {
    slurm["COLLIE_PORT_RANGE"] = bad;
    CHECK_THROWS_WITH(resolve(slurm), ContainsSubstring("COLLIE_PORT_RANGE='" + std::string(bad) +
                                                      "': takes LOW-HIGH (ports from 1"));
  }
  slurm.erase("COLLIE_PORT_RANGE");
  // Several nodes: the step's first node; MASTER_PORT wins over the job id.
  slurm["SLURM_STEP_NUM_NODES"] = "2";
  slurm["SLURM_STEP_NODELIST"] = "node[3-4]";
  slurm["MASTER_PORT"] = "4000";
  c = resolve(slurm);
  CHECK(c.master_addr == "node3");
  CHECK(c.master_port == 4000);
  CHECK(c.port_source.empty());

  // mpirun on one node (every rank local).
  std::map<std::string, std::string> ompi{{"OMPI_COMM_WORLD_RANK", "1"},
                                          {"OMPI_COMM_WORLD_SIZE", "4"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                          {"OMPI_MCA_ess_base_jobid", "1926365185"}};
  c = resolve(ompi);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port >= 20000);
  CHECK(c.master_port <= 29999);
  // Across nodes it needs rank 0's node, and says how to pass it.
  ompi["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  CHECK_THROWS_WITH(resolve(ompi), ContainsSubstring("set MASTER_ADDR (") &&
                                       ContainsSubstring("mpirun -x MASTER_ADDR="));
}

TEST_CASE("env:// falls back to Open MPI", "[init]") {
  const auto c = resolve({{"OMPI_COMM_WORLD_RANK", "2"},
                          {"OMPI_COMM_WORLD_SIZE", "3"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                          {"MASTER_ADDR", "h"},
                          {"MASTER_PORT", "1234"}});
  CHECK(c.rank == 2);
  CHECK(c.world_size == 3);
  CHECK_THAT(c.rank_source, ContainsSubstring("Open MPI"));
}

TEST_CASE("torchrun's variables win over Slurm's under srun + torchrun", "[init]") {
  const auto c = resolve({{"RANK", "7"},
                          {"WORLD_SIZE", "8"},
                          {"SLURM_PROCID", "1"},
                          {"SLURM_NTASKS", "2"},
                          {"MASTER_ADDR", "h"},
                          {"MASTER_PORT", "1"}});
  CHECK(c.rank == 7);
  CHECK(c.world_size == 8);
}

TEST_CASE("a missing rank or world size says what to set", "[init]") {
  CHECK_THROWS_WITH(resolve({}), ContainsSubstring("does not know its rank") &&
                                     ContainsSubstring("RANK and WORLD_SIZE") &&
                                     ContainsSubstring("SLURM_PROCID"));
  CHECK_THROWS_WITH(resolve({{"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
                    ContainsSubstring("RANK is set but WORLD_SIZE is not"));
  CHECK_THROWS_WITH(resolve({{"SLURM_PROCID", "0"}}),
                    ContainsSubstring("SLURM_PROCID is set but SLURM_NTASKS is not"));
  InitOptions only_rank;
  only_rank.rank = 0;
  CHECK_THROWS_WITH(resolve({}, only_rank), ContainsSubstring("not the world size"));
}

TEST_CASE("a missing store address says which variable", "[init]") {
  CHECK_THROWS_WITH(resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}}),
                    ContainsSubstring("set MASTER_ADDR and MASTER_PORT"));
  CHECK_THROWS_WITH(resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}}),
                    ContainsSubstring("set MASTER_PORT") && !ContainsSubstring("MASTER_ADDR and"));
  CHECK_THROWS_WITH(resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "5"}}),
                    ContainsSubstring("set MASTER_ADDR ("));
}

TEST_CASE("contradictory or malformed values are refused, naming them", "[init]") {
  const std::map<std::string, std::string> base = {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    auto vars = base;
    vars.insert(extra.begin(), extra.end());
    return vars;
  };
  CHECK_THROWS_WITH(resolve(with({{"RANK", "4"}, {"WORLD_SIZE", "4"}})),
                    ContainsSubstring("rank 4 is not in [0, 4)"));
  CHECK_THROWS_WITH(resolve(with({{"RANK", "-1"}, {"WORLD_SIZE", "4"}})),
                    ContainsSubstring("rank -1"));
  CHECK_THROWS_WITH(resolve(with({{"RANK", "x"}, {"WORLD_SIZE", "4"}})),
                    ContainsSubstring("RANK='x' is not an integer"));
  CHECK_THROWS_WITH(resolve(with({{"RANK", "0"}, {"WORLD_SIZE", "0"}})),
                    ContainsSubstring("world size is 0"));
  CHECK_THROWS_WITH(
      resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
      ContainsSubstring("MASTER_PORT=70000 is not a port number"));
  CHECK_THROWS_WITH(resolve(with({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"COLLIE_TIMEOUT", "soon"}})),
                    ContainsSubstring("COLLIE_TIMEOUT='soon'"));
  CHECK_THROWS_WITH(resolve(with({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"COLLIE_TIMEOUT", "-3"}})),
                    ContainsSubstring("COLLIE_TIMEOUT='-3': takes seconds, more than 0; default 300"));
  // Certificates: the certificate and the authorities go together.
  for (const auto& half : std::vector<std::map<std::string, std::string>>{
           {{"COLLIE_SEAL_CERT", "/c.pem"}},
           {{"COLLIE_SEAL_CA", "/ca.pem"}},
           {{"COLLIE_SEAL_KEY", "/k.pem"}},
           {{"COLLIE_SEAL_KEY", "/k.pem"}, {"COLLIE_SEAL_CA", "/ca.pem"}}}) {
    auto vars = with({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    vars.insert(half.begin(), half.end());
    CHECK_THROWS_WITH(resolve(vars), ContainsSubstring("COLLIE_SEAL_CERT and COLLIE_SEAL_CA go "
                                                       "together"));
  }
}

TEST_CASE("certificates: the paths reach the transport's settings, the key from the "
          "certificate's file unless given",
          "[init]") {
  const std::map<std::string, std::string> base = {{"MASTER_ADDR", "h"},
                                                   {"MASTER_PORT", "1"},
                                                   {"RANK", "0"},
                                                   {"WORLD_SIZE", "1"},
                                                   {"COLLIE_SEAL_CERT", "/etc/c.pem"},
                                                   {"COLLIE_SEAL_CA", "/etc/ca.pem"}};
  auto c = resolve(base);
  CHECK(c.transport.seal_cert == "/etc/c.pem");
  CHECK(c.transport.seal_key == "/etc/c.pem");
  CHECK(c.transport.seal_ca == "/etc/ca.pem");
  auto with_key = base;
  with_key["COLLIE_SEAL_KEY"] = "/etc/k.pem";
  CHECK(resolve(with_key).transport.seal_key == "/etc/k.pem");
  CHECK(resolve({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}})
            .transport.seal_cert.empty());
}

TEST_CASE("tcp:// and file:// init methods", "[init]") {
  InitOptions tcp;
  tcp.init_method = "tcp://10.1.2.3:4567";
  auto c = resolve({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, tcp);
  CHECK(c.method == JobConfig::Method::Tcp);
  CHECK(c.master_addr == "10.1.2.3");
  CHECK(c.master_port == 4567);

  tcp.init_method = "tcp://[fe80::1]:99";
  tcp.rank = 0;
  tcp.world_size = 1;
  c = resolve({}, tcp);
  CHECK(c.master_addr == "fe80::1");
  CHECK(c.master_port == 99);
  CHECK(c.rank_source == "the options");

  for (const char* bad : {"tcp://nohost", "tcp://:5", "tcp://h:x", "tcp://[::1]5"}) {
    tcp.init_method = bad;
    CHECK_THROWS_AS(resolve({}, tcp), collie::Error);
  }

  InitOptions file;
  file.init_method = "file:///shared/job/store";
  file.rank = 2;
  file.world_size = 4;
  c = resolve({}, file);
  CHECK(c.method == JobConfig::Method::File);
  CHECK(c.file_path == "/shared/job/store");
  file.init_method = "file://relative";
  CHECK_THROWS_WITH(resolve({}, file), ContainsSubstring("absolute path"));

  InitOptions unknown;
  unknown.init_method = "mpi://";
  CHECK_THROWS_WITH(resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}}, unknown),
                    ContainsSubstring("unknown init method 'mpi://'"));
}

TEST_CASE("etcd:// init method, also from COLLIE_INIT_METHOD, with its certificates", "[init]") {
  InitOptions etcd;
  etcd.init_method = "etcd://10.0.0.1:2379,https://10.0.0.2:2379/job-7.a_b";
  auto c = resolve({{"RANK", "1"},
                    {"WORLD_SIZE", "2"},
                    {"COLLIE_ETCD_CACERT", "/ca.pem"},
                    {"COLLIE_ETCD_CERT", "/c.pem"},
                    {"COLLIE_ETCD_KEY", "/k.pem"}},
                   etcd);
  CHECK(c.method == JobConfig::Method::Etcd);
  CHECK(c.etcd_endpoints == std::vector<std::string>{"10.0.0.1:2379", "https://10.0.0.2:2379"});
  CHECK(c.etcd_job == "job-7.a_b");
  CHECK(c.etcd_cacert == "/ca.pem");
  CHECK(c.etcd_cert == "/c.pem");
  CHECK(c.etcd_key == "/k.pem");
  CHECK_FALSE(c.etcd_insecure);
  CHECK(c.master_addr == "10.0.0.1");  // the route to the first member picks the interface

  for (const char* bad : {"etcd://h:1", "etcd://h:1/", "etcd://h:1/a/b", "etcd://h/job",
                          "etcd:///job", "etcd://h:1,/job"}) {
    etcd.init_method = bad;
    CHECK_THROWS_AS(resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}}, etcd), collie::Error);
  }

  // A program that leaves the method at env:// takes COLLIE_INIT_METHOD.
  c = resolve({{"RANK", "0"},
               {"WORLD_SIZE", "1"},
               {"COLLIE_INIT_METHOD", "etcd://[::1]:2379/j"},
               {"COLLIE_ETCD_INSECURE", "1"}});
  CHECK(c.method == JobConfig::Method::Etcd);
  CHECK(c.etcd_insecure);
  CHECK(c.master_addr == "::1");
  c = resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"COLLIE_INIT_METHOD", "file:///x"}});
  CHECK(c.method == JobConfig::Method::File);
  // One the program names wins.
  InitOptions tcp;
  tcp.init_method = "tcp://h:5";
  c = resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"COLLIE_INIT_METHOD", "file:///x"}}, tcp);
  CHECK(c.method == JobConfig::Method::Tcp);
  CHECK_THROWS_WITH(
      resolve({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"COLLIE_INIT_METHOD", "mpi://"}}),
      ContainsSubstring("(from COLLIE_INIT_METHOD)"));
  CHECK_THROWS_WITH(resolve({{"RANK", "0"},
                             {"WORLD_SIZE", "1"},
                             {"COLLIE_INIT_METHOD", "etcd://h:1/j"},
                             {"COLLIE_ETCD_INSECURE", "yes"}}),
                    ContainsSubstring("COLLIE_ETCD_INSECURE='yes'"));
}

TEST_CASE("options override the environment, and COLLIE_* settings are read", "[init]") {
  InitOptions options;
  options.rank = 1;
  options.world_size = 3;
  options.timeout = 1500ms;
  options.token = "from-options";
  auto c = resolve({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "h"},
                    {"MASTER_PORT", "1"},
                    {"COLLIE_TIMEOUT", "9"},
                    {"COLLIE_STORE_TOKEN", "from-env"},
                    {"COLLIE_SOCKET_IFNAME", "^lo,docker"}},
                   options);
  CHECK(c.rank == 1);
  CHECK(c.world_size == 3);
  CHECK(c.timeout == 1500ms);
  CHECK(c.token == "from-options");
  CHECK(c.socket_ifname == "^lo,docker");
  c = resolve({{"RANK", "0"},
               {"WORLD_SIZE", "2"},
               {"MASTER_ADDR", "h"},
               {"MASTER_PORT", "1"},
               {"COLLIE_TIMEOUT", "2.5"},
               {"COLLIE_STORE_TOKEN", "from-env"}});
  CHECK(c.timeout == 2500ms);
  CHECK(c.token == "from-env");
  CHECK_FALSE(c.store_hosted_by_launcher);
}

TEST_CASE("COLLIE_HOST_LINK: the rate and latency between hosts, checked", "[init]") {
  const std::map<std::string, std::string> job = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with = [&](const std::string& value) {
    auto env = job;
    env["COLLIE_HOST_LINK"] = value;
    return resolve(env);
  };
  // Unset, init measures it; these stand where it cannot.
  const auto defaults = resolve(job);
  CHECK_FALSE(defaults.host_link_given);
  CHECK(defaults.host_link_gbits == 10);
  CHECK(defaults.host_link_latency_us == 30);
  const auto one = with("1");
  CHECK(one.host_link_given);
  CHECK(one.host_link_gbits == 1);
  CHECK(one.host_link_latency_us == 30);
  const auto both = with("25,5.5");
  CHECK(both.host_link_gbits == 25);
  CHECK(both.host_link_latency_us == 5.5);
  for (const std::string bad : {"fast", "0", "-1", "1,", "1,x", "1,-2", "1gbit"}) {
    INFO("COLLIE_HOST_LINK='" << bad << "'");
    CHECK_THROWS_WITH(with(bad), ContainsSubstring("COLLIE_HOST_LINK='" + bad + "'") &&
                                     ContainsSubstring("GBITS[,LATENCY_US]"));
  }
}

TEST_CASE("Slurm node lists: the first host", "[init]") {
  CHECK(collie::first_host_of_nodelist("node1") == "node1");
  CHECK(collie::first_host_of_nodelist("node1,node2") == "node1");
  CHECK(collie::first_host_of_nodelist("node[3-5]") == "node3");
  CHECK(collie::first_host_of_nodelist("node[003-005,9]") == "node003");
  CHECK(collie::first_host_of_nodelist("gpu-[12,3-4],cpu7") == "gpu-12");
  CHECK(collie::first_host_of_nodelist("rack[2-3]-n[07-08]") == "rack2-n07");
  for (const char* bad : {"", "node[", "node[]", "node[a-b]", ",x", "a]b"}) {
    INFO(bad);
    CHECK_THROWS_AS(collie::first_host_of_nodelist(bad), collie::Error);
  }
}

TEST_CASE("COLLIE_SPIN_US sets how long waits poll, and says what is wrong with it", "[init]") {
  const std::map<std::string, std::string> job{
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  CHECK(resolve(job).transport.spin == 50us);
  auto with = job;
  with["COLLIE_SPIN_US"] = "0";
  CHECK(resolve(with).transport.spin == 0us);
  with["COLLIE_SPIN_US"] = "250";
  CHECK(resolve(with).transport.spin == 250us);
  InitOptions options;
  options.spin = 7us;
  CHECK(resolve(with, options).transport.spin == 7us);
  for (const char* bad : {"-1", "fast", "2000000"}) {
    with["COLLIE_SPIN_US"] = bad;
    CHECK_THROWS_WITH(resolve(with), ContainsSubstring("COLLIE_SPIN_US"));
  }
}

TEST_CASE("COLLIE_TRANSPORT, COLLIE_SHM_SINGLE_COPY and COLLIE_SHM_STORES choose what carries messages on one host",
          "[init]") {
  const std::map<std::string, std::string> job{
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  CHECK(resolve(job).transport.backend == "auto");
  CHECK(resolve(job).transport.shm_single_copy_from == 0);
  auto with = job;
  for (const char* name : {"tcp", "shm", "auto"}) {
    with["COLLIE_TRANSPORT"] = name;
    CHECK(resolve(with).transport.backend == name);
  }
  InitOptions options;
  options.transport = "tcp";
  CHECK(resolve(with, options).transport.backend == "tcp");
  with["COLLIE_TRANSPORT"] = "rdma";
  CHECK_THROWS_WITH(resolve(with), ContainsSubstring("COLLIE_TRANSPORT='rdma'") &&
                                       ContainsSubstring("takes one of auto, tcp, shm"));
  options.transport = "udp";
  CHECK_THROWS_WITH(resolve(job, options), ContainsSubstring("InitOptions::transport: COLLIE_TRANSPORT='udp'"));
  with = job;
  with["COLLIE_SHM_SINGLE_COPY"] = "256K";
  CHECK(resolve(with).transport.shm_single_copy_from == 256 * 1024);
  with["COLLIE_SHM_SINGLE_COPY"] = "lots";
  CHECK_THROWS_WITH(resolve(with), ContainsSubstring("COLLIE_SHM_SINGLE_COPY"));
  CHECK(resolve(job).transport.shm_stores == "auto");
  with = job;
  for (const char* name : {"cached", "streaming", "auto"}) {
    with["COLLIE_SHM_STORES"] = name;
    CHECK(resolve(with).transport.shm_stores == name);
  }
  with["COLLIE_SHM_STORES"] = "fast";
  CHECK_THROWS_WITH(resolve(with), ContainsSubstring("COLLIE_SHM_STORES='fast'") &&
                                       ContainsSubstring("takes one of auto, cached, streaming"));
  CHECK(resolve(job).transport.streams == 0);  // auto: the link probe chooses
  with = job;
  with["COLLIE_STREAMS"] = "8";
  CHECK(resolve(with).transport.streams == 8);
  with["COLLIE_STREAMS"] = "auto";
  CHECK(resolve(with).transport.streams == 0);
  for (const char* wrong : {"0", "17", "many", "4x"}) {
    with["COLLIE_STREAMS"] = wrong;
    CHECK_THROWS_WITH(resolve(with), ContainsSubstring("COLLIE_STREAMS='" + std::string(wrong)) &&
                                         ContainsSubstring("auto, or 1 to 16"));
  }
}

TEST_CASE("COLLIE_TRACE names the trace directory, InitOptions::trace_dir overrides it", "[init]") {
  const std::map<std::string, std::string> job{
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  CHECK(resolve(job).trace_dir.empty());
  auto with = job;
  with["COLLIE_TRACE"] = "/tmp/traces";
  CHECK(resolve(with).trace_dir == "/tmp/traces");
  InitOptions options;
  options.trace_dir = "";  // off, whatever the environment says
  CHECK(resolve(with, options).trace_dir.empty());
  options.trace_dir = "elsewhere";
  CHECK(resolve(with, options).trace_dir == "elsewhere");
}

TEST_CASE("COLLIE_ASYNC_CALLS: how many async calls of a group run at once, checked, and "
          "InitOptions::async_calls overrides it",
          "[init]") {
  const std::map<std::string, std::string> job{
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  CHECK(resolve(job).async_calls == 2);
  auto with = job;
  with["COLLIE_ASYNC_CALLS"] = "1";
  CHECK(resolve(with).async_calls == 1);
  InitOptions options;
  options.async_calls = 4;
  CHECK(resolve(with, options).async_calls == 4);
  for (const char* bad : {"0", "17", "two", "-1"}) {
    with["COLLIE_ASYNC_CALLS"] = bad;
    CHECK_THROWS_WITH(resolve(with), ContainsSubstring("COLLIE_ASYNC_CALLS") &&
                                         ContainsSubstring("1 to 16"));
  }
  options.async_calls = 0;
  CHECK_THROWS_WITH(resolve(job, options), ContainsSubstring("InitOptions::async_calls"));
}
