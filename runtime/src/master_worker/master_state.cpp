// The master's side of a run (master_state.hpp): submitting operations
// within each worker's window, and the thread that takes the workers'
// completions, sends large writes' data when asked, and fails a dead
// worker's operations.
#include "master_state.hpp"

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

#include "group/tags.hpp"

namespace collie::mw::detail {

using namespace std::chrono_literals;

const char* op_name(wire::Op op) {
  switch (op) {
    case wire::Op::Alloc: return "alloc";
    case wire::Op::Free: return "free";
    case wire::Op::Fill: return "fill";
    case wire::Op::Scale: return "scale";
    case wire::Op::Axpy: return "axpy";
    case wire::Op::Binary: return "binary";
    case wire::Op::Reduce: return "reduce";
    case wire::Op::WriteInline:
    case wire::Op::Write: return "write";
    case wire::Op::Read: return "read";
    case wire::Op::CopySend:
    case wire::Op::CopyRecv:
    case wire::Op::CopyLocal: return "copy";
    case wire::Op::Call: return "call";
    case wire::Op::AllReduce: return "all_reduce";
    case wire::Op::Broadcast: return "broadcast";
    case wire::Op::AllGather: return "all_gather";
    case wire::Op::Memory: return "memory";
    case wire::Op::Shutdown: return "shutdown";
  }
  return "?";
}

MasterState::MasterState(std::shared_ptr<transport::Transport> t, const Kernels& k, Options o,
                         store::Store* s, std::chrono::milliseconds stall)
    : transport(std::move(t)), store(s), stall_time(stall), kernels(k), options(o) {
  sync->timeout = options.timeout;
  const int n = transport->world_size();
  links = std::vector<Link>(static_cast<std::size_t>(n > 0 ? n - 1 : 0));
  for (int r = 1; r < n; ++r) {
    Link& l = links[static_cast<std::size_t>(r - 1)];
    l.rank = r;
    l.name = fmt::format("worker {} ({})", r, transport->describe_peer(r));
    post_receives(l);
  }
  completions = std::thread([this] { run_completions(); });
}

MasterState::~MasterState() {
  {
    std::lock_guard lock(sync->mu);
    stopping = true;
  }
  if (completions.joinable()) completions.join();
}

Link& MasterState::link(int worker) {
  if (worker < 1 || worker > static_cast<int>(links.size())) {
    throw ArgumentError(fmt::format("master-worker: {} is not a worker (the workers are ranks 1 "
                                    "to {})",
                                    worker, links.size()));
  }
  return links[static_cast<std::size_t>(worker - 1)];
}

std::shared_ptr<OpState> MasterState::new_op(std::string what, int parts) {
  auto op = std::make_shared<OpState>();
  op->sync = sync;
  op->what = std::move(what);
  op->parts = parts;
  return op;
}

void MasterState::post_receives(Link& l) {
  l.done_recv = transport->irecv(l.rank, master_worker_tag(wire::kDone, 0), &l.done_header,
                                 sizeof l.done_header);
  l.ready_recv =
      transport->irecv(l.rank, master_worker_tag(wire::kReady, 0), &l.ready_seq, sizeof l.ready_seq);
}

void MasterState::submit(int worker, wire::Command c, std::vector<std::byte> body, Part part) {
  Link& l = link(worker);
  std::unique_lock lock(sync->mu);
  if (closed) throw Error("master-worker: the run has ended");
  // Room in the window: given up on when the worker finishes nothing for
  // the timeout (not when a slow one keeps it full).
  const auto started = std::chrono::steady_clock::now();
  while (l.failure.empty() && l.pending.size() >= options.window) {
    const auto now = std::chrono::steady_clock::now();
    if (now - std::max(l.last_news, started) >= options.timeout)
      throw TimeoutError(fmt::format("master-worker: no room in the window of {} operations: {}",
                                     options.window, stalled(l, now)));
    sync->cv.wait_for(lock, std::min<std::chrono::milliseconds>(options.timeout, 1s));
  }
  if (!l.failure.empty()) throw ConnectionError(l.failure);
  c.seq = l.next_seq++;
  c.body_bytes = static_cast<std::uint32_t>(body.size());
  // Finished sends give their memory back.
  while (!l.sends.empty() && transport->test(l.sends.front().command_send) &&
         (!l.sends.front().body_send || transport->test(l.sends.front().body_send)))
    l.sends.pop_front();
  if (c.op == wire::Op::Read) {
    part.data = transport->irecv(worker, master_worker_tag(wire::kData, c.seq), part.read_into,
                                 part.read_bytes);
  }
  if (l.pending.empty()) l.last_news = std::chrono::steady_clock::now();
  if (part.op->worker == 0) part.op->worker = worker;
  l.pending.emplace(c.seq, std::move(part));
  Link::Sent s;
  s.command = std::make_unique<wire::Command>(c);
  s.body = std::move(body);
  s.command_send = transport->isend(worker, master_worker_tag(wire::kCommand, 0), s.command.get(),
                                    sizeof(wire::Command), c.seq);
  if (!s.body.empty())
    s.body_send = transport->isend(worker, master_worker_tag(wire::kBody, 0), s.body.data(),
                                   s.body.size(), c.seq);
  l.sends.push_back(std::move(s));
}

Event MasterState::queue(int worker, const wire::Command& c, std::shared_ptr<OpState> op,
                         std::vector<std::byte> body, Part part) {
  part.op = op;
  std::lock_guard submitting(submit_mu);
  submit(worker, c, std::move(body), std::move(part));
  return event(std::move(op));
}

Event MasterState::queue(int worker, const wire::Command& c, std::string what,
                         std::vector<std::byte> body, Part part) {
  return queue(worker, c, new_op(std::move(what), 1), std::move(body), std::move(part));
}

void MasterState::release(int worker, std::uint64_t id) noexcept {
  try {
    std::lock_guard submitting(submit_mu);
    {
      std::lock_guard lock(sync->mu);
      if (closed || !link(worker).failure.empty()) return;
    }
    wire::Command c;
    c.op = wire::Op::Free;
    c.buffer[0] = id;
    submit(worker, c, {}, Part{new_op(fmt::format("free(#{}) on worker {}", id, worker), 1)});
  } catch (const std::exception& e) {
    log().warn("master-worker: freeing buffer #{} on worker {}: {}", id, worker, e.what());
  }
}

void MasterState::finish_part(OpState& op, bool failed, bool connection, const std::string& error,
                              double value) {
  // A worker's death names the failure of every operation with a part on
  // it, also where another part failed first for its sake (a copy from a
  // live worker whose send to the dead one failed: "its process ended").
  if (failed && (op.error.empty() || (connection && !op.connection))) {
    op.error = fmt::format("{} failed: {}", op.what, error);
    op.connection = connection;
  }
  if (!failed) op.value = value;
  if (--op.parts == 0) op.done = true;
}

void MasterState::fail_worker(Link& l, const std::string& why) {
  if (!l.failure.empty()) return;
  l.failure = fmt::format("{} died: {}", l.name, why);
  if (!closed) log().error("master-worker: {}", l.failure);
  for (auto& [seq, part] : l.pending) {
    if (part.data) {
      try {
        transport->wait(part.data, 1ms);
      } catch (const std::exception&) {
      }
    }
    finish_part(*part.op, true, true, l.failure, 0);
  }
  l.pending.clear();
  sync->cv.notify_all();
}

void MasterState::take_completions(Link& l) {
  // The header came; the records follow at once in their body.
  const wire::CompletionsHeader h = l.done_header;
  std::vector<std::byte> body(h.body_bytes);
  if (!body.empty()) {
    auto r = transport->irecv(l.rank, master_worker_tag(wire::kDoneBody, 0), body.data(),
                              body.size());
    transport->wait(r, options.timeout);
  }
  wire::Reader in(body);
  std::vector<wire::Record> records(h.records);
  for (auto& r : records) r = in.get<wire::Record>();
  std::vector<std::string> messages(h.records);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto* p = in.take(records[i].message_bytes);
    messages[i].assign(reinterpret_cast<const char*>(p), records[i].message_bytes);
  }
  // A read's data came before its record, in the stream's order: its
  // receive is done (or, for a read that failed, withdrawn here).
  std::vector<std::pair<transport::RequestPtr, bool>> reads;
  {
    std::lock_guard lock(sync->mu);
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto it = l.pending.find(records[i].seq);
      if (it == l.pending.end()) continue;
      if (it->second.data) reads.emplace_back(it->second.data, records[i].failed != 0);
    }
  }
  std::vector<std::string> read_errors(reads.size());
  for (std::size_t i = 0; i < reads.size(); ++i) {
    try {
      transport->wait(reads[i].first, reads[i].second ? 1ms : options.timeout);
    } catch (const std::exception& e) {
      read_errors[i] = e.what();
    }
  }
  std::lock_guard lock(sync->mu);
  l.last_news = std::chrono::steady_clock::now();
  if (l.stall_rounds > 0) {
    log().warn("master-worker: {} goes on again after its stall", l.name);
    l.stall_rounds = 0;
    sync->stall_reports.erase(l.rank);
  }
  std::size_t read_index = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto it = l.pending.find(records[i].seq);
    if (it == l.pending.end()) continue;
    Part& part = it->second;
    bool failed = records[i].failed != 0;
    std::string error = messages[i];
    if (part.data) {
      const std::string& e = read_errors[read_index++];
      if (!failed && !e.empty()) {
        failed = true;
        error = e;
      }
    }
    finish_part(*part.op, failed, false, error, records[i].value);
    l.pending.erase(it);
  }
  sync->cv.notify_all();
}

