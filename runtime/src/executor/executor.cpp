// execute_schedule(): runs a call's steps (host steps as one dataflow,
// device steps staged) and, when it fails, settles what is in flight and
// tells the peers, in the order that lets every rank tell the same story.
#include "executor.hpp"

#include <collie/error.hpp>

#include "call_run.hpp"

namespace collie {

namespace {

bool touches_device(const CallRun& run, const collectives::Step& step) {
  if (run.engine == nullptr) return false;
  for (const auto* list : {&step.sends, &step.recvs})
    for (const auto& t : *list)
      if (run.device_of(t.range) >= 0) return true;
  return false;
}

// A schedule on host memory (and regions staged whole: the plan's Host and
// Whole) runs as one flow; one with regions the plan stages by segments,
// step by step: each host step a flow of its own, each step that touches
// such a region staged.
void run_steps(CallRun& run, const Plan& plan) {
  const auto& schedule = plan.schedule;
  bool device = false;
  for (const auto& step : schedule.steps)
    device = device || touches_device(run, step);
  if (!device) {
    run_flow(run, schedule, 0, schedule.steps.size(), &plan.flow);
    return;
  }
  for (std::size_t i = 0; i < schedule.steps.size(); ++i) {
    const auto& step = schedule.steps[i];
    if (touches_device(run, step))
      run_staged(run, step, static_cast<std::uint32_t>(i));
    else
      run_flow(run, schedule, i, i + 1);
  }
}

}  // namespace

void execute_schedule(detail::Group& g, const Call& call, const Plan& plan,
                      std::span<const Region> regions, std::exception_ptr failed_first) {
  const auto& schedule = plan.schedule;
  CallRun run(g, call, regions);
  auto& diagnosis = run.diagnosis;
  // This thread drives the sockets from here to the end: the transport's
  // own thread stays out of the way (no hand-off between threads).
  const auto claim = run.transport.claim_progress();
  try {
    if (failed_first) std::rethrow_exception(failed_first);
    diagnosis.check_stray();
    run_steps(run, plan);
    diagnosis.check_stray();
  } catch (const MismatchError& e) {
    // Everyone should hear the same diagnosis: it goes to the store first
    // (the first one found stays), then the rank whose message did not
    // match gets this rank's call (so it sees the mismatch itself), and the
    // others a notice that sends them to the store's diagnosis: they may
    // wait for this rank, or for one that waits for it.
    if (!diagnosis.second_hand) diagnosis.save_mismatch(e.what());
    run.abandon();
    diagnosis.tell_mismatch(schedule);
    throw;
  } catch (const ConnectionError& e) {
    diagnosis.blame(e.what());  // first: the launcher may stop this rank any moment now
    run.abandon();
    diagnosis.tell_peers(schedule);
    throw;
  } catch (const TimeoutError& e) {
    // Its own timeout (or one another rank reported): the peers stop too,
    // told whom this rank waited for. The blame and the report first: the
    // launcher may stop this rank any moment now.
    const bool own = diagnosis.failed_world_rank < 0;
    if (own) {
      diagnosis.failed_world_rank =
          run.stall.culprit() >= 0 ? run.stall.culprit() : run.peer(g.rank);
      diagnosis.failed_reason = FailureReason::TimedOut;
    }
    diagnosis.blame(e.what());
    if (own) diagnosis.save_stall_report();
    run.abandon();
    diagnosis.tell_peers(schedule, true);
    throw;
  } catch (const InterruptedError&) {
    // This rank was asked to stop: its peers hear why it leaves.
    run.abandon();
    diagnosis.failed_world_rank = run.peer(g.rank);
    diagnosis.failed_reason = FailureReason::Interrupted;
    diagnosis.tell_peers(schedule);
    throw;
  } catch (const device::DeviceError& e) {
    // This rank's device failed: its peers fail too, as for a dead rank.
    diagnosis.failed_world_rank = run.peer(g.rank);
    diagnosis.failed_reason = FailureReason::DeviceError;
    diagnosis.blame(e.what());
    run.abandon();
    diagnosis.tell_peers(schedule);
    throw;
  }
}

}  // namespace collie
