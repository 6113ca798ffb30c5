// The elastic job whose first round's node 0 is lost, shared by the c10d
// and etcd tests (cli_elastic_test.cpp, cli_etcd_test.cpp): a torch program
// that checkpoints every step, the launchers' "this is node 0" line, the
// time from the death to the survivors' first step, and the checkpoint's
// last word.
#pragma once

#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/catch.hpp"
#include "support/eventually.hpp"
#include "support/read_file.hpp"
#include "support/subprocess.hpp"

namespace collie::test {

// The start of a torch program that resumes from the checkpoint argv[1]
// (n = int(argv[2]) is the caller's): `state` holds the step, the sum and
// the world sizes it ran on, in turn; step_once(pause) does the next step,
// summing the step numbers through all_reduce (each rank gives
// step * (rank + 1)), and rank 0 writes the checkpoint. A step lost or done
// twice across a resume, or a wrong sum, leaves `sum` off N(N+1)/2.
inline const std::string kCheckpointResume = R"(import json, os, sys, time, torch
import torch.distributed as dist
ckpt, n = sys.argv[1], int(sys.argv[2])
dist.init_process_group("collie")
rank, world = dist.get_rank(), dist.get_world_size()
state = {"step": 0, "sum": 0, "worlds": []}
if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
if not state["worlds"] or state["worlds"][-1] != world:
    state["worlds"].append(world)
print(f"rank {rank} of {world}: from step {state['step']}", flush=True)

def step_once(pause):
    step = state["step"] + 1
    t = torch.full((8,), float(step * (rank + 1)), dtype=torch.float64)
    dist.all_reduce(t)
    state["sum"] += int(t[0].item()) * 2 // (world * (world + 1))
    state["step"] = step
    if rank == 0:
        with open(ckpt + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(pause)

)";
// Its end, once the steps are done.
inline const std::string kCheckpointEnd = R"(dist.barrier()
print(f"rank {rank}: finished at step {state['step']}", flush=True)
dist.destroy_process_group()
)";

// kCheckpointResume's program that ends after n steps in all, on whatever
// world it has.
inline const std::string kCheckpointedSteps = kCheckpointResume + R"(while state["step"] < n:
    step_once(0.1)
)" + kCheckpointEnd;

using Nodes = std::vector<std::unique_ptr<Subprocess>>;

// How round 0's node 0 is lost, given its index in `nodes`.
enum class Loss {
  kKilled,  // its launcher is killed (SIGKILL), its ranks with it
  kCut,     // its host's link goes silent (`cut`, given that index): nothing
            // more from it or to it, without an error on either side
};

// The launchers of three nodes (2 ranks each) run kCheckpointedSteps to
// `steps`; once all six ranks did a few steps, round 0's node 0 (the
// launcher that says "this is node 0") is lost as `loss` says, and `also`
// runs at that moment, given that node's index in `nodes`. The others go on
// as 4 ranks and finish. The seconds from the loss to their first step (the
// resume) are checked against a bound for a busy machine (the issue's bar:
// 10 s on a quiet one), shown with -s, and returned. A cut node's launcher
// is killed once the others have finished.
inline double lose_first_node(Nodes& nodes, const std::string& ckpt, int steps,
                              const std::function<void(std::size_t)>& also = {},
                              Loss loss = Loss::kKilled,
                              const std::function<bool(std::size_t)>& cut = {}) {
  using namespace std::chrono_literals;
  auto stop_all = [&] {
    for (auto& n : nodes)
      if (n) n->signal(SIGTERM);
  };
  std::size_t first = nodes.size();
  REQUIRE(eventually(
      [&] {
        for (std::size_t i = 0; i < nodes.size(); ++i) {
          if (nodes[i]->wait_for_stderr("this is node 0", 10ms)) {
            first = i;
            return true;
          }
        }
        return false;
      },
      180s));
  // Every rank of the three nodes runs, and a few steps are done.
  REQUIRE(eventually(
      [&] {
        const auto state = read_file(ckpt);
        return state.find("\"worlds\": [6]") != std::string::npos &&
               state.find("\"step\": 3,") != std::string::npos;
      },
      180s));
  const auto death = std::chrono::steady_clock::now();
  if (loss == Loss::kKilled) {
    nodes[first]->signal(SIGKILL);
  } else {
    REQUIRE(cut);
    REQUIRE(cut(first));
  }
  if (also) also(first);
  if (loss == Loss::kKilled) nodes[first]->wait(30s);
  // The two others go on as 4 ranks from the checkpoint: the next round
  // waits on nothing of the dead node (it did, 300 s, on a relay still
  // trying to reach its store).
  REQUIRE(eventually(
      [&] { return read_file(ckpt).find("\"worlds\": [6, 4]") != std::string::npos; }, 180s));
  const double resumed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - death).count();
  UNSCOPED_INFO("the 4 ranks' first step came " << resumed << " s after node 0 was "
                                                 << (loss == Loss::kKilled ? "killed" : "cut off"));
  CHECK(resumed < 60.0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (i == first) continue;
    const auto r = nodes[i]->wait(300s);
    if (!r) stop_all();
    REQUIRE(r);
    INFO("node " << i << " stdout:\n" << r->out << "\nstderr:\n" << r->err);
    CHECK(r->exit_code == 0);
    CHECK_THAT(r->err, ContainsSubstring("round 0: 3 nodes") && ContainsSubstring("2 nodes"));
  }
  if (loss == Loss::kCut) {
    nodes[first]->signal(SIGKILL);
    nodes[first]->wait(30s);
  }
  const auto state = read_file(ckpt);
  INFO(state);
  CHECK_THAT(state, ContainsSubstring("\"worlds\": [6, 4]"));
  CHECK_THAT(state, ContainsSubstring(fmt::format("\"step\": {},", steps)));
  CHECK_THAT(state, ContainsSubstring(fmt::format("\"sum\": {}", steps * (steps + 1) / 2)));
  return resumed;
}

}  // namespace collie::test