void MasterState::take_ready(Link& l) {
  const std::uint64_t seq = l.ready_seq;
  const void* data = nullptr;
  std::size_t bytes = 0;
  {
    std::lock_guard lock(sync->mu);
    auto it = l.pending.find(seq);
    if (it == l.pending.end()) return;
    data = it->second.write_data;
    bytes = it->second.write_bytes;
  }
  auto send = transport->isend(l.rank, master_worker_tag(wire::kData, seq), data, bytes, seq);
  std::lock_guard lock(sync->mu);
  auto it = l.pending.find(seq);
  if (it != l.pending.end()) it->second.write_send = std::move(send);
}

void MasterState::run_completions() {
  // Beside the master's program thread, which may share its processor
  // (ranks bound to one each): its waits yield to it (transport.hpp).
  transport::set_waits_for_others(true);
  std::vector<transport::RequestPtr> waits;
  while (true) {
    waits.clear();
    {
      std::lock_guard lock(sync->mu);
      if (stopping) return;
      for (auto& l : links) {
        if (!l.failure.empty()) continue;
        waits.push_back(l.done_recv);
        waits.push_back(l.ready_recv);
      }
    }
    if (waits.empty()) {
      std::unique_lock lock(sync->mu);
      sync->cv.wait_for(lock, 50ms, [&] { return stopping; });
      continue;
    }
    transport->wait_any(waits, 100ms);
    {
      std::lock_guard lock(sync->mu);
      if (stopping) return;
    }
    for (auto& l : links) {
      {
        std::lock_guard lock(sync->mu);
        if (!l.failure.empty()) continue;
      }
      try {
        if (transport->test(l.done_recv)) {
          transport->wait(l.done_recv);
          take_completions(l);
          l.done_recv = transport->irecv(l.rank, master_worker_tag(wire::kDone, 0),
                                         &l.done_header, sizeof l.done_header);
        }
        if (transport->test(l.ready_recv)) {
          transport->wait(l.ready_recv);
          take_ready(l);
          l.ready_recv = transport->irecv(l.rank, master_worker_tag(wire::kReady, 0),
                                          &l.ready_seq, sizeof l.ready_seq);
        }
      } catch (const Error& e) {
        // The backend's word on the peer is shorter than the receive's.
        const std::string why = transport->failure_of(l.rank);
        std::lock_guard lock(sync->mu);
        fail_worker(l, why.empty() ? e.what() : why);
      }
    }
    watch_stalls();
  }
}

