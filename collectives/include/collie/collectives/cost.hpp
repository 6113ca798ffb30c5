// The alpha-beta cost model (Hockney; as used by Thakur, Rabenseifner &
// Gropp 2005 to choose MPICH's algorithms), applied to the schedules
// themselves rather than to a formula per algorithm. estimate() runs every
// rank's schedule on a clock: a message sent at time t arrives at
//   t + alpha + beta * (bytes the sender has put on its link before it, and it)
// a step starts when the previous one ended and ends when its sends are on
// the wire and its receives have arrived (the receiving link carries them
// one after another) and been reduced (gamma per byte), plus delta per
// message posted. The collective's time is the last rank's finish: a chain's
// pieces flow down it, a tree's rounds wait for their parents. For the ring
// this gives the textbook 2 (n - 1) (alpha + N / n beta) + (n - 1) / n N
// gamma; for a pipelined chain (pieces + n - 2) (alpha + N / pieces beta);
// for a binomial tree ceil(log2 n) (alpha + N beta).
//
// A crowded host (more ranks than cores) adds a second bound to all_reduce,
// and across hosts to all_gather and reduce_scatter (crowded_bound(): the
// collectives it is fitted to; the others keep the first alone): its cores
// must do all the work of the ranks on it, so the time is at least the
// average rank's work times `crowding` (ranks per core). A rank's work is
// work_per_segment for each segment it sends or receives (the executor
// cuts every message into segments of segment_bytes; on a shared core
// a message's latency is system calls and wake-ups, CPU time),
// work_per_byte for each byte it sends or receives (the copies into and
// out of the kernel), and gamma for each byte it reduces. This is what
// makes a tree, which keeps half the ranks idle, beat the all-ranks-busy
// algorithms at small sizes on 4 ranks on 2 cores. On several hosts the
// work is not a bound but adds to the clock: the links wait for the cores.
//
// Crowded over TCP (flow_bytes > 0), two more things decide between
// algorithms that do the same work. The clock replays the executor piece
// by piece instead of step by step, so steps overlap where the executor
// overlaps them (a tree's do). And a rank's work adds work_per_warm_byte
// or work_per_cold_byte for each byte it sends or receives that it last
// touched beyond its share of its core's cache or of the host's: the
// ring and halving-doubling come back to each byte after the whole buffer,
// the tree's overlapped steps while it is still in cache
// (docs/algorithms.md, "A crowded machine").
#pragma once

#include <memory>

#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/hosts.hpp>

