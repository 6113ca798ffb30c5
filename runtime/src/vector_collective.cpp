// The collectives with a count per rank: all_to_all_v, all_gather_v and
// gather_v (process_group.hpp). Each is one round of messages straight
// between the ranks that exchange data (every rank sends each of its blocks
// to its destination at once, and posts every receive at once), under the
// group's next collective tag like any collective, so they keep their place
// in the group's call order.
//
// Every message carries the call's fingerprint with the count left out (the
// counts differ per rank): the collective, the dtype, Algorithm::Auto (which
// no schedule-run call carries: it marks a call with counts per rank) and
// the root. A receive that meets another call's fingerprint throws
// MismatchError naming both calls; one whose size differs names both
// counts. A failure leaves the group broken, as for any collective.
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "group/call.hpp"
#include "executor/executor.hpp"
#include "group/group.hpp"
#include "group/tags.hpp"
#include "work.hpp"

namespace collie {

namespace {

struct Message {
  int peer;  // group rank
  std::byte* data;
  std::size_t count;  // elements
};

struct VectorCall {
  Collective collective;
  DataType dtype;
  int root;
  std::uint64_t sequence;
  std::chrono::milliseconds timeout;
  std::vector<Message> sends, receives;
  const std::byte* self_from = nullptr;  // this rank's own block
  std::byte* self_to = nullptr;
  std::size_t self_count = 0;

  Signature signature() const {
    return Signature{collective, dtype, ReduceOp::Sum, Algorithm::Auto, root, 0};
  }
};

void run_vector(detail::Group& g, const VectorCall& call) {
  const std::string what =
      fmt::format("{} #{} on {}", describe(call.signature(), false), call.sequence, g.name);
  {
    std::lock_guard lock(g.broken_mu);
    if (!g.broken.empty())
      throw Error(fmt::format("rank {}: {}: the group is unusable since an earlier collective "
                              "failed: {}",
                              g.rank, what, g.broken));
  }
  auto& t = g.transport();
  const auto tag = collective_tag(g.slot, call.sequence);
  const auto mine = fingerprint(call.signature());
  const std::size_t es = dtype_size(call.dtype);
  const auto until = std::chrono::steady_clock::now() + call.timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        until - std::chrono::steady_clock::now()));
  };
  auto broken = [&](const std::string& message) {
    std::lock_guard lock(g.broken_mu);
    if (g.broken.empty()) g.broken = message;
    g.is_broken.store(true, std::memory_order_release);
  };
  std::vector<transport::RequestPtr> receives, sends;
  // On the way out with an error: no request may go on reading the
  // caller's buffers or writing into them (as a schedule's executor does).
  auto settle = [&] { settle_requests(t, receives, sends); };
  // The same error type, its message led by the call; the group broken.
  auto named = [&]<class E>(const E& e) {
    settle();
    const auto message = fmt::format("{}: {}", what, e.what());
    broken(message);
    return E(message);
  };
  try {
    for (const auto& m : call.receives)
      receives.push_back(t.irecv(g.members[static_cast<std::size_t>(m.peer)], tag, m.data,
                                 m.count * es));
    for (const auto& m : call.sends)
      sends.push_back(t.isend(g.members[static_cast<std::size_t>(m.peer)], tag, m.data,
                              m.count * es, mine));
    if (call.self_count > 0) std::memmove(call.self_to, call.self_from, call.self_count * es);
    for (std::size_t i = 0; i < receives.size(); ++i) {
      const auto& m = call.receives[i];
      std::string size_error;
      try {
        t.wait(receives[i], remaining());
      } catch (const WithdrawnError& e) {  // its sender failed and gave the call up
        throw ConnectionError(
            fmt::format("rank {}: rank {} gave up this call: {}", g.rank, m.peer, e.what()));
      } catch (const RequestError& e) {
        size_error = e.what();
      }
      const auto theirs = t.fingerprint(receives[i]);
      if (is_failure_notice(theirs)) {
        throw ConnectionError(fmt::format("rank {}: rank {} failed in this call and said so ({})",
                                          g.rank, m.peer,
                                          t.describe_peer(failed_rank(theirs))));
      }
      if (theirs != mine) {
        throw MismatchError(fmt::format("rank {} called {} but rank {} called {}", g.rank,
                                        describe(call.signature(), false), m.peer,
                                        describe(decode_fingerprint(theirs), false)));
      }
      if (!size_error.empty()) {
        throw MismatchError(fmt::format(
            "rank {}: {}: rank {} sent a block of another size than this rank's count for it "
            "({} elements): {}",
            g.rank, what, m.peer, m.count, size_error));
      }
    }
    for (const auto& s : sends)
      t.wait(s, remaining());
  } catch (const MismatchError& e) {  // names the calls already
    settle();
    broken(e.what());
    throw;
  } catch (const TimeoutError& e) {
    throw named(e);
  } catch (const ConnectionError& e) {
    throw named(e);
  } catch (const InterruptedError& e) {
    throw named(e);
  } catch (...) {
    settle();
    throw;
  }
}

// "all_to_all_v", "all_gather_v", "gather_v"; null for a collective with
// no form with counts per rank.
const char* vector_name(Collective c) {
  switch (c) {
    case Collective::AllToAll:
      return "all_to_all_v";
    case Collective::AllGather:
      return "all_gather_v";
    case Collective::Gather:
      return "gather_v";
    default:
      return nullptr;
  }
}

std::vector<std::size_t> offsets_of(std::span<const std::size_t> counts) {
  std::vector<std::size_t> out(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), out.begin() + 1);
  return out;
}

}  // namespace

