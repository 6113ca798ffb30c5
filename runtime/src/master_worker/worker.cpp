// A worker's stream (worker.hpp): it takes the master's commands in order
// and runs each; transfers (a write's data, a read, a copy) are posted and
// left in flight, so two workers copying to each other never wait on each
// other, and the next operation on their buffer waits for them. Finished
// operations go back in batches: at 64, after a millisecond, or whenever
// the stream waits for the master.
#include "worker.hpp"

#include <cstring>
#include <new>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

#include "../tags.hpp"
#include "elementwise.hpp"
#include "master_state.hpp"

namespace collie::mw {

using namespace std::chrono_literals;
using wire::Command;
using wire::Op;

namespace {

// A copy's data from a poisoned buffer: no bytes, and this fingerprint.
constexpr std::uint64_t kPoisonedCopy = 0x706f69736f6e6564ull;

// An operation that used a poisoned buffer: its outputs take the first
// cause as theirs.
struct Poisoned : Error {
  Poisoned(std::uint64_t id, std::string first)
      : Error(fmt::format("buffer #{} is poisoned by an earlier failure: {}", id, first)),
        cause(std::move(first)) {}
  std::string cause;
};

std::shared_ptr<std::byte> allocate(std::size_t bytes) {
  constexpr std::align_val_t align{64};
  auto* p = static_cast<std::byte*>(::operator new(bytes == 0 ? 1 : bytes, align));
  return std::shared_ptr<std::byte>(p, [](std::byte* q) { ::operator delete(q, align); });
}

}  // namespace

Worker::Worker(std::shared_ptr<transport::Transport> transport, ProcessGroup workers,
               const Kernels& kernels, Options options, const std::string& host)
    : t_(std::move(transport)), workers_(std::move(workers)), kernels_(kernels),
      options_(options), rank_(t_->rank()),
      me_(fmt::format("worker {} (rank {} on {})", rank_, rank_, host)) {}

std::string Worker::describe(const Command& c) const {
  switch (c.op) {
    case Op::CopySend: return fmt::format("copy of #{} to worker {}", c.buffer[0], c.peer);
    case Op::CopyRecv: return fmt::format("copy into #{} from worker {}", c.buffer[0], c.peer);
    case Op::Call:
    case Op::Memory:
    case Op::Shutdown: return detail::op_name(c.op);
    default: return fmt::format("{}(#{})", detail::op_name(c.op), c.buffer[0]);
  }
}

void Worker::record(std::uint64_t seq, bool failed, const std::string& message, double value) {
  if (records_.empty()) first_unsent_ = std::chrono::steady_clock::now();
  wire::Record r;
  r.seq = seq;
  r.value = value;
  r.failed = failed ? 1 : 0;
  r.message_bytes = static_cast<std::uint32_t>(message.size());
  records_.push_back(r);
  messages_.push_back(message);
}

void Worker::flush() {
  while (!outgoing_.empty() && t_->test(outgoing_.front().header_send) &&
         (!outgoing_.front().body_send || t_->test(outgoing_.front().body_send))) {
    t_->wait(outgoing_.front().header_send);
    if (outgoing_.front().body_send) t_->wait(outgoing_.front().body_send);
    outgoing_.pop_front();
  }
  if (records_.empty()) return;
  Outgoing o;
  wire::Writer w;
  for (const auto& r : records_) w.put(r);
  for (const auto& m : messages_) w.put_bytes(m.data(), m.size());
  o.header = std::make_unique<wire::CompletionsHeader>();
  o.header->records = static_cast<std::uint32_t>(records_.size());
  o.header->body_bytes = static_cast<std::uint32_t>(w.bytes.size());
  o.body = std::move(w.bytes);
  o.header_send = t_->isend(0, master_worker_tag(wire::kDone, 0), o.header.get(),
                            sizeof(wire::CompletionsHeader), 0);
  o.body_send =
      t_->isend(0, master_worker_tag(wire::kDoneBody, 0), o.body.data(), o.body.size(), 0);
  outgoing_.push_back(std::move(o));
  records_.clear();
  messages_.clear();
}

void Worker::finish_transfer(InFlight& f) {
  std::string error;
  try {
    t_->wait(f.request, options_.timeout);
    if (f.ready_send) t_->wait(f.ready_send, options_.timeout);
  } catch (const std::exception& e) {
    error = e.what();
    if (f.writes && f.transfer != 0 && t_->test(f.request) &&
        t_->fingerprint(f.request) == kPoisonedCopy) {
      // The source was poisoned: its cause follows, and becomes this one's.
      wire::CopyWhy why;
      try {
        t_->wait(t_->irecv(f.peer, master_worker_tag(wire::kCopyWhy, f.transfer), &why,
                           sizeof why),
                 options_.timeout);
        why.text[sizeof why.text - 1] = '\0';
        const std::string first = why.text;
        if (auto it = buffers_.find(f.buffer); it != buffers_.end() && it->second.poisoned.empty())
          it->second.poisoned = first;
        record(f.seq, true, fmt::format("{}: {}", me_, Poisoned(f.buffer, first).what()));
        return;
      } catch (const Error& e2) {
        error = fmt::format("the source on worker {} is poisoned; why could not be told: {}",
                            f.peer, e2.what());
      }
    }
  }
  if (f.why_send) {
    try {
      t_->wait(f.why_send, options_.timeout);
    } catch (const std::exception&) {
    }
  }
  if (f.seq == 0) return;  // its operation has failed already
  if (error.empty()) {
    record(f.seq, false, {});
    return;
  }
  const std::string cause = fmt::format("{} on {}: {}", f.what, me_, error);
  if (f.writes) {
    auto it = buffers_.find(f.buffer);
    if (it != buffers_.end() && it->second.poisoned.empty()) it->second.poisoned = cause;
  }
  record(f.seq, true, fmt::format("{}: {}", me_, error));
}

void Worker::reap(bool all) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (all || t_->test(it->request)) {
      finish_transfer(*it);
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
}

void Worker::settle(std::uint64_t id) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->buffer == id) {
      finish_transfer(*it);
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
}

