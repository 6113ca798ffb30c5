// The process group: the ranks of a job, and the messages between them.
//
//   collie::ProcessGroup pg = collie::init();   // env://, as torchrun sets it
//   std::vector<float> v(1024);
//   if (pg.rank() == 0) pg.send(std::span(v), /*dst=*/1);
//   if (pg.rank() == 1) pg.recv(std::span(v), /*src=*/0);
//
// init() resolves the job from the environment (see job_config.hpp), opens
// the job's store (hosted by rank 0 or a launcher, a file, or the program's
// own: InitOptions), agrees on a random group id, opens the transport
// (each rank listens on the interface that routes to the master and
// publishes its address; ranks of one host share memory), and waits until
// every rank has joined. It throws collie::Error naming what to set or who is
// missing; it never hangs past the timeout (COLLIE_TIMEOUT, default 300 s).
//
// Point-to-point semantics:
// - send/recv block until the buffer may be reused (send: the bytes are
//   handed to the kernel or, to oneself, copied; recv: the message is in the
//   buffer). isend/irecv return at once with a Work; the buffer belongs to
//   collie until that Work completes.
// - A receive must name the exact size the sender sent; another size fails
//   the receive with a RequestError naming both sizes.
// - Between two ranks, messages with the same tag arrive in the order sent;
//   different tags are independent, so a receive for tag 2 can complete
//   before an earlier send with tag 1 is received.
// - Tags are 0 to 2^31 - 1. Sending to yourself works (the data is copied).
// - A peer that exits, crashes or resets its connection fails every pending
//   and later operation with it, within a second, with a ConnectionError
//   naming its rank and address; a timeout throws TimeoutError naming the
//   operation, the peer and the bytes still outstanding.
// A ProcessGroup is a cheap handle (copies share one group) and is
// thread-safe: several threads may send, receive and wait at once.
//
// Buffers may be host memory or CUDA device memory, mixed freely
// (memory.hpp says how device buffers move and what to synchronise).
//
// Collective semantics (every method below):
// - Every rank of the group calls the same collectives in the same order,
//   with the same dtype, count, op and root (and algorithm, if one is
//   forced). collie checks this on every message it moves (a fingerprint of
//   the call rides in each header): a rank that receives a message from a
//   different call throws MismatchError naming both calls and both ranks,
//   e.g. "rank 2 called all_reduce(float32, 1024, sum) but rank 3 called
//   broadcast(float32, 1024, root=0)", instead of hanging or mixing data.
// - Blocking forms return when this rank's part is done: its output holds
//   the result and its input may be reused. `*_async` forms return a Work at
//   once; the buffers belong to collie until it completes. Async collectives
//   start in call order, two at once (COLLIE_ASYNC_CALLS; calls of up to 64
//   KiB in a queue of their own), each Work completing when its call ends.
// - Counts: `count` is per rank, as in torch.distributed. Inputs and
//   outputs must not overlap unless a method says in-place.
// - Reductions (ReduceOp, reduce.hpp): sum, prod, min, max, avg on every
//   dtype; band, bor, bxor on integers. Every rank ends with bit-identical
//   results (each element is combined in the same order everywhere).
// - Algorithms: Auto (the default) picks the fastest by the alpha-beta cost
//   model of collectives/cost.hpp for this size and world; a call's
//   options, or COLLIE_ALGO (e.g. "all_reduce:ring,broadcast:tree"), force
//   one. Large buffers move in segments (COLLIE_SEGMENT_BYTES, default
//   256 KiB) so that reducing one segment overlaps receiving the next.
// - Errors: a dead peer fails the collective with ConnectionError naming
//   it; past the timeout (the group's, or the call's) a TimeoutError names
//   the collective, the peer and the bytes outstanding. After a collective
//   fails on a connection or a mismatch, the group is broken: later
//   collectives on it throw at once, repeating the first error.
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <collie/collectives/algorithms.hpp>
#include <collie/dtype.hpp>
#include <collie/job_config.hpp>
#include <collie/memory.hpp>
#include <collie/reduce.hpp>
#include <collie/state_buffer.hpp>
#include <collie/work.hpp>
#include <collie/store/store.hpp>

