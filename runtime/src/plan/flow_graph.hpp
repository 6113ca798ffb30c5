// The dependency graph of host steps run as one dataflow: a pure function
// of a rank's schedule, read by the executor's run loop (flow_run.cpp) and
// tested on its own (test/runtime/flow_graph_test.cpp).
//
// Every copy, send and receive of the steps is an op on a range of the
// working buffer: a copy is one op, a send or receive one op per segment. In
// schedule order (step by step; in a step its copies, then its sends, then
// its receives), an op waits only for the earlier ops that touch its range:
// what it reads, for their last write; what it writes, for the last write
// and every read since. Sends to a peer are posted in schedule order, and so
// are receives from a peer (the transport matches them in that order): each
// op blocks the next in its line until it is posted. So a segment is
// forwarded as soon as it is reduced, and a step's receives are posted while
// the step before still runs wherever they touch nothing it touches. Every
// op starts no later than it would if each step waited for the one before,
// so what the schedules' rules make deadlock-free stays so.
//
// Which ops meet the buffer's initial contents: a send or copy reading a
// range no earlier op wrote, a receive that reduces into one. An
// out-of-place call's working buffer need not be a copy of the input made
// before the first step: where every op's range is either wholly written
// before or wholly not (Graph::initial_exact), those ops read the input in
// place (a reducing receive combines it with what arrives, writing the
// working copy), and only what no op writes (Graph::unwritten) is copied
// first (buffer_layout.hpp). So the first sends leave at once, and the
// copy is made piece by piece as the data arrives, while it is in cache.
//
// A step whose receives land where its sends read (recursive doubling)
// sends from a snapshot, taken as each send is posted; its receives wait
// for all its sends to be posted (StepOps::unposted_sends), not for the sends
// to finish. The snapshot is a second address space after the buffer's
// elements ([buffer_count, buffer_count + snapshot_count)), so the next such
// step reuses it only once the sends reading it are done.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <collie/collectives/schedule.hpp>

namespace collie::flow {

struct Op {
  enum Kind : std::uint8_t { Copy, Send, Recv };
  Kind kind = Send;
  bool reduce = false;    // a receive that reduces
  bool snapshot = false;  // a send from the snapshot
  bool initial = false;   // meets the initial contents (above): a read of, or a reduce into, a range no earlier op wrote
  std::uint32_t step = 0;
  int peer = -1;                 // group rank (none for a copy)
  collectives::Range range;      // what it sends, receives, or copies into
  collectives::Range from;       // a copy's source
  std::size_t snap_at = 0;       // a snapshot send: its element offset in the snapshot
  std::uint32_t blockers = 0;    // earlier ops not done, and the op before in line not posted
  std::uint32_t first_edge = 0;  // its dependents: Graph::edges[first_edge, first_edge + edges)
  std::uint32_t edges = 0;
  std::int64_t next_in_line = -1;  // the next op with the same peer and direction
};

struct StepOps {
  std::uint32_t undone = 0;          // ops not done
  std::uint32_t unposted_sends = 0;  // a snapshot step: sends not yet posted
  std::uint32_t first_recv = 0, end = 0;
  bool snapshot = false;
};

// How earlier accesses are found. Pairwise: every earlier access that
// overlaps and conflicts (a write on either side) is a dependency: cheap for
// a few ops (small messages). Cells: who last wrote, and who read since,
// each element (cells [key, next key) of an interval map), so that each op
// meets only its nearest predecessors: for many. Both give the same order
// (the same transitive closure); Auto picks by the number of ops.
enum class Strategy { Auto, Pairwise, Cells };
inline constexpr std::size_t kPairwiseOps = 64;  // Auto: pairwise up to this many ops

// The graph, and build()'s working space: kept between calls by its owner
// (a thread runs one collective at a time), so no call allocates once the
// vectors have grown.
struct Graph {
  std::vector<Op> ops;
  std::vector<StepOps> steps;       // steps[s - first]
  std::vector<std::uint32_t> edges;  // ops[i]'s dependents: edges[first_edge, +edges)
  std::vector<std::uint32_t> ready;  // ops with no blockers, in order
  std::size_t snapshot_count = 0;    // elements of snapshot space the steps need
  // Every op's range wholly written before it or wholly not (above).
  bool initial_exact = true;
  // The ranges of [0, buffer_count) that no op writes, in order.
  std::vector<collectives::Range> unwritten;

  // build()'s working space.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;  // (before, after)
  std::vector<std::int64_t> seen;
  std::vector<std::int64_t> last_send, last_recv;
  std::vector<std::uint32_t> count;
  struct Access {
    std::uint32_t op;
    bool writes;
    std::size_t begin, end;
  };
  std::vector<Access> accesses;
  std::map<std::size_t, std::size_t> written;  // begin -> end, merged
};

// A segment of COLLIE_SEGMENT_BYTES in elements of `element_bytes` (at
// least 1): what build() cuts sends and receives into.
inline std::size_t segment_elements(std::size_t segment_bytes, std::size_t element_bytes) {
  return std::max<std::size_t>(1, segment_bytes / element_bytes);
}

// Fills `graph` with the ops of schedule.steps[first, last), cut into
// segments of `segment` elements (at least 1), their dependencies and the
// ops ready at once; `world` is the group's size (the peers' numbering).
void build(const collectives::Schedule& schedule, std::size_t first, std::size_t last,
           std::size_t segment, std::size_t world, Graph& graph,
           Strategy strategy = Strategy::Auto);

// Copies what build() made (the ops, steps, edges, ready ops and snapshot
// count; not its working space) from `built` into `graph`, whose vectors
// keep their memory: a call whose plan kept its graph (plan_cache.hpp)
// starts from a copy instead of building it, without allocating.
void copy_built(const Graph& built, Graph& graph);

}  // namespace collie::flow