Worker::Buf& Worker::use(std::uint64_t id) {
  settle(id);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) throw Error(fmt::format("buffer #{} is not on {}", id, me_));
  if (!it->second.poisoned.empty()) throw Poisoned(id, it->second.poisoned);
  return it->second;
}

void Worker::poison_outputs(const Command& c, const std::vector<std::byte>& body,
                            const std::string& cause) {
  std::vector<std::uint64_t> outs;
  switch (c.op) {
    case Op::Alloc:
    case Op::Fill:
    case Op::Scale:
    case Op::Axpy:
    case Op::Binary:
    case Op::WriteInline:
    case Op::Write:
    case Op::CopyRecv:
    case Op::CopyLocal:
    case Op::AllReduce:
    case Op::Broadcast: outs.push_back(c.buffer[0]); break;
    case Op::AllGather: outs.push_back(c.buffer[1]); break;
    case Op::Call: {
      try {
        wire::Reader in(body);
        in.get_string();
        for (auto n = in.get<std::uint32_t>(); n > 0; --n) in.get<std::uint64_t>();
        for (auto n = in.get<std::uint32_t>(); n > 0; --n) outs.push_back(in.get<std::uint64_t>());
      } catch (const Error&) {
      }
      break;
    }
    default: break;
  }
  for (auto id : outs) {
    auto it = buffers_.find(id);
    if (it != buffers_.end() && it->second.poisoned.empty()) it->second.poisoned = cause;
  }
}

void Worker::execute(const Command& c, const std::vector<std::byte>& body) {
  double value = 0;
  bool later = false;  // a transfer left in flight records it when done
  try {
    run_command(c, body, value, later);
    if (!later) record(c.seq, false, {}, value);
  } catch (const Poisoned& e) {
    poison_outputs(c, body, e.cause);
    record(c.seq, true, fmt::format("{}: {}", me_, e.what()));
  } catch (const std::exception& e) {
    const std::string cause = fmt::format("{} on {}: {}", describe(c), me_, e.what());
    poison_outputs(c, body, cause);
    record(c.seq, true, fmt::format("{}: {}", me_, e.what()));
  }
}