namespace collie {

namespace detail {
struct Group;  // what a ProcessGroup handle points to (the runtime's own)
}  // namespace detail

using collectives::Algorithm;
using collectives::Collective;

struct CollectiveOptions {
  Algorithm algorithm = Algorithm::Auto;
  std::optional<std::chrono::milliseconds> timeout;  // default: the group's (COLLIE_TIMEOUT)
  // Where the buffers are (memory.hpp): Auto asks the CUDA driver.
  MemoryKind memory = MemoryKind::Auto;
  // For device buffers: the cudaStream_t whose queued work collie's copies
  // follow (memory.hpp); null: the legacy default stream.
  void* cuda_stream = nullptr;
};

class ProcessGroup {
 public:

  // This process's rank in the group (-1 if it is not a member), and the
  // number of ranks.
  int rank() const;
  int size() const;
  // "world", or "group 1 [0, 2, 3]" (for messages).
  const std::string& name() const;

  // Raw buffers: `bytes` bytes at `data`.
  void send(const void* data, std::size_t bytes, int dst, int tag = 0);
  void recv(void* data, std::size_t bytes, int src, int tag = 0);
  Work isend(const void* data, std::size_t bytes, int dst, int tag = 0);
  Work irecv(void* data, std::size_t bytes, int src, int tag = 0);

  // Receives the first message with `tag` from any rank of the group (this
  // one included) and returns the sender's rank; irecv_any's Work says it
  // in source() once complete. The message must be `bytes` long, as for
  // recv. It matches what the senders' send/isend sent with that tag, like
  // a receive naming the rank; a receive that names the same rank and tag
  // at the same time races with it for the message. A wait polls for new
  // messages (at first at once, then every millisecond), so it costs a
  // little latency that a named receive does not; host memory only. Once
  // every other rank has failed or left without sending one, it throws
  // ConnectionError naming why (a silent live rank is waited for until the
  // timeout).
  int recv_any(void* data, std::size_t bytes, int tag = 0);
  Work irecv_any(void* data, std::size_t bytes, int tag = 0);