void ProcessGroup::check_counts(Collective c, std::size_t input,
                                const std::vector<std::size_t>& send_counts, std::size_t output,
                                const std::vector<std::size_t>& recv_counts, int root) const {
  const char* name = vector_name(c);
  auto total = [](const std::vector<std::size_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::size_t{0});
  };
  if (c == Collective::AllToAll && total(send_counts) > input) {
    throw Error(fmt::format("rank {}: {}: the send counts add up to {} elements but the input has {}",
                            rank(), name, total(send_counts), input));
  }
  const bool receives = c != Collective::Gather || rank() == root;
  if (receives && total(recv_counts) > output) {
    throw Error(fmt::format("rank {}: {}: the {} add up to {} elements but the output has {}",
                            rank(), name, c == Collective::AllToAll ? "recv counts" : "counts",
                            total(recv_counts), output));
  }
}

void ProcessGroup::run_vector_collective(Collective c, DataType dtype, const void* input,
                                         std::span<const std::size_t> send_counts, void* output,
                                         std::span<const std::size_t> recv_counts, int root,
                                         const CollectiveOptions& o) {
  start_vector(c, dtype, input, send_counts, output, recv_counts, root, o, Completion::Blocking);
}

Work ProcessGroup::run_vector_collective_async(Collective c, DataType dtype, const void* input,
                                               std::span<const std::size_t> send_counts,
                                               void* output,
                                               std::span<const std::size_t> recv_counts, int root,
                                               const CollectiveOptions& o) {
  return start_vector(c, dtype, input, send_counts, output, recv_counts, root, o,
                      Completion::Async);
}

Work ProcessGroup::start_vector(Collective c, DataType dtype, const void* input,
                                std::span<const std::size_t> send_counts, void* output,
                                std::span<const std::size_t> recv_counts, int root,
                                const CollectiveOptions& o, Completion when) {
  auto& g = *impl_;
  const char* name = vector_name(c);
  if (name == nullptr) {
    throw Error(fmt::format("rank {}: {} has no form with a count per rank", rank(),
                            collectives::collective_name(c)));
  }
  g.require_member(name);
  const int n = size();
  const auto N = static_cast<std::size_t>(n);
  const int me = rank();
  if (c == Collective::Gather && (root < 0 || root >= n)) {
    throw Error(fmt::format("rank {}: {}: root {} is not a rank of {} (ranks 0 to {})", me, name,
                            root, g.name, n - 1));
  }
  auto need = [&](std::span<const std::size_t> counts, const char* which) {
    if (counts.size() != N) {
      throw Error(fmt::format("rank {}: {}: {} has {} entries for {} ranks: give one per rank", me,
                              name, which, counts.size(), n));
    }
  };
  if (MemoryKind kind = o.memory; kind == MemoryKind::Cuda ||
                                  (kind == MemoryKind::Auto && device::backend() != nullptr &&
                                   ((input != nullptr && device::backend()->device_of(input) >= 0) ||
                                    (output != nullptr && device::backend()->device_of(output) >= 0)))) {
    throw Error(fmt::format("rank {}: {} takes host memory only", me, name));
  }
  VectorCall call;
  call.collective = c;
  call.dtype = dtype;
  call.root = c == Collective::Gather ? root : 0;
  call.timeout = o.timeout.value_or(g.world->config.timeout);
  const std::size_t es = dtype_size(dtype);
  auto in = static_cast<const std::byte*>(input);
  auto out = static_cast<std::byte*>(output);
  switch (c) {
    case Collective::AllToAll: {
      need(send_counts, "send_counts");
      need(recv_counts, "recv_counts");
      const auto s = offsets_of(send_counts), r = offsets_of(recv_counts);
      for (int j = 0; j < n; ++j) {
        const auto J = static_cast<std::size_t>(j);
        if (j == me) {
          if (send_counts[J] != recv_counts[J]) {
            throw Error(fmt::format("rank {}: all_to_all_v: it sends itself {} elements but "
                                    "expects {} from itself",
                                    me, send_counts[J], recv_counts[J]));
          }
          call.self_from = in + s[J] * es;
          call.self_to = out + r[J] * es;
          call.self_count = send_counts[J];
          continue;
        }
        call.sends.push_back({j, const_cast<std::byte*>(in + s[J] * es), send_counts[J]});
        call.receives.push_back({j, out + r[J] * es, recv_counts[J]});
      }
      break;
    }
    case Collective::AllGather:
    case Collective::Gather: {
      need(recv_counts, "counts");
      const auto r = offsets_of(recv_counts);
      const auto own = send_counts.empty() ? recv_counts[static_cast<std::size_t>(me)]
                                           : send_counts.front();
      if (own != recv_counts[static_cast<std::size_t>(me)]) {
        throw Error(fmt::format("rank {}: {}: its input has {} elements but counts[{}] is {}", me,
                                name, own, me, recv_counts[static_cast<std::size_t>(me)]));
      }
      const bool receives = c == Collective::AllGather || me == root;
      for (int j = 0; j < n; ++j) {
        const auto J = static_cast<std::size_t>(j);
        if (j == me) {
          if (receives) {
            call.self_from = in;
            call.self_to = out + r[J] * es;
            call.self_count = own;
          }
          continue;
        }
        if (c == Collective::AllGather || j == root)
          call.sends.push_back({j, const_cast<std::byte*>(in), own});
        if (receives) call.receives.push_back({j, out + r[J] * es, recv_counts[J]});
      }
      break;
    }
    default:
      break;
  }
  call.sequence = g.sequence++;
  if (when == Completion::Blocking) {
    run_vector(g, call);
    return Work();
  }
  return run_async(g.runner,
                   fmt::format("{} #{} on {}", describe(call.signature(), false), call.sequence,
                               g.name),
                   call.timeout, [impl = &g, call] { run_vector(*impl, call); });
}

}  // namespace collie