void Worker::run_command(const Command& c, const std::vector<std::byte>& body, double& value,
                         bool& later) {
  const auto dtype = static_cast<DataType>(c.dtype);
  switch (c.op) {
    case Op::Alloc: {
      Buf b;
      b.dtype = dtype;
      b.count = c.count;
      b.bytes = c.count * dtype_size(dtype);
      auto [it, fresh] = buffers_.emplace(c.buffer[0], std::move(b));
      try {
        it->second.data = allocate(it->second.bytes);
      } catch (const std::bad_alloc&) {
        throw Error(fmt::format("out of memory for {} bytes", it->second.bytes));
      }
      held_bytes_ += it->second.bytes;
      return;
    }
    case Op::Free: {
      settle(c.buffer[0]);
      auto it = buffers_.find(c.buffer[0]);
      if (it != buffers_.end()) {
        if (it->second.data) held_bytes_ -= it->second.bytes;
        buffers_.erase(it);
      }
      return;
    }
    case Op::Fill: {
      Buf& b = use(c.buffer[0]);
      fill(b.dtype, b.data.get(), b.count, c.scalar);
      return;
    }
    case Op::Scale: {
      Buf& b = use(c.buffer[0]);
      scale(b.dtype, b.data.get(), b.count, c.scalar);
      return;
    }
    case Op::Axpy: {
      Buf& x = use(c.buffer[1]);
      Buf& y = use(c.buffer[0]);
      axpy(y.dtype, y.data.get(), x.data.get(), y.count, c.scalar);
      return;
    }
    case Op::Binary: {
      Buf& a = use(c.buffer[1]);
      Buf& b = use(c.buffer[2]);
      Buf& out = use(c.buffer[0]);
      const auto op = static_cast<ReduceOp>(c.reduce);
      // Every elementwise op here is commutative: out = op(out, other).
      if (c.buffer[0] == c.buffer[2]) {
        collie::reduce(out.dtype, op, out.data.get(), a.data.get(), out.count);
      } else {
        if (c.buffer[0] != c.buffer[1]) std::memcpy(out.data.get(), a.data.get(), out.bytes);
        collie::reduce(out.dtype, op, out.data.get(), b.data.get(), out.count);
      }
      return;
    }
    case Op::Reduce: {
      Buf& b = use(c.buffer[0]);
      value = reduce_all(b.dtype, b.data.get(), b.count, static_cast<ReduceOp>(c.reduce));
      return;
    }
    case Op::WriteInline: {
      Buf& b = use(c.buffer[0]);
      if (body.size() != b.bytes) throw ProtocolError("write: the data does not fit the buffer");
      if (!body.empty()) std::memcpy(b.data.get(), body.data(), body.size());
      return;
    }
    case Op::Write: {
      Buf& b = use(c.buffer[0]);
      InFlight f;
      f.seq = c.seq;
      f.buffer = c.buffer[0];
      f.writes = true;
      f.what = describe(c);
      f.request = t_->irecv(0, master_worker_tag(wire::kData, c.seq), b.data.get(), b.bytes);
      f.ready = std::make_unique<std::uint64_t>(c.seq);
      f.ready_send = t_->isend(0, master_worker_tag(wire::kReady, 0), f.ready.get(),
                               sizeof(std::uint64_t), 0);
      in_flight_.push_back(std::move(f));
      later = true;
      return;
    }
    case Op::Read:
    case Op::CopySend: {
      const bool read = c.op == Op::Read;
      const int peer = read ? 0 : c.peer;
      const auto tag = read ? master_worker_tag(wire::kData, c.seq)
                            : master_worker_tag(wire::kCopy, c.transfer);
      InFlight f;
      f.seq = c.seq;
      f.buffer = c.buffer[0];
      f.peer = peer;
      f.what = describe(c);
      if (read) {
        Buf& b = use(c.buffer[0]);
        f.request = t_->isend(peer, tag, b.data.get(), b.bytes, 0);
      } else {
        try {
          Buf& b = use(c.buffer[0]);
          f.request = t_->isend(peer, tag, b.data.get(), b.bytes, 0);
        } catch (const Poisoned& e) {
          // The receiver waits for this copy: tell it, with no bytes, and why.
          f.request = t_->isend(peer, tag, nullptr, 0, kPoisonedCopy);
          f.why = std::make_unique<wire::CopyWhy>();
          std::strncpy(f.why->text, e.cause.c_str(), sizeof f.why->text - 1);
          f.why_send = t_->isend(peer, master_worker_tag(wire::kCopyWhy, c.transfer), f.why.get(),
                                 sizeof(wire::CopyWhy), 0);
          f.seq = 0;
          in_flight_.push_back(std::move(f));
          throw;
        }
      }
      in_flight_.push_back(std::move(f));
      later = true;
      return;
    }
    case Op::CopyRecv: {
      Buf& b = use(c.buffer[0]);
      InFlight f;
      f.seq = c.seq;
      f.buffer = c.buffer[0];
      f.writes = true;
      f.peer = c.peer;
      f.transfer = c.transfer;
      f.what = describe(c);
      f.request =
          t_->irecv(c.peer, master_worker_tag(wire::kCopy, c.transfer), b.data.get(), b.bytes);
      in_flight_.push_back(std::move(f));
      later = true;
      return;
    }
    case Op::CopyLocal: {
      Buf& src = use(c.buffer[1]);
      Buf& dst = use(c.buffer[0]);
      if (c.buffer[0] != c.buffer[1]) std::memcpy(dst.data.get(), src.data.get(), dst.bytes);
      return;
    }
    case Op::Call: {
      wire::Reader in(body);
      const std::string name = in.get_string();
      const Kernel* k = kernels_.find(name);
      if (k == nullptr) throw Error(fmt::format("no kernel is registered as '{}' here", name));
      std::vector<KernelArgs::Slot> slots[2];
      for (auto& list : slots) {
        for (auto n = in.get<std::uint32_t>(); n > 0; --n) {
          Buf& b = use(in.get<std::uint64_t>());
          list.push_back({b.dtype, b.data.get(), b.count});
        }
      }
      std::vector<double> scalars(in.get<std::uint32_t>());
      for (double& s : scalars) s = in.get<double>();
      KernelArgs args(rank_, std::move(slots[0]), std::move(slots[1]), std::move(scalars),
                      in.get_string());
      try {
        value = (*k)(args);
      } catch (const std::exception& e) {
        throw Error(fmt::format("kernel '{}' threw: {}", name, e.what()));
      }
      return;
    }
    case Op::AllReduce:
    case Op::Broadcast:
    case Op::AllGather: collective(c); return;
    case Op::Memory: value = static_cast<double>(held_bytes_); return;
    case Op::Shutdown: return;
  }
  throw ProtocolError(fmt::format("unknown command {}", static_cast<unsigned>(c.op)));
}

