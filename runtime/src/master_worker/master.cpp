// The master's calls (master_worker.hpp): each checks its arguments here,
// at the call, and queues one command on each worker it involves
// (master_state.cpp). The handles they return are handles.cpp's.
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/master_worker.hpp>

#include "elementwise.hpp"
#include "master_state.hpp"

namespace collie::mw {

using detail::OpState;
using detail::Part;
using wire::Command;
using wire::Op;

// ---- the master's calls ----

namespace {

const detail::BufferState& state_of(const std::shared_ptr<detail::BufferState>& s,
                                    const char* what) {
  if (!s) throw ArgumentError(fmt::format("{}: an empty Buffer", what));
  return *s;
}

}  // namespace

int Master::world_size() const {
  return static_cast<int>(state_->links.size()) + 1;
}

std::string Master::describe_worker(int worker) const {
  return state_->link(worker).name;
}

void Master::check_type(const Buffer& b, DataType want, const char* what) {
  const auto& s = state_of(b.state_, what);
  if (s.dtype != want)
    throw ArgumentError(fmt::format("{}: {} is {}, given {}", what, b.describe(),
                                    dtype_name(s.dtype), dtype_name(want)));
}

namespace {

// The checks every call makes of a buffer: given, of this run, and on a
// worker that is alive (a dead worker's buffers throw at once).
void check_live(detail::MasterState& m, const Buffer& b, const char* what) {
  if (!b) throw ArgumentError(fmt::format("{}: an empty Buffer", what));
  auto& l = m.link(b.worker());
  std::lock_guard lock(m.sync->mu);
  if (!l.failure.empty())
    throw ConnectionError(fmt::format("{}: {}: {}", what, b.describe(), l.failure));
}

void check_alike(const Buffer& a, const Buffer& b, const char* what) {
  if (a.dtype() != b.dtype() || a.count() != b.count())
    throw ArgumentError(fmt::format("{}: {} and {} differ in dtype or count", what, a.describe(),
                                    b.describe()));
}

void check_same_worker(const Buffer& a, const Buffer& b, const char* what) {
  if (a.worker() != b.worker())
    throw ArgumentError(fmt::format("{}: {} and {} are on different workers (copy() moves data "
                                    "between them)",
                                    what, a.describe(), b.describe()));
}

// Queues one part of a multi-worker operation; a worker found dead here
// fails its part (the others are queued and fail naming it, or go on).
void submit_part(detail::MasterState& m, int worker, const Command& c,
                 const std::shared_ptr<OpState>& op) {
  try {
    m.submit(worker, c, {}, Part{op});
  } catch (const ConnectionError& e) {
    std::lock_guard lock(m.sync->mu);
    m.finish_part(*op, true, true, e.what(), 0);
    m.sync->cv.notify_all();
  }
}

Command command(Op op, const Buffer& b) {
  Command c;
  c.op = op;
  c.dtype = static_cast<std::uint8_t>(b.dtype());
  c.buffer[0] = b.id();
  c.count = b.count();
  return c;
}

}  // namespace

Buffer Master::alloc(int worker, DataType dtype, std::size_t count, int device) {
  auto& m = *state_;
  std::lock_guard submitting(m.submit_mu);
  m.link(worker);
  auto s = std::make_shared<detail::BufferState>();
  s->master = state_;
  s->worker = worker;
  s->id = m.next_buffer++;
  s->dtype = dtype;
  s->count = count;
  s->device = device < 0 ? -1 : device;
  Buffer b = m.buffer(s);
  check_live(m, b, "alloc");
  Command c = command(Op::Alloc, b);
  c.peer = s->device;
  m.submit(worker, c, {}, Part{m.new_op(fmt::format("alloc({})", b.describe()), 1)});
  s->queued = true;
  return b;
}

Event Master::fill(const Buffer& b, double value) {
  auto& m = *state_;
  check_live(m, b, "fill");
  check_scalar(b.dtype(), value, "fill", false);
  Command c = command(Op::Fill, b);
  c.scalar = value;
  return m.queue(b.worker(), c, fmt::format("fill({}, {})", b.describe(), value));
}

Event Master::scale(const Buffer& b, double factor) {
  auto& m = *state_;
  check_live(m, b, "scale");
  check_scalar(b.dtype(), factor, "scale", true);
  Command c = command(Op::Scale, b);
  c.scalar = factor;
  return m.queue(b.worker(), c, fmt::format("scale({}, {})", b.describe(), factor));
}

Event Master::axpy(const Buffer& y, double a, const Buffer& x) {
  auto& m = *state_;
  check_live(m, y, "axpy");
  check_live(m, x, "axpy");
  check_alike(y, x, "axpy");
  check_same_worker(y, x, "axpy");
  check_scalar(y.dtype(), a, "axpy", true);
  Command c = command(Op::Axpy, y);
  c.buffer[1] = x.id();
  c.scalar = a;
  return m.queue(y.worker(), c, fmt::format("axpy({}, {}, #{})", y.describe(), a, x.id()));
}

Event Master::combine(const Buffer& acc, const Buffer& in, ReduceOp rop) {
  return binary(acc, acc, rop, in);
}

Event Master::binary(const Buffer& out, const Buffer& a, ReduceOp rop, const Buffer& b) {
  auto& m = *state_;
  for (const Buffer* x : {&out, &a, &b}) check_live(m, *x, reduce_op_name(rop).data());
  check_alike(out, a, "binary");
  check_alike(out, b, "binary");
  check_same_worker(out, a, "binary");
  check_same_worker(out, b, "binary");
  check_supported(out.dtype(), rop);
  if (rop == ReduceOp::Avg)
    throw ArgumentError("binary: avg is not elementwise between two buffers; use sum and scale");
  Command c = command(Op::Binary, out);
  c.buffer[1] = a.id();
  c.buffer[2] = b.id();
  c.reduce = static_cast<std::uint8_t>(rop);
  return m.queue(out.worker(), c,
                 fmt::format("{}({}, #{}, #{})", reduce_op_name(rop), out.describe(), a.id(),
                             b.id()));
}

Future<double> Master::reduce(const Buffer& b, ReduceOp rop) {
  auto& m = *state_;
  check_live(m, b, "reduce");
  switch (rop) {
    case ReduceOp::Sum:
    case ReduceOp::Product:
    case ReduceOp::Min:
    case ReduceOp::Max:
    case ReduceOp::Avg: break;
    default:
      throw ArgumentError(fmt::format("reduce: {} is not a reduction to a scalar (sum, prod, min, "
                                      "max, avg)",
                                      reduce_op_name(rop)));
  }
  Command c = command(Op::Reduce, b);
  c.reduce = static_cast<std::uint8_t>(rop);
  return Future<double>(
      m.queue(b.worker(), c, fmt::format("reduce({}, {})", b.describe(), reduce_op_name(rop))));
}

Event Master::write(const Buffer& b, const void* data, std::size_t bytes) {
  auto& m = *state_;
  check_live(m, b, "write");
  if (bytes != b.bytes())
    throw ArgumentError(fmt::format("write: {} holds {} bytes, given {}", b.describe(), b.bytes(),
                                    bytes));
  Part part{nullptr};
  std::vector<std::byte> body;
  Command c = command(Op::Write, b);
  if (bytes <= wire::kInlineWriteBytes) {
    c.op = Op::WriteInline;
    body.assign(static_cast<const std::byte*>(data), static_cast<const std::byte*>(data) + bytes);
  } else {
    part.write_data = data;
    part.write_bytes = bytes;
  }
  return m.queue(b.worker(), c, fmt::format("write({})", b.describe()), std::move(body),
                 std::move(part));
}

Event Master::read(const Buffer& b, void* out, std::size_t bytes) {
  return read_kept(b, nullptr, out, bytes);
}

Event Master::read_kept(const Buffer& b, std::shared_ptr<void> keep, void* out,
                        std::size_t bytes) {
  auto& m = *state_;
  check_live(m, b, "read");
  if (bytes != b.bytes())
    throw ArgumentError(fmt::format("read: {} holds {} bytes, given room for {}", b.describe(),
                                    b.bytes(), bytes));
  auto op = m.new_op(fmt::format("read({})", b.describe()), 1);
  op->keep = std::move(keep);
  Part part{nullptr};
  part.read_into = out;
  part.read_bytes = bytes;
  return m.queue(b.worker(), command(Op::Read, b), op, {}, std::move(part));
}

Event Master::copy(const Buffer& dst, const Buffer& src) {
  auto& m = *state_;
  check_live(m, dst, "copy");
  check_live(m, src, "copy");
  check_alike(dst, src, "copy");
  std::string what = fmt::format("copy({} <- {})", dst.describe(), src.describe());
  if (dst.worker() == src.worker()) {
    Command c = command(Op::CopyLocal, dst);
    c.buffer[1] = src.id();
    return m.queue(dst.worker(), c, std::move(what));
  }
  auto op = m.new_op(std::move(what), 2);
  std::lock_guard submitting(m.submit_mu);
  const std::uint64_t transfer = m.next_copy++;
  Command send = command(Op::CopySend, src);
  send.peer = dst.worker();
  send.transfer = transfer;
  Command recv = command(Op::CopyRecv, dst);
  recv.peer = src.worker();
  recv.transfer = transfer;
  submit_part(m, src.worker(), send, op);
  submit_part(m, dst.worker(), recv, op);
  return m.event(op);
}

Future<double> Master::call(int worker, std::string_view name, const std::vector<Buffer>& inputs,
                            const std::vector<Buffer>& outputs, const std::vector<double>& scalars,
                            std::string_view text) {
  auto& m = *state_;
  m.link(worker);
  if (m.kernels.find(name) == nullptr)
    throw ArgumentError(fmt::format("call: no kernel is registered as '{}'", name));
  wire::Writer body;
  body.put_string(name);
  for (const auto* list : {&inputs, &outputs}) {
    body.put(static_cast<std::uint32_t>(list->size()));
    for (const Buffer& b : *list) {
      check_live(m, b, "call");
      if (b.worker() != worker)
        throw ArgumentError(fmt::format("call: {} is not on worker {}", b.describe(), worker));
      body.put(b.id());
    }
  }
  body.put(static_cast<std::uint32_t>(scalars.size()));
  for (double s : scalars) body.put(s);
  body.put_string(text);
  Command c;
  c.op = Op::Call;
  return Future<double>(
      m.queue(worker, c, fmt::format("call({}) on worker {}", name, worker), std::move(body.bytes)));
}

namespace {

void check_one_per_worker(detail::MasterState& m, const std::vector<Buffer>& buffers,
                          const char* what) {
  if (buffers.size() != m.links.size())
    throw ArgumentError(fmt::format("{}: {} buffers for {} workers (one on each, in worker "
                                    "order)",
                                    what, buffers.size(), m.links.size()));
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    check_live(m, buffers[i], what);
    if (buffers[i].worker() != static_cast<int>(i) + 1)
      throw ArgumentError(fmt::format("{}: buffer {} is {}, not on worker {}", what, i,
                                      buffers[i].describe(), i + 1));
    check_alike(buffers[i], buffers[0], what);
  }
}

}  // namespace

