// A worker's stream (worker.hpp): it takes the master's commands in order
// and runs each (worker_ops.cpp says what each does); transfers (a write's data, a read, a copy) are posted and
// left in flight, so two workers copying to each other never wait on each
// other, and the next operation on their buffer waits for them. Finished
// operations go back in batches: at 64, after a millisecond, or whenever
// the stream waits for the master.
#include "worker.hpp"

#include <cstring>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

#include "group/tags.hpp"
#include "master_state.hpp"

namespace collie::mw {

using namespace std::chrono_literals;
using wire::Command;
using wire::Op;


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
        poison(f.buffer, first);
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
  if (error.empty() && f.to_device) {
    try {
      auto it = buffers_.find(f.buffer);
      if (it != buffers_.end()) upload(it->second, f.bounce.data());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error.empty()) {
    record(f.seq, false, {});
    return;
  }
  if (f.writes) poison(f.buffer, fmt::format("{} on {}: {}", f.what, me_, error));
  record(f.seq, true, fmt::format("{}: {}", me_, error));
}

void Worker::finish_transfers(const std::function<bool(const InFlight&)>& which) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (which(*it)) {
      finish_transfer(*it);
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
}

void Worker::reap(bool all) {
  finish_transfers([&](const InFlight& f) { return all || t_->test(f.request); });
}

void Worker::poison(std::uint64_t id, const std::string& cause) {
  auto it = buffers_.find(id);
  if (it != buffers_.end() && it->second.poisoned.empty()) it->second.poisoned = cause;
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
  for (auto id : outs) poison(id, cause);
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