  // Typed spans of any trivially copyable element (collie's dtypes and more).
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void send(std::span<T> data, int dst, int tag = 0) {
    send(static_cast<const void*>(data.data()), data.size_bytes(), dst, tag);
  }
  template <class T>
  requires(std::is_trivially_copyable_v<T> && !std::is_const_v<T>) void recv(std::span<T> data,
                                                                             int src, int tag = 0) {
    recv(static_cast<void*>(data.data()), data.size_bytes(), src, tag);
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> Work isend(std::span<T> data, int dst, int tag = 0) {
    return isend(static_cast<const void*>(data.data()), data.size_bytes(), dst, tag);
  }
  template <class T>
  requires(std::is_trivially_copyable_v<T> && !std::is_const_v<T>) Work
      irecv(std::span<T> data, int src, int tag = 0) {
    return irecv(static_cast<void*>(data.data()), data.size_bytes(), src, tag);
  }

  // ---- collectives ----
  // (T: one of collie's dtypes, dtype.hpp. `In` may be const T.)

  // Every rank's `buffer` ends equal to the root's.
  template <class T, std::size_t E>
  void broadcast(std::span<T, E> buffer, int root, const CollectiveOptions& o = {}) {
    run(Collective::Broadcast, buffer, buffer, ReduceOp::Sum, root, o, Completion::Blocking);
  }
  template <class T, std::size_t E>
  Work broadcast_async(std::span<T, E> buffer, int root, const CollectiveOptions& o = {}) {
    return run(Collective::Broadcast, buffer, buffer, ReduceOp::Sum, root, o, Completion::Async);
  }

  // In place: every rank's `buffer` ends with op over all ranks' buffers.
  template <class T, std::size_t E>
  void all_reduce(std::span<T, E> buffer, ReduceOp op = ReduceOp::Sum,
                  const CollectiveOptions& o = {}) {
    run(Collective::AllReduce, buffer, buffer, op, 0, o, Completion::Blocking);
  }
  template <class T, std::size_t E>
  Work all_reduce_async(std::span<T, E> buffer, ReduceOp op = ReduceOp::Sum,
                        const CollectiveOptions& o = {}) {
    return run(Collective::AllReduce, buffer, buffer, op, 0, o, Completion::Async);
  }
  // Out of place: `input` is left as it was; output.size() == input.size().
  template <class In, std::size_t EI, class T, std::size_t EO>
  void all_reduce(std::span<In, EI> input, std::span<T, EO> output, ReduceOp op = ReduceOp::Sum,
                  const CollectiveOptions& o = {}) {
    run(Collective::AllReduce, input, output, op, 0, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work all_reduce_async(std::span<In, EI> input, std::span<T, EO> output,
                        ReduceOp op = ReduceOp::Sum, const CollectiveOptions& o = {}) {
    return run(Collective::AllReduce, input, output, op, 0, o, Completion::Async);
  }

  // In place: the root's `buffer` ends with op over all ranks' buffers;
  // other ranks' buffers are left as they were.
  template <class T, std::size_t E>
  void reduce(std::span<T, E> buffer, int root, ReduceOp op = ReduceOp::Sum,
              const CollectiveOptions& o = {}) {
    run(Collective::Reduce, buffer, buffer, op, root, o, Completion::Blocking);
  }
  template <class T, std::size_t E>
  Work reduce_async(std::span<T, E> buffer, int root, ReduceOp op = ReduceOp::Sum,
                    const CollectiveOptions& o = {}) {
    return run(Collective::Reduce, buffer, buffer, op, root, o, Completion::Async);
  }
  // Out of place: `output` (input.size() elements) is written on the root
  // only; elsewhere it is ignored and may be empty.
  template <class In, std::size_t EI, class T, std::size_t EO>
  void reduce(std::span<In, EI> input, std::span<T, EO> output, int root,
              ReduceOp op = ReduceOp::Sum, const CollectiveOptions& o = {}) {
    run(Collective::Reduce, input, output, op, root, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work reduce_async(std::span<In, EI> input, std::span<T, EO> output, int root,
                    ReduceOp op = ReduceOp::Sum, const CollectiveOptions& o = {}) {
    return run(Collective::Reduce, input, output, op, root, o, Completion::Async);
  }

  // Every rank's `output` (size() * input.size() elements) ends with every
  // rank's input, in rank order.
  template <class In, std::size_t EI, class T, std::size_t EO>
  void all_gather(std::span<In, EI> input, std::span<T, EO> output,
                  const CollectiveOptions& o = {}) {
    run(Collective::AllGather, input, output, ReduceOp::Sum, 0, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work all_gather_async(std::span<In, EI> input, std::span<T, EO> output,
                        const CollectiveOptions& o = {}) {
    return run(Collective::AllGather, input, output, ReduceOp::Sum, 0, o, Completion::Async);
  }

  // The root's `output` (size() * input.size() elements) ends with every
  // rank's input, in rank order; elsewhere `output` is ignored (may be empty).
  template <class In, std::size_t EI, class T, std::size_t EO>
  void gather(std::span<In, EI> input, std::span<T, EO> output, int root,
              const CollectiveOptions& o = {}) {
    run(Collective::Gather, input, output, ReduceOp::Sum, root, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work gather_async(std::span<In, EI> input, std::span<T, EO> output, int root,
                    const CollectiveOptions& o = {}) {
    return run(Collective::Gather, input, output, ReduceOp::Sum, root, o, Completion::Async);
  }

  // Rank i's `output` ends with block i of the root's `input` (size() *
  // output.size() elements); elsewhere `input` is ignored (may be empty).
  template <class In, std::size_t EI, class T, std::size_t EO>
  void scatter(std::span<In, EI> input, std::span<T, EO> output, int root,
               const CollectiveOptions& o = {}) {
    run(Collective::Scatter, input, output, ReduceOp::Sum, root, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work scatter_async(std::span<In, EI> input, std::span<T, EO> output, int root,
                     const CollectiveOptions& o = {}) {
    return run(Collective::Scatter, input, output, ReduceOp::Sum, root, o, Completion::Async);
  }

  // Rank i's `output` ends with op over block i of every rank's `input`
  // (size() * output.size() elements).
  template <class In, std::size_t EI, class T, std::size_t EO>
  void reduce_scatter(std::span<In, EI> input, std::span<T, EO> output, ReduceOp op = ReduceOp::Sum,
                      const CollectiveOptions& o = {}) {
    run(Collective::ReduceScatter, input, output, op, 0, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work reduce_scatter_async(std::span<In, EI> input, std::span<T, EO> output,
                            ReduceOp op = ReduceOp::Sum, const CollectiveOptions& o = {}) {
    return run(Collective::ReduceScatter, input, output, op, 0, o, Completion::Async);
  }

  // Block j of rank i's `input` becomes block i of rank j's `output`; both
  // hold size() blocks of equal length.
  template <class In, std::size_t EI, class T, std::size_t EO>
  void all_to_all(std::span<In, EI> input, std::span<T, EO> output,
                  const CollectiveOptions& o = {}) {
    run(Collective::AllToAll, input, output, ReduceOp::Sum, 0, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work all_to_all_async(std::span<In, EI> input, std::span<T, EO> output,
                        const CollectiveOptions& o = {}) {
    return run(Collective::AllToAll, input, output, ReduceOp::Sum, 0, o, Completion::Async);
  }

  // ---- collectives with a count per rank ----
  // One round of messages straight between the ranks that exchange data;
  // host memory only. Each call takes its place in the group's order like
  // the collectives above, and a rank that called another collective
  // instead is named in a MismatchError.

  // all_to_all with blocks of any size: this rank sends send_counts[j]
  // elements to rank j, the blocks taken one after another from `input`,
  // and receives recv_counts[j] elements from rank j into `output`, one
  // block after another in rank order. Rank j's send_counts[i] must equal
  // rank i's recv_counts[j] (else a MismatchError names both counts).
  template <class In, std::size_t EI, class T, std::size_t EO>
  void all_to_all_v(std::span<In, EI> input, const std::vector<std::size_t>& send_counts,
                    std::span<T, EO> output, const std::vector<std::size_t>& recv_counts,
                    const CollectiveOptions& o = {}) {
    run_v(Collective::AllToAll, input, send_counts, output, recv_counts, 0, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work all_to_all_v_async(std::span<In, EI> input, const std::vector<std::size_t>& send_counts,
                          std::span<T, EO> output, const std::vector<std::size_t>& recv_counts,
                          const CollectiveOptions& o = {}) {
    return run_v(Collective::AllToAll, input, send_counts, output, recv_counts, 0, o, Completion::Async);
  }
  // all_gather with inputs of any size: rank j gives counts[j] elements
  // (counts alike on every rank; input.size() == counts[rank()]), and every
  // rank's `output` (their sum) ends with them in rank order.
  template <class In, std::size_t EI, class T, std::size_t EO>
  void all_gather_v(std::span<In, EI> input, std::span<T, EO> output,
                    const std::vector<std::size_t>& counts, const CollectiveOptions& o = {}) {
    run_v(Collective::AllGather, input, {input.size()}, output, counts, 0, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work all_gather_v_async(std::span<In, EI> input, std::span<T, EO> output,
                          const std::vector<std::size_t>& counts, const CollectiveOptions& o = {}) {
    return run_v(Collective::AllGather, input, {input.size()}, output, counts, 0, o, Completion::Async);
  }
  // gather with inputs of any size: as all_gather_v, on the root only
  // (elsewhere `output` is ignored and may be empty).
  template <class In, std::size_t EI, class T, std::size_t EO>
  void gather_v(std::span<In, EI> input, std::span<T, EO> output,
                const std::vector<std::size_t>& counts, int root, const CollectiveOptions& o = {}) {
    run_v(Collective::Gather, input, {input.size()}, output, counts, root, o, Completion::Blocking);
  }
  template <class In, std::size_t EI, class T, std::size_t EO>
  Work gather_v_async(std::span<In, EI> input, std::span<T, EO> output,
                      const std::vector<std::size_t>& counts, int root,
                      const CollectiveOptions& o = {}) {
    return run_v(Collective::Gather, input, {input.size()}, output, counts, root, o, Completion::Async);
  }
  // The untyped form: `send_counts` as all_to_all_v's, or for all_gather_v
  // and gather_v one entry, this rank's input count; `recv_counts` as
  // all_to_all_v's recv_counts, or the counts of all_gather_v and gather_v.
  void run_vector_collective(Collective c, DataType dtype, const void* input,
                             std::span<const std::size_t> send_counts, void* output,
                             std::span<const std::size_t> recv_counts, int root = 0,
                             const CollectiveOptions& o = {});
  Work run_vector_collective_async(Collective c, DataType dtype, const void* input,
                                   std::span<const std::size_t> send_counts, void* output,
                                   std::span<const std::size_t> recv_counts, int root = 0,
                                   const CollectiveOptions& o = {});

  // Returns once every rank of the group has entered the barrier.
  void barrier(const CollectiveOptions& o = {});
  Work barrier_async(const CollectiveOptions& o = {});

  // The untyped form of every collective above: `count` per rank as the
  // collective counts it (see collectives/algorithms.hpp for the layouts).
  void run_collective(Collective c, DataType dtype, const void* input, void* output,
                      std::size_t count, ReduceOp op = ReduceOp::Sum, int root = 0,
                      const CollectiveOptions& o = {});
  Work run_collective_async(Collective c, DataType dtype, const void* input, void* output,
                            std::size_t count, ReduceOp op = ReduceOp::Sum, int root = 0,
                            const CollectiveOptions& o = {});

  // The algorithm Auto (or COLLIE_ALGO) picks for this call.
  Algorithm choose_algorithm(Collective c, DataType dtype, std::size_t count, int root = 0) const;
  // Whether Auto runs this call, on host memory, on the group's board
  // instead (no schedule and no message: every member shares this host's
  // memory, and the call is a barrier or a small all_reduce; docs/transport.md).
  bool uses_board(Collective c, DataType dtype, std::size_t count) const;

  // ---- sub-groups ----
  // A group of some of this group's ranks (given in this group's numbering,
  // sorted or not: the new group numbers them in the order given). It is a
  // collective of this group, as in MPI: every rank of it calls new_group,
  // with the same ranks, in the same order among its collectives on this
  // group, and they agree there on a tag space no live group of theirs
  // uses. A rank not in `ranks` gets a group it is not a member of (rank()
  // == -1; any use throws an Error saying so). A sub-group has its own tags
  // and sequence: its messages never match another group's. A process
  // makes one group at a time (a second new_group waits for the first).
  ProcessGroup new_group(const std::vector<int>& ranks);

  // ---- when a member is lost ----
  // The members still alive, as a new group on the same connections,
  // numbered in this group's order; this group is revoked (its calls throw
  // at once, naming why). Call it on every surviving member once a call
  // failed for a lost member (a ConnectionError naming it):
  //
  //   try { pg.all_reduce(std::span(grad)); }
  //   catch (const collie::ConnectionError&) { pg = pg.shrink(); /* redo the step */ }
  //
  // It is a collective of the survivors: each finds which members are
  // gone (within a second of asking: a lost member's connection fails),
  // and they agree on one set through the job's store, even where they
  // saw different failures or another member dies meanwhile (then the new
  // group's first call fails naming it, and they shrink again). A member
  // the others found lost throws ConnectionError; a live member that never
  // calls shrink is named in a TimeoutError after `timeout` (default: the
  // group's). The store must outlive the lost members (collie launch hosts
  // it, or etcd://; a store hosted by a lost rank 0 fails with a
  // ConnectionError saying so). Calling it again returns the same group.
  // Finish or wait for this group's async calls first: they fail too.
  ProcessGroup shrink(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // ---- when newcomers join ----
  // This group's members and the newcomers waiting now, as one new group:
  // the members first, in this group's order, then the newcomers in the
  // order they came. A newcomer is a process whose init() was told to join
  // (InitOptions::join or COLLIE_JOIN=1: `collie launch` starts a
  // replacement so); it waits in the job's store until admitted. Call it
  // on every member between steps, where no call is in flight:
  //
  //   pg = pg.expand();                         // members; newcomers: init()
  //   pg.sync_state({collie::StateBuffer::of("weights", std::span(w))});
  //
  // The members agree on which newcomers through the job's store (the
  // first member's view decides), so newcomers that arrive meanwhile wait
  // for the next expand(). Where none waits, it returns this group, which
  // stays in use; otherwise the members first meet in a barrier of this
  // group (a member lost since its last call fails it with the
  // ConnectionError naming the lost: shrink(), then expand() again, and
  // the newcomers are still waiting), and this group is revoked (its
  // calls throw, naming the group that replaced it). The new group is a world of its own: new
  // connections, every member's old ones closing with the old group. A
  // newcomer that never joins is named in a TimeoutError after the
  // group's timeout; this group then stays in use, and that newcomer is
  // not admitted again. Only one group of a job admits newcomers at a time.
  ProcessGroup expand();
  // The ranks of this group that joined at the expand() that made it
  // (ascending; empty for any other group). A newcomer finds itself here.
  std::vector<int> newcomers() const;
  // Hands named buffers from `root` to every other member: what a
  // newcomer needs to take part (weights, optimiser state, the step), from
  // a member that has it, with no checkpoint file. A collective: every
  // member calls it with the same names, dtypes and counts, in the same
  // order (the members compare them first: a difference throws
  // MismatchError on every member, naming the buffer and both shapes).
  // Host or device memory, as broadcast takes.
  void sync_state(std::span<const StateBuffer> state, int root = 0);
  void sync_state(std::initializer_list<StateBuffer> state, int root = 0) {
    sync_state(std::span<const StateBuffer>(state.begin(), state.size()), root);
  }

  // The job this group belongs to, and its store (namespace of this run).
  const JobConfig& config() const;
  store::Store& store() const;
  // The address this rank advertises to its peers: that of the interface
  // that routes to the master, or of COLLIE_SOCKET_IFNAME's ("10.0.0.4").
  const std::string& advertised_host() const;
  // What carries this rank's messages: "tcp on 10.0.0.4:41234".
  std::string describe_transport() const;
  // Which hosts the group's ranks are on, as its algorithms see them
  // (rings and trees go by host; two_level works within each host and
  // across):
  // "4 hosts x 2 ranks, round robin"; on several hosts, the link Auto
  // prices with, and where it came from ("; link 0.958 Gbit/s, 6 us
  // (measured between rank 0 and rank 2 in 44 ms)"); "not known" for a group of
  // one, or of more ranks than init reads the hosts of (4096).
  std::string describe_hosts() const;

 private:
  friend struct detail::Access;
  explicit ProcessGroup(std::shared_ptr<detail::Group> group);

  enum class Completion { Blocking, Async };
  // Checks, picks the algorithm and runs the call (collective.cpp).
  Work start(Collective c, DataType dtype, const void* input, void* output, std::size_t count,
             ReduceOp op, int root, const CollectiveOptions& o, Completion when);
  Work start_vector(Collective c, DataType dtype, const void* input,
                    std::span<const std::size_t> send_counts, void* output,
                    std::span<const std::size_t> recv_counts, int root,
                    const CollectiveOptions& o, Completion when);
  // The typed collectives' one path: the count per rank from the two
  // buffers' sizes, checked as the collective needs them.
  template <class In, std::size_t EI, class Out, std::size_t EO>
  Work run(Collective c, std::span<In, EI> input, std::span<Out, EO> output, ReduceOp op,
           int root, const CollectiveOptions& o, Completion when) {
    using T = std::remove_const_t<Out>;
    static_assert(std::is_same_v<std::remove_const_t<In>, T>,
                  "input and output must have the same element type");
    static_assert(!std::is_const_v<Out>, "the output must be writable");
    const std::size_t count = count_of(c, input.size(), output.size(), root);
    return start(c, dtype_of<T>, input.data(), output.data(), count, op, root, o, when);
  }
  template <class In, std::size_t EI, class Out, std::size_t EO>
  Work run_v(Collective c, std::span<In, EI> input, const std::vector<std::size_t>& send_counts,
             std::span<Out, EO> output, const std::vector<std::size_t>& recv_counts, int root,
             const CollectiveOptions& o, Completion when) {
    using T = std::remove_const_t<Out>;
    static_assert(std::is_same_v<std::remove_const_t<In>, T>,
                  "input and output must have the same element type");
    static_assert(!std::is_const_v<Out>, "the output must be writable");
    check_counts(c, input.size(), send_counts, output.size(), recv_counts, root);
    return start_vector(c, dtype_of<T>, input.data(), send_counts, output.data(), recv_counts,
                        root, o, when);
  }
  void check_counts(Collective c, std::size_t input, const std::vector<std::size_t>& send_counts,
                    std::size_t output, const std::vector<std::size_t>& recv_counts,
                    int root) const;
  std::size_t count_of(Collective c, std::size_t input, std::size_t output, int root) const;

  std::shared_ptr<detail::Group> impl_;
};

// Joins the job described by `options` and the environment. See above.
ProcessGroup init(const InitOptions& options = {});

}  // namespace collie
