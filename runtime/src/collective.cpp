// The collectives' entry: check the arguments, choose the algorithm, and
// run the call, blocking or on the group's async thread. Running it: build
// the schedule, lay the buffers out (buffer_layout.hpp), execute it over the
// transport (executor.hpp), trace it, and name the call in any error.
#include <algorithm>
#include <bit>
#include <optional>

#include <fmt/format.h>

#include <collie/collectives/selection.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/transport/board.hpp>

#include "watch/trace.hpp"
#include "executor/board_call.hpp"
#include "executor/buffer_layout.hpp"
#include "group/call.hpp"
#include "executor/chunked_call.hpp"
#include "executor/executor.hpp"
#include "group/group.hpp"
#include "work.hpp"

namespace collie {

namespace {

// Lays the call's buffers out as the schedule expects, runs it, and puts the
// result where the caller wants it.
// Returns the number of steps of its schedule. `failed_first`: see
// execute_schedule().
std::size_t run_schedule(detail::Group& g, const Call& call,
                         std::exception_ptr failed_first = nullptr) {
  const int n = static_cast<int>(g.members.size());
  const collectives::Shape shape{
      g.rank, n, call.count, call.root,
      collectives::pieces_for(call.count * dtype_size(call.dtype), g.world->config.segment_bytes),
      g.hosts};
  const std::size_t es = dtype_size(call.dtype);
  const auto plan = g.plans.get(
      PlanCache::Key{call.collective, call.algorithm, call.count, es, call.root, shape.pieces},
      [&] {
        auto p = std::make_shared<Plan>();
        p->schedule = collectives::make_schedule(call.collective, call.algorithm, shape);
        flow::Graph built;  // (with build()'s working space, which the plan leaves)
        flow::build(p->schedule, 0, p->schedule.steps.size(),
                    flow::segment_elements(g.world->config.segment_bytes, es), g.members.size(),
                    built);
        flow::copy_built(built, p->flow);
        p->input_pieces = input_pieces(p->schedule, call.collective, shape);
        return std::shared_ptr<const Plan>(std::move(p));
      });
  BufferLayout layout(call, *plan, shape, g.world->config.segment_bytes);
  execute_schedule(g, call, *plan, layout.regions(), std::move(failed_first));
  layout.finish();
  return plan->schedule.steps.size();
}

void execute(detail::Group& g, const Call& call) {
  Tracer* const trace = g.world->tracer.get();
  const auto begin = trace != nullptr ? Tracer::now() : Tracer::Clock::time_point{};
  std::size_t steps = 0;  // (none on the board)
  if (call.board >= 0) {
    run_on_board(g, call);
  } else if (call.staging.in_chunks()) {
    run_in_chunks(call, [&](const Call& chunk, std::exception_ptr failed) {
      steps = run_schedule(g, chunk, std::move(failed));
    });
  } else {
    steps = run_schedule(g, call);
  }
  if (trace != nullptr) {
    trace->collective(begin, Tracer::now(),
                      Tracer::CallInfo{call.collective, call.dtype, call.op, call.algorithm,
                                       call.root, call.count, call.sequence, g.trace_group,
                                       static_cast<std::uint32_t>(steps), call.board >= 0});
  }
}

// Runs a call, turning transport errors into ones that name the collective,
// and breaking the group when messages may be left in flight.
void execute_checked(detail::Group& g, const Call& call) {
  if (g.is_broken.load(std::memory_order_acquire)) {
    std::lock_guard lock(g.broken_mu);
    if (!g.broken.empty())
      throw Error(
          fmt::format("rank {}: {} on {}: the group is unusable since an earlier "
                      "collective failed: {}",
                      g.rank, describe(call.signature(), false), g.name, g.broken));
  }
  auto what = [&] {
    return fmt::format("{} #{} on {}", describe(call.signature(), false), call.sequence, g.name);
  };
  auto break_group = [&](const std::string& message) {
    std::lock_guard lock(g.broken_mu);
    if (g.broken.empty()) g.broken = message;
    g.is_broken.store(true, std::memory_order_release);
  };
  // The same error type, its message led by the call.
  auto named = [&]<class E>(const E& e) {
    const auto message = fmt::format("{}: {}", what(), e.what());
    break_group(message);
    return E(message);
  };
  // Where this rank is, for the stall inspector (stall.hpp): ended however
  // the call ends.
  const auto signed_as = fingerprint(call.signature());
  g.progress.begin(call.sequence, signed_as);
  struct End {
    Progress& p;
    std::uint64_t sequence, fingerprint;
    ~End() { p.end(sequence, fingerprint); }
  } end{g.progress, call.sequence, signed_as};
  try {
    execute(g, call);
  } catch (const device::DeviceError& e) {
    // Its peers were told (executor.cpp): the group is broken for all.
    const auto message = fmt::format("rank {}: {}: {}", g.rank, what(), e.what());
    break_group(message);
    throw device::DeviceError(message);
  } catch (const MismatchError& e) {  // names the calls already
    break_group(e.what());
    throw;
  } catch (const TimeoutError& e) {
    throw named(e);
  } catch (const InterruptedError& e) {
    throw named(e);
  } catch (const ProtocolError& e) {
    throw named(e);
  } catch (const ConnectionError& e) {
    throw named(e);
  }
}

// The algorithm COLLIE_ALGO's rules name for a call of `bytes` on `ranks`
// ranks, if one covers it and does not leave it to Auto.
std::optional<Algorithm> forced_by_config(const JobConfig& config, Collective c,
                                          std::size_t bytes, int ranks) {
  const auto* rule = collectives::rule_for(config.algorithms, c, bytes, ranks);
  if (!rule || rule->algorithm == Algorithm::Auto) return std::nullopt;
  return rule->algorithm;
}

// The group's selection map of c (COLLIE_ALGO's rules, Auto in every gap),
// logged at info level the first time the group chooses for c.
void show_selection_map(const detail::Group& g, Collective c, std::size_t es) {
  const auto bit = 1u << static_cast<unsigned>(c);
  if (g.maps_shown.load(std::memory_order_relaxed) & bit) return;
  if (g.maps_shown.fetch_or(bit) & bit) return;
  if (!log().should_log(spdlog::level::info)) return;
  const int n = static_cast<int>(g.members.size());
  const auto map = collectives::auto_selection_map(g.world->config.algorithms, c, n, es,
                                                   g.world->config.segment_bytes, g.cost_model,
                                                   g.hosts);
  // Where the group has a board, Auto's small all_reduces and its barriers
  // go there instead (board_call.hpp).
  const bool board = g.board_possible && (c == Collective::AllReduce || c == Collective::Barrier);
  log().info("rank {}: {} on {} ({} rank{}, {}-byte elements): {}{}", g.rank,
             collectives::collective_name(c), g.name, n, n == 1 ? "" : "s", es,
             collectives::describe(map, "COLLIE_ALGO"),
             !board ? ""
             : c == Collective::Barrier
                 ? "; on the group's board where Auto chooses"
                 : fmt::format("; up to {} where Auto chooses, on the group's board",
                               collectives::bytes_text(transport::Board::kBytes)));
}

// Auto's choices are kept by (collective, dtype size, size bucket).
std::uint64_t choice_key(Collective c, std::size_t es, std::size_t bytes) {
  const auto log = std::countr_zero(collectives::size_bucket(bytes));
  return (static_cast<std::uint64_t>(c) << 48) | (static_cast<std::uint64_t>(es) << 8) |
         static_cast<std::uint64_t>(log);
}

}  // namespace

namespace {

// The algorithm for a call, and whether Auto chose it (neither the caller
// nor a COLLIE_ALGO rule did): Auto's choices are kept per size bucket.
struct Choice {
  Algorithm algorithm = Algorithm::Auto;
  bool by_auto = false;
};
Choice choose(const detail::Group& g, Collective c, std::size_t es, std::size_t count) {
  const int n = static_cast<int>(g.members.size());
  show_selection_map(g, c, es);
  if (const auto forced = forced_by_config(g.world->config, c, count * es, n))
    return {*forced, false};
  const auto key = choice_key(c, es, count * es);
  if (const auto last = g.last_choice.load(std::memory_order_acquire); (last >> 8) == key)
    return {static_cast<Algorithm>(last & 0xff), true};
  std::lock_guard lock(g.choice_mu);
  if (auto it = g.choices.find(key); it != g.choices.end()) {
    g.last_choice.store(key << 8 | static_cast<std::uint64_t>(it->second),
                        std::memory_order_release);
    return {it->second, true};
  }
  const Algorithm best = collectives::auto_algorithm(c, n, count, es, g.world->config.segment_bytes,
                                                     g.cost_model, g.hosts);
  g.choices.emplace(key, best);
  g.last_choice.store(key << 8 | static_cast<std::uint64_t>(best), std::memory_order_release);
  return {best, true};
}

}  // namespace

Algorithm ProcessGroup::choose_algorithm(Collective c, DataType dtype, std::size_t count,
                                         int root) const {
  (void)root;  // every algorithm costs the same whichever rank is the root
  return choose(*impl_, c, dtype_size(dtype), count).algorithm;
}

bool ProcessGroup::uses_board(Collective c, DataType dtype, std::size_t count) const {
  const auto& g = *impl_;
  const auto bytes = count * dtype_size(dtype);
  return !forced_by_config(g.world->config, c, bytes, size()).has_value() &&
         board_takes(g, c, dtype, count);
}

std::size_t ProcessGroup::count_of(Collective c, std::size_t input, std::size_t output,
                                  int root) const {
  return collectives::count_of_buffers(c, size(), input, output, rank(), root);
}

void ProcessGroup::run_collective(Collective c, DataType dtype, const void* input, void* output,
                                  std::size_t count, ReduceOp op, int root,
                                  const CollectiveOptions& o) {
  start(c, dtype, input, output, count, op, root, o, Completion::Blocking);
}

Work ProcessGroup::run_collective_async(Collective c, DataType dtype, const void* input,
                                        void* output, std::size_t count, ReduceOp op, int root,
                                        const CollectiveOptions& o) {
  return start(c, dtype, input, output, count, op, root, o, Completion::Async);
}

Work ProcessGroup::start(Collective c, DataType dtype, const void* input, void* output,
                         std::size_t count, ReduceOp op, int root, const CollectiveOptions& o,
                         Completion when) {
  auto& g = *impl_;
  g.require_member(collectives::collective_name(c));
  const int n = size();
  if (collectives::reduces(c)) check_supported(dtype, op);
  if (collectives::has_root(c) && (root < 0 || root >= n)) {
    throw Error(fmt::format("rank {}: {}: root {} is not a rank of {} (ranks 0 to {})", rank(),
                            collectives::collective_name(c), root, g.name, n - 1));
  }
  Call call;
  call.collective = c;
  call.dtype = c == Collective::Barrier ? DataType::UInt8 : dtype;
  call.input = input;
  call.output = output;
  call.count = c == Collective::Barrier ? 1 : count;
  call.op = collectives::reduces(c) ? op : ReduceOp::Sum;
  if (c == Collective::Barrier) call.op = ReduceOp::BitwiseOr;
  call.root = collectives::has_root(c) ? root : 0;
  call.timeout = o.timeout.value_or(g.world->config.timeout);
  bool by_auto = false;  // neither the caller nor a COLLIE_ALGO rule chose
  if (o.algorithm != Algorithm::Auto) {
    if (!collectives::implements(c, o.algorithm)) {
      throw Error(fmt::format(
          "rank {}: {}", rank(),
          collectives::no_algorithm_message(c, collectives::algorithm_name(o.algorithm), false)));
    }
    call.algorithm = o.algorithm;
  } else {
    const auto choice = choose(g, c, dtype_size(call.dtype), call.count);
    call.algorithm = choice.algorithm;
    by_auto = choice.by_auto;
  }
  // Where the buffers are and how they are staged, for the bytes this
  // rank's call reads and writes.
  const std::size_t es = dtype_size(call.dtype);
  const auto ext = collectives::extents(c, n, call.count, rank(), call.root);
  const device::CallBuffers buffers{call.input, ext.input.value_or(0) * es, call.output,
                                    ext.output.value_or(0) * es};
  const auto& config = g.world->config;
  call.staging = device::plan_staging(
      *g.engines, o.memory, collectives::elementwise(c), buffers, o.cuda_stream,
      device::CallName{rank(), collectives::collective_name(c)}, call.timeout,
      device::StagingLimits{config.stage_whole_bytes, config.stage_chunk_bytes});
  if (goes_on_board(g, call, by_auto))
    call.board = static_cast<std::int64_t>(g.board_tickets.fetch_add(1));
  // (A call in chunks takes a number per chunk: chunked_call.hpp.)
  call.sequence = g.sequence.fetch_add(chunks_of(call));
  if (when == Completion::Blocking) {
    execute_checked(g, call);
    return Work();
  }
  // The runner is the group's own, and finishes its queue before the group
  // goes: a plain pointer (a shared one would let the group die on its own
  // thread).
  // The queue by the call's largest buffer, the root's, which every rank
  // reckons alike.
  const auto root_ext = collectives::extents(c, n, call.count, call.root, call.root);
  const std::size_t largest = std::max(root_ext.input.value_or(0), root_ext.output.value_or(0)) * es;
  return run_async(
      g.runner_for(largest),
      fmt::format("{} #{} on {}", describe(call.signature(), false), call.sequence, g.name),
      call.timeout, [impl = &g, call] { execute_checked(*impl, call); });
}

void ProcessGroup::barrier(const CollectiveOptions& o) {
  start(Collective::Barrier, DataType::UInt8, nullptr, nullptr, 1, ReduceOp::BitwiseOr, 0, o,
        Completion::Blocking);
}

Work ProcessGroup::barrier_async(const CollectiveOptions& o) {
  return start(Collective::Barrier, DataType::UInt8, nullptr, nullptr, 1, ReduceOp::BitwiseOr, 0, o,
               Completion::Async);
}

}  // namespace collie