namespace collie::collectives {

// The defaults are this project's measurements on its 2-core loopback
// machine (docs/PERFORMANCE.md): alpha and beta from `collie bench p2p`
// (4.5 us one-way, 3.6 GB/s), gamma from `collie bench kernels` (float32 sum:
// ~25 GB/s of bytes reduced), delta from the per-message cost of posting.
struct CostModel {
  double alpha = 5e-6;        // seconds: latency of one message
  double beta = 1 / 3.5e9;    // seconds per byte on a link
  double gamma = 1 / 25.0e9;  // seconds per byte reduced
  double delta = 1e-6;        // seconds of overhead per message posted
  // Ranks per core on rank 0's host (1 or less: every rank has a core of
  // its own, and the crowded-host bound above is off). The runtime counts
  // it at init; `collie explain --cores` sets it.
  double crowding = 1;
  // Fitted to `collie bench all_reduce --algo all` on 4 ranks on this
  // project's 2-core machine (docs/PERFORMANCE.md; with the terms below,
  // 18 launches in three sweeps, tools/collie/bench/fit_cost.cpp): CPU seconds per
  // segment, and per byte, sent or received.
  double work_per_segment = 5e-6;
  double work_per_byte = 0.125e-9;
  // The crowded bound's cache terms (above): CPU seconds per byte a rank
  // sends or receives that it last touched more than its share of the
  // core's cache ago (core_cache_bytes / crowding), and more than its share
  // of the host's (cache_bytes / ranks) ago. The runtime reads both sizes
  // from the kernel (sysfs); the defaults are this project's machine's
  // (AMD EPYC, 1 MiB L2 per core, 32 MiB L3).
  double work_per_warm_byte = 0.03e-9;
  double work_per_cold_byte = 0.1e-9;
  double core_cache_bytes = 1 << 20;
  double cache_bytes = 32 << 20;
  // How the crowded clock follows the bytes: in pieces of flow_bytes (0
  // keeps the step-by-step clock), a sender at most window_bytes ahead of
  // its receiver (what a connection's socket buffers hold). The executor
  // forwards whole segments, but the transport hands a receive its bytes as
  // they arrive (64 KiB at a time), and steps overlap at a finer grain than
  // a segment; the piece is fitted with the constants above (64 KiB to a
  // segment tried; 128 KiB best).
  std::size_t flow_bytes = 1 << 17;
  double window_bytes = 1 << 20;
  std::size_t segment_bytes = 1 << 18;  // COLLIE_SEGMENT_BYTES (auto_algorithm sets it)
  // Between hosts (a shape with hosts: hosts.hpp), a message crosses the
  // sending host's link and the receiving host's, each shared by every
  // rank of its host and carrying one message at a time: latency
  // host_alpha, host_beta seconds per byte (the runtime's: measured at
  // init, or COLLIE_HOST_LINK; 10 Gbit/s and 30 us where neither says).
  // Within a host the terms above hold.
  double host_alpha = 30e-6;
  double host_beta = 8 / 10e9;
  // A link shaped by a token bucket (tc's tbf, a cloud's burst allowance)
  // lets host_burst_bytes by at once (at beta) before it keeps to its rate;
  // the bucket fills again at the rate. The replay starts each call with
  // it full, and the call takes at least the bytes its busiest host link
  // carries at the rate (back to back, calls find the bucket as full as
  // the rate filled it). 0: a link without one. The closed forms (Auto at
  // scale) leave it out. The runtime leaves it 0 (docs/algorithms.md, "A
  // link with a token bucket", says why); `collie explain
  // --host-burst-kib` sets it.
  double host_burst_bytes = 0;
  // Crowded, a message between hosts is more of the cores' work than one
  // within a host: CPU seconds it adds to the rank that sends it and to the
  // one that receives it (the kernel's TCP path, out through one host's
  // network stack and in through the other's). Where hosts share a
  // machine's cores (namespaces, containers) that path runs on the same
  // crowded cores as the ranks. Fitted on emulated hosts sharing 2 cores
  // (tools/cluster.sh: 4 x 2, 2 x 4 and 8 x 1 at 1 Gbit/s, the link
  // measured at init; tools/peers/cluster_model.py gives Auto's pick on
  // the model beside the measured times): 25 us (the fit of an earlier
  // transport, whose 8 B tree took 177-226 us where it takes 46-82 now) put
  // Auto 1.2-2.1x off the fastest at 32 KiB; 8 us, within 1.08x on 4 x 2
  // and 2 x 4 from 4 KiB (5 and 12 us: worse on 8 x 1 at 4 and 32 KiB).
  double host_work_per_message = 8e-6;
};

// The model for a group whose every member is reached through shared
// memory (all on one host; docs/PERFORMANCE.md, "Auto's picks"). A message
// there costs 0.35 us one way where every rank has a core; where ranks
// outnumber cores it costs a switch to the rank that sends it, measured as
// 5 us a step (recursive doubling's 2 steps on 4
// ranks on 2 cores took 11.8 us, a tree's 4 steps 19.8), and a rank's work
// per message is what the runtime does, not system calls. Links move
// 6 GB/s (a copy in, a copy out, by two cores at once); gamma is the
// same kernels'.
CostModel shared_memory_cost_model(double crowding);

// Whether the crowded bound applies to `c`: on crowded cores, to all_reduce;
// across hosts (`hosts`) also to all_gather and reduce_scatter. On one
// host those two keep the replay alone: there the bound's ties (the same
// bytes in the same segments) would go to the ring where recursive halving
// is faster. Across hosts it prices their many small messages: without it
// Auto took two_level at 8-32 KiB on 4 x 2 at 1 Gbit/s, 1.24-1.66x the
// doublings (measured; tools/peers/cluster_model.py), with it the doublings.
bool crowded_bound(const CostModel& model, Collective c, bool hosts);

struct Cost {
  double seconds = 0;                      // the model's time: when the last rank finishes
  std::size_t steps = 0;                   // the most steps any rank takes
  std::size_t messages = 0;                // the most messages any rank sends
  std::size_t bytes = 0;                   // the most bytes any rank sends
  std::vector<std::size_t> rank_messages;  // [rank] messages it sends
  std::vector<std::size_t> rank_bytes;     // [rank] bytes it sends
};

// What one rank's schedule sends: messages, and bytes (Cost's columns).
struct Sends {
  std::size_t messages = 0;
  std::size_t bytes = 0;
};
Sends sends_of(const Schedule& schedule, std::size_t element_bytes);

// Every rank of the collective, on the model's clock. Throws collie::Error
// as simulate() does on a schedule that cannot run.
Cost estimate(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
              const CostModel& model);
// The same for several models, the schedules built once (`collie explain
// --compare` prices each algorithm whole, by latency alone and by bandwidth).
std::vector<Cost> estimate(Collective c, Algorithm a, const Shape& shape,
                           std::size_t element_bytes, const std::vector<CostModel>& models);

// Auto at scale. The replay runs every rank's schedule: a ring's or
// two_level's n ranks take about n steps each (n^2 in all: 16 million at
// 4,096 ranks; the table's rows that replay slowly), the others O(log n)
// each. Where the replay would pass kReplaySteps steps, Auto prices those
// in closed form instead (the rows' closed forms,
// formula_seconds(), cost_formula.cpp: the step clock's hops, summed along
// the ring or over each phase, and the crowded bound from each rank's
// average work; not the crowded TCP clock's overlap or cache terms), so a
// first choice costs O(n log n) at most; `collie explain` always replays.
// Where both run the two agree (tested: test/collectives/cost_formula_test.cpp).
inline constexpr std::size_t kReplaySteps = std::size_t{1} << 16;
// (all_to_all's pairwise and two_level replays are n^2 too, without a
// closed form: Auto does not price them there, and keeps pairwise.)
bool replays_quickly(Collective c, Algorithm a, const Shape& shape);
// Whether formula_seconds() covers c's a.
bool has_closed_form(Collective c, Algorithm a);
// The model's time for a ring or two_level schedule without running it;
// throws collie::Error for the algorithms it does not cover.
double formula_seconds(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
                       const CostModel& model);

// The pipeline pieces of a chain for a buffer of `bytes` cut into segments
// of `segment_bytes` (COLLIE_SEGMENT_BYTES): 1 to 1024.
int pieces_for(std::size_t bytes, std::size_t segment_bytes);

// The power of two at or above `bytes` (1 for 0): Auto costs a call at its
// size's bucket, so that every rank picks alike whatever size it saw first.
std::size_t size_bucket(std::size_t bytes);

// The model a call of collective `c` is priced with: broadcast's and
// reduce's ranks do not wait for one another (a broadcast's root returns
// once it has sent, a reduce's leaves once they have), so calls in a row
// overlap along the chain or tree, and what bounds each between hosts is
// the bytes its busiest host link carries, not the hops' latencies one
// after another: their host links are priced without latency and as a
// bucket without bottom (host_alpha 0, host_burst_bytes infinite).
// Measured on 4 emulated hosts of 2 ranks at 1 Gbit/s, 2,000 calls in a
// row: the chain 69 us at 8 KiB and 1.09 ms at 128 KiB, the tree 137 and
// 2.23, as priced so (65, 1.05; 131, 2.10). The other collectives end
// together on every rank: `model` as it is.
CostModel priced_as_called(Collective c, const CostModel& model);

// What Auto runs: of algorithms_for(c), the one estimate() says is fastest
// for a buffer of size_bucket(count * element_bytes) bytes on `world`
// ranks, on `hosts` if known, with priced_as_called(c, model); ties go to
// the classic (first) one. two_level is a candidate only on several hosts
// with more than one rank on one.
Algorithm auto_algorithm(Collective c, int world, std::size_t count, std::size_t element_bytes,
                         std::size_t segment_bytes, const CostModel& model,
                         std::shared_ptr<const Hosts> hosts = nullptr);

}  // namespace collie::collectives