Event Master::all_reduce(const std::vector<Buffer>& buffers, ReduceOp rop) {
  auto& m = *state_;
  check_one_per_worker(m, buffers, "all_reduce");
  if (buffers.empty()) return {};
  check_supported(buffers[0].dtype(), rop);
  auto op = m.new_op(fmt::format("all_reduce({}[{}], {}) on the workers",
                                 dtype_name(buffers[0].dtype()), buffers[0].count(),
                                 reduce_op_name(rop)),
                     static_cast<int>(buffers.size()));
  std::lock_guard submitting(m.submit_mu);
  for (const Buffer& b : buffers) {
    Command c = command(Op::AllReduce, b);
    c.reduce = static_cast<std::uint8_t>(rop);
    submit_part(m, b.worker(), c, op);
  }
  return m.event(op);
}

Event Master::broadcast(const std::vector<Buffer>& buffers, int root_worker) {
  auto& m = *state_;
  check_one_per_worker(m, buffers, "broadcast");
  if (buffers.empty()) return {};
  m.link(root_worker);
  auto op = m.new_op(fmt::format("broadcast({}[{}], root worker {}) on the workers",
                                 dtype_name(buffers[0].dtype()), buffers[0].count(), root_worker),
                     static_cast<int>(buffers.size()));
  std::lock_guard submitting(m.submit_mu);
  for (const Buffer& b : buffers) {
    Command c = command(Op::Broadcast, b);
    c.peer = root_worker;
    submit_part(m, b.worker(), c, op);
  }
  return m.event(op);
}