void Worker::collective(const Command& c) {
  // Every worker enters the same collectives in the master's order. One
  // whose buffer is poisoned must not leave the others waiting: they first
  // agree (a max over one integer) whether anyone's is.
  std::string cause;
  std::uint64_t bad = 0;
  for (std::uint64_t id : {c.buffer[0], c.op == Op::AllGather ? c.buffer[1] : c.buffer[0]}) {
    settle(id);
    auto it = buffers_.find(id);
    if (it == buffers_.end()) {
      cause = fmt::format("buffer #{} is not on {}", id, me_);
    } else if (!it->second.poisoned.empty() && cause.empty()) {
      cause = it->second.poisoned;
      bad = id;
    }
  }
  std::int32_t flag = cause.empty() ? 0 : rank_;
  workers_.all_reduce(std::span(&flag, 1), ReduceOp::Max);
  if (!cause.empty()) {
    if (bad != 0) throw Poisoned(bad, cause);
    throw Error(cause);
  }
  if (flag != 0)
    throw Error(fmt::format("worker {}'s buffer is poisoned (its error says why)", flag));
  Buf& b = use(c.buffer[0]);
  switch (c.op) {
    case Op::AllReduce:
      workers_.run_collective(Collective::AllReduce, b.dtype, b.data.get(), b.data.get(), b.count,
                              static_cast<ReduceOp>(c.reduce));
      return;
    case Op::Broadcast:
      workers_.run_collective(Collective::Broadcast, b.dtype, b.data.get(), b.data.get(), b.count,
                              ReduceOp::Sum, c.peer - 1);
      return;
    default: {
      Buf& out = use(c.buffer[1]);
      workers_.run_collective(Collective::AllGather, b.dtype, b.data.get(), out.data.get(),
                              b.count);
      return;
    }
  }
}

void Worker::serve() {
  Command next;
  auto command_recv = [&] {
    return t_->irecv(0, master_worker_tag(wire::kCommand, 0), &next, sizeof next);
  };
  transport::RequestPtr pending = command_recv();
  std::vector<transport::RequestPtr> waits;
  while (true) {
    // Waiting for the master: what finished meanwhile goes back now.
    while (!t_->test(pending)) {
      reap(false);
      flush();
      waits.assign({pending});
      for (const auto& f : in_flight_) waits.push_back(f.request);
      t_->wait_any(waits, 100ms);
    }
    try {
      t_->wait(pending);
    } catch (const Error& e) {
      throw ConnectionError(fmt::format("{}: the master ({}) is gone: {}", me_,
                                        t_->describe_peer(0), e.what()));
    }
    const Command c = next;
    std::vector<std::byte> body(c.body_bytes);
    if (!body.empty()) {
      auto r = t_->irecv(0, master_worker_tag(wire::kBody, 0), body.data(), body.size());
      t_->wait(r, options_.timeout);
    }
    pending = command_recv();
    if (c.op == Op::Shutdown) {
      reap(true);
      buffers_.clear();
      record(c.seq, false, {});
      flush();
      for (auto& o : outgoing_) {
        t_->wait(o.header_send, options_.timeout);
        t_->wait(o.body_send, options_.timeout);
      }
      // The master's last word (a command numbered 0) says it has stopped
      // listening: leaving before it would look like a failure there.
      try {
        t_->wait(pending, options_.timeout);
      } catch (const Error& e) {
        log().warn("{}: no last word from the master after its shutdown: {}", me_, e.what());
      }
      return;
    }
    execute(c, body);
    reap(false);
    if (records_.size() >= 64 || std::chrono::steady_clock::now() - first_unsent_ > 1ms) flush();
  }
}

}  // namespace collie::mw