void MasterState::drain(const char* what) {
  std::unique_lock lock(sync->mu);
  const auto started = std::chrono::steady_clock::now();
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    bool busy = false;
    std::string stuck;
    for (const auto& l : links) {
      if (!l.failure.empty() || l.pending.empty()) continue;
      busy = true;
      if (now - std::max(l.last_news, started) < options.timeout) continue;
      const auto report = sync->stall_reports.find(l.rank);
      stuck += fmt::format("; {}", report != sync->stall_reports.end() ? report->second
                                                                        : stalled(l, now));
    }
    if (!busy) return;
    if (!stuck.empty())
      throw TimeoutError(fmt::format("master-worker: {}: no progress for {} ms{}", what,
                                     options.timeout.count(), stuck));
    sync->cv.wait_for(lock, std::min<std::chrono::milliseconds>(options.timeout, 1s));
  }
}

void MasterState::shutdown() {
  std::exception_ptr failed;
  {
    std::lock_guard submitting(submit_mu);
    try {
      drain("waiting for the operations queued before the end");
    } catch (const TimeoutError& e) {
      failed = std::current_exception();
      log().error("{}", e.what());
    }
    for (auto& l : links) {
      {
        std::lock_guard lock(sync->mu);
        if (!l.failure.empty()) continue;
      }
      auto op = new_op(fmt::format("shutdown of {}", l.name), 1);
      wire::Command c;
      c.op = wire::Op::Shutdown;
      try {
        submit(l.rank, c, {}, Part{op});
      } catch (const Error& e) {
        log().warn("master-worker: {}", e.what());
      }
    }
    std::lock_guard lock(sync->mu);
    closed = true;
  }
  // Every send of ours finished before a worker answered its shutdown.
  if (!failed) {
    try {
      drain("shutting the workers down");
    } catch (const TimeoutError&) {
      failed = std::current_exception();
    }
  }
  {
    std::lock_guard lock(sync->mu);
    stopping = true;
  }
  if (completions.joinable()) completions.join();
  // Nothing follows a worker's shutdown: the receives still posted are
  // withdrawn (a wait that times out), so no transport holds our memory
  // and none sees a worker's leaving as a failure; then each worker is told
  // it may go (a command numbered 0).
  wire::Command last;
  last.op = wire::Op::Shutdown;
  std::vector<transport::RequestPtr> byes;
  for (auto& l : links) {
    for (auto* r : {&l.done_recv, &l.ready_recv}) {
      try {
        if (*r) transport->wait(*r, 1ms);
      } catch (const std::exception&) {
      }
    }
    if (l.failure.empty())
      byes.push_back(transport->isend(l.rank, master_worker_tag(wire::kCommand, 0), &last,
                                      sizeof last, 0));
  }
  for (auto& r : byes) {
    try {
      transport->wait(r, options.timeout);
    } catch (const std::exception& e) {
      log().warn("master-worker: telling a worker to go: {}", e.what());
    }
  }
  if (failed) std::rethrow_exception(failed);
}

BufferState::~BufferState() {
  if (!queued) return;  // (an alloc that threw: possibly with the submit lock held)
  if (auto m = master.lock()) m->release(worker, id);
}

}  // namespace collie::mw::detail