Event Master::all_gather(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs) {
  auto& m = *state_;
  check_one_per_worker(m, inputs, "all_gather");
  check_one_per_worker(m, outputs, "all_gather");
  if (inputs.empty()) return {};
  if (outputs[0].dtype() != inputs[0].dtype() ||
      outputs[0].count() != inputs[0].count() * inputs.size())
    throw ArgumentError(fmt::format("all_gather: outputs must be {}[{}] ({} inputs), not {}",
                                    dtype_name(inputs[0].dtype()),
                                    inputs[0].count() * inputs.size(), inputs.size(),
                                    outputs[0].describe()));
  auto op = m.new_op(fmt::format("all_gather({}[{}]) on the workers",
                                 dtype_name(inputs[0].dtype()), inputs[0].count()),
                     static_cast<int>(inputs.size()));
  std::lock_guard submitting(m.submit_mu);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Command c = command(Op::AllGather, inputs[i]);
    c.buffer[1] = outputs[i].id();
    submit_part(m, inputs[i].worker(), c, op);
  }
  return m.event(op);
}

Future<double> Master::memory(int worker) {
  auto& m = *state_;
  Command c;
  c.op = Op::Memory;
  return Future<double>(m.queue(worker, c, fmt::format("memory() on worker {}", worker)));
}

void Master::synchronize() {
  std::lock_guard submitting(state_->submit_mu);
  state_->drain("synchronize");
}

}  // namespace collie::mw
