// `collie launch`: start the ranks of a job on this node, like torchrun.
// This file: the command line, in collie's spelling and torchrun's
// (launch/torchrun_args.hpp puts torchrun's into collie's and resolves it); the
// launcher itself is launch/launcher.hpp.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "cpu_binding.hpp"
#include "launcher.hpp"
#include "torchrun_args.hpp"

namespace collie::cli {

void add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("launch", "Start the ranks of a job on this node, like torchrun");
  auto args = std::make_shared<LaunchArgs>();
  auto master_port = std::make_shared<int>(-1);
  auto node_rank = std::make_shared<int>(-1);
  cmd->add_option("-n,--nproc-per-node", args->nproc,
                  "Ranks to start on this node: a number, or cpu (one per processor this "
                  "launcher may use), gpu (one per CUDA device), auto (gpu where there is one, "
                  "else cpu)")
      ->capture_default_str();
  cmd->add_option("--nnodes", args->nnodes,
                  "Number of nodes in the job, or MIN:MAX for an elastic one (with c10d)")
      ->capture_default_str();
  cmd->add_option("--node-rank", *node_rank,
                  "This node's index, 0 to nnodes-1 (default 0; with --rdzv-backend c10d, the "
                  "order in which the nodes join)");
  cmd->add_option("--master-addr", args->master_addr, "Address of node 0, where the store runs")
      ->capture_default_str();
  cmd->add_option("--master-port", *master_port,
                  "Port of the store (default: a free port on one node, 29500 on several)");
  cmd->add_option("--rdzv-backend", args->rdzv_backend,
                  "static: nodes numbered by --node-rank; c10d: the node that has the endpoint "
                  "hosts the store, the others are numbered as they join; etcd (or etcd-v2): "
                  "the nodes meet in an etcd cluster and any node may be lost")
      ->capture_default_str();
  cmd->add_option("--rdzv-endpoint", args->rdzv_endpoint,
                  "HOST[:PORT] of the store, instead of --master-addr/--master-port (port "
                  "29400 for c10d); with etcd, its members HOST[:PORT],... (port 2379)");
  cmd->add_option("--rdzv-id", args->rdzv_id,
                  "The job's id: TORCHELASTIC_RUN_ID of its ranks; with etcd, required and new "
                  "for each job (its keys: /collie/launch/ID/)")
      ->capture_default_str();
  cmd->add_option("--rdzv-conf", args->rdzv_conf,
                  "KEY=VALUE,...: join_timeout (or timeout) as --join-timeout, is_host, "
                  "last_call_timeout; with etcd protocol (https, or http with --insecure), "
                  "cacert, cert, key; any other key is an error");
  cmd->add_flag("--standalone", args->standalone,
                "A job on this node alone, its store on a free port of loopback (the default "
                "on one node)");
  cmd->add_option("--port-file", args->port_file,
                  "Node 0: write the store's port to this file once it listens");
  cmd->add_option("--max-restarts", args->max_restarts,
                  "Restart every rank this many times after a failure (with --keep-going: "
                  "start this many replacements in all, each in a lost rank's place)")
      ->capture_default_str();
  cmd->add_option("--monitor-interval", args->monitor_interval_s,
                  "Seconds between looks at the ranks, at most (the launcher also wakes the "
                  "moment one exits or prints)")
      ->capture_default_str();
  cmd->add_option("--start-method", args->start_method,
                  "torchrun's spawn, fork or forkserver: not needed (each rank is a new "
                  "process); accepted, and said so");
  cmd->add_option("--role", args->role, "The ranks' ROLE_NAME")->capture_default_str();
  cmd->add_flag("-m,--module", args->module,
                "The program is a Python module: run it as python -m MODULE");
  cmd->add_flag("--no-python", args->no_python,
                "Run the program as it is, even a .py script, without Python");
  cmd->add_flag("--run-path", args->run_path,
                "The program is a Python script, whatever its name: run it with Python");
  cmd->add_option("-t,--tee", args->tee,
                  "Also write these streams to LOG_DIR/attempt-A/rank-R.log: 1 stdout, 2 "
                  "stderr, 3 both (alone: 3), or LOCAL_RANK:N,...");
  cmd->add_option("-r,--redirects", args->redirects,
                  "Write these streams to the log file only, not to the console (as --tee)");
  cmd->add_option("--local-ranks-filter", args->local_ranks_filter,
                  "Show only these local ranks' output on the console: 0,1,...");
  cmd->add_option("--log-dir", args->log_dir, "Where --tee and --redirects write")
      ->capture_default_str();
  cmd->add_option("--local-addr", args->local_addr,
                  "This node's address for the job: its ranks use the interface that has it");
  cmd->add_option("--stop-timeout", args->stop_timeout_s,
                  "Seconds ranks get after SIGTERM/SIGINT before SIGKILL")
      ->capture_default_str();
  cmd->add_option("--node-timeout", args->node_timeout_s,
                  "Several nodes: seconds without a heartbeat from another node's launcher "
                  "before the job is stopped as failed")
      ->capture_default_str();
  cmd->add_option("--join-timeout", args->join_timeout_s,
                  "Several nodes: seconds to wait for the other nodes to join (and for the "
                  "store's node to start) before the job is stopped as failed")
      ->capture_default_str();
  cmd->add_option("--token-file", args->token_file,
                  "The job's secret, the same file on every node (default: "
                  "$COLLIE_STORE_TOKEN, $COLLIE_STORE_TOKEN_FILE, or on one node a random "
                  "secret for this job)");
  cmd->add_flag("--insecure", args->insecure,
                "Several nodes without a secret: anyone who can reach the store's port may "
                "join or stop the job (a warning says so); with etcd, also etcd over plain "
                "HTTP without certificates");
  cmd->add_flag("--master-worker", args->master_worker,
                "Rank 0 is the master of a master-worker program (collie/master_worker.hpp): "
                "a worker (another rank) that fails is the master's to handle, and the "
                "others go on; the job ends when rank 0 and the workers it shut down end, "
                "with rank 0's exit code");
  cmd->add_flag("--keep-going", args->keep_going,
                "A rank that fails stops no one: the others go on (a program that calls "
                "ProcessGroup::shrink() when a call fails, docs/failures.md); the job ends "
                "when every rank has ended, successful if one of them exited 0, and the "
                "summary names the ranks lost; with --max-restarts, a replacement started "
                "with COLLIE_JOIN=1 joins them at their next ProcessGroup::expand()")
      ->excludes("--master-worker");
  add_bind_option(*cmd, args->bind, "the ranks");
  cmd->add_option("command", args->command,
                  "The program and its arguments (after -- or after the options; a .py "
                  "script runs with a Python that has torch: $PYTHON_EXEC, else python3 on "
                  "PATH or /usr/bin/python3)")
      ->required();
  cmd->footer(
      "torchrun's command line works as it is: its flags with underscores or dashes\n"
      "(--nproc_per_node=2), their PET_<FLAG> variables (PET_NPROC_PER_NODE, ...) where the\n"
      "command line does not give them, and the program after the options, its own\n"
      "options its own: collie launch --nproc_per_node=2 main.py --epochs 3.\n"
      "Every rank gets torchrun's variables: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK,\n"
      "ROLE_WORLD_SIZE, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,\n"
      "TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_ERROR_FILE (a rank that fails with torch's\n"
      "@record writes its exception there, and the summary quotes it), OMP_NUM_THREADS=1\n"
      "when unset and more than one rank runs here, and COLLIE_RESTART_COUNT and\n"
      "COLLIE_STORE_HOSTED=1 (this launcher hosts the store); ranks bound by --bind also\n"
      "get COLLIE_HOST_CPUS, the processors they share.\n"
      "torch programs: the store also serves torch's TCPStore clients, on loopback to this\n"
      "user's processes only (on several nodes, the ranks get MASTER_ADDR=127.0.0.1: the\n"
      "store, or on the other nodes the launcher's relay, which proves the job's secret for\n"
      "them), and the ranks get TORCHELASTIC_USE_AGENT_STORE=True, so torch.distributed's\n"
      "env:// meets there, and PYTHONPATH with this build's collie_torch first (docs/torch.md).\n"
      "The job has a secret that its store and every rank's handshake check: a random one\n"
      "on one node (COLLIE_STORE_TOKEN in the ranks' environment, never on a command line);\n"
      "several nodes share one with --token-file (or refuse to start without --insecure).\n"
      "Output lines are prefixed with '[rank R] '. When a rank fails, the others get SIGTERM\n"
      "and SIGCONT (then SIGKILL after --stop-timeout), a summary names the rank the failed\n"
      "ranks blame (the one they lost or waited for; else the rank that failed first), and\n"
      "the exit code is the first failed rank's (128+N for signal N). SIGINT/SIGTERM are\n"
      "forwarded.\n"
      "Several nodes: run the same command on each with --nnodes K --node-rank R\n"
      "--master-addr NODE0 --master-port P (or --rdzv-backend c10d --rdzv-endpoint\n"
      "NODE0:P, every node the same line); a failure on any node stops (or restarts) all.\n"
      "Elastic: --nnodes MIN:MAX with c10d: the nodes meet again for each attempt, without\n"
      "a node that left, and with one that came (docs/launching.md). With etcd\n"
      "(--rdzv-backend etcd --rdzv-endpoint M1,M2,M3 --rdzv-id ID, TLS certificates in\n"
      "--rdzv-conf) no node hosts the job for good: each round's node 0 hosts its ranks'\n"
      "store, and any node may be lost.");
  cmd->callback([args, master_port, node_rank] {
    if (*master_port >= 0) args->master_port = *master_port;
    if (*node_rank != -1) args->node_rank = *node_rank;
    resolve_torchrun(*args);
    throw Exit{run_launcher(*args)};
  });
}

}  // namespace collie::cli
