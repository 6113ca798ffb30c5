// What each of the master's commands does on a worker (worker.hpp): the
// built-in operations (on device buffers through a host copy), transfers
// posted and left in flight, kernels, and collectives among the workers.
#include <cstring>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "group/tags.hpp"
#include "elementwise.hpp"
#include "master_state.hpp"
#include "worker.hpp"

namespace collie::mw {

using wire::Command;
using wire::Op;

void Worker::run_command(const Command& c, const std::vector<std::byte>& body, double& value,
                         bool& later) {
  const auto dtype = static_cast<DataType>(c.dtype);
  switch (c.op) {
    case Op::Alloc: {
      Buf b;
      b.dtype = dtype;
      b.count = c.count;
      b.bytes = c.count * dtype_size(dtype);
      b.device = c.peer;
      auto [it, fresh] = buffers_.emplace(c.buffer[0], std::move(b));
      it->second.data = allocate(it->second.bytes, it->second.device);
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
      Host::update(*this, b, false, [&](std::byte* p) { fill(b.dtype, p, b.count, c.scalar); });
      return;
    }
    case Op::Scale: {
      Buf& b = use(c.buffer[0]);
      Host::update(*this, b, true, [&](std::byte* p) { scale(b.dtype, p, b.count, c.scalar); });
      return;
    }
    case Op::Axpy: {
      Buf& x = use(c.buffer[1]);
      Buf& y = use(c.buffer[0]);
      Host hx(*this, x, true);
      Host::update(*this, y, true,
                   [&](std::byte* p) { axpy(y.dtype, p, hx.data(), y.count, c.scalar); });
      return;
    }
    case Op::Binary: {
      Buf& a = use(c.buffer[1]);
      Buf& b = use(c.buffer[2]);
      Buf& out = use(c.buffer[0]);
      const auto op = static_cast<ReduceOp>(c.reduce);
      const bool is_a = c.buffer[0] == c.buffer[1], is_b = c.buffer[0] == c.buffer[2];
      Host ha(*this, a, !is_a), hb(*this, b, !is_b), ho(*this, out, is_a || is_b);
      // Every elementwise op here is commutative: out = op(out, other).
      if (is_a && is_b) {  // op(x, x): the kernels take ranges that do not overlap
        std::vector<std::byte> x(ho.data(), ho.data() + out.bytes);
        collie::reduce(out.dtype, op, ho.data(), x.data(), out.count);
      } else if (is_b) {
        collie::reduce(out.dtype, op, ho.data(), ha.data(), out.count);
      } else {
        if (!is_a && out.bytes > 0) std::memcpy(ho.data(), ha.data(), out.bytes);
        collie::reduce(out.dtype, op, ho.data(), hb.data(), out.count);
      }
      ho.store();
      return;
    }
    case Op::Reduce: {
      Buf& b = use(c.buffer[0]);
      Host h(*this, b, true);
      value = reduce_all(b.dtype, h.data(), b.count, static_cast<ReduceOp>(c.reduce));
      return;
    }
    case Op::WriteInline: {
      Buf& b = use(c.buffer[0]);
      if (body.size() != b.bytes) throw ProtocolError("write: the data does not fit the buffer");
      Host::update(*this, b, false, [&](std::byte* p) {
        if (!body.empty()) std::memcpy(p, body.data(), body.size());
      });
      return;
    }
    case Op::Write: {
      Buf& b = use(c.buffer[0]);
      InFlight f;
      f.seq = c.seq;
      f.buffer = c.buffer[0];
      f.writes = true;
      f.what = describe(c);
      void* into = b.data.get();
      if (b.device >= 0) {
        f.bounce.resize(b.bytes);
        f.to_device = true;
        into = f.bounce.data();
      }
      f.request = t_->irecv(0, master_worker_tag(wire::kData, c.seq), into, b.bytes);
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
      // A device buffer's bytes go from a host copy (its transfer keeps it).
      auto from = [&](Buf& b) -> const void* {
        if (b.device < 0) return b.data.get();
        f.bounce.resize(b.bytes);
        download(b, f.bounce.data());
        return f.bounce.data();
      };
      if (read) {
        Buf& b = use(c.buffer[0]);
        f.request = t_->isend(peer, tag, from(b), b.bytes, 0);
      } else {
        try {
          Buf& b = use(c.buffer[0]);
          f.request = t_->isend(peer, tag, from(b), b.bytes, 0);
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
      void* into = b.data.get();
      if (b.device >= 0) {
        f.bounce.resize(b.bytes);
        f.to_device = true;
        into = f.bounce.data();
      }
      f.request = t_->irecv(c.peer, master_worker_tag(wire::kCopy, c.transfer), into, b.bytes);
      in_flight_.push_back(std::move(f));
      later = true;
      return;
    }
    case Op::CopyLocal: {
      Buf& src = use(c.buffer[1]);
      Buf& dst = use(c.buffer[0]);
      if (c.buffer[0] == c.buffer[1] || dst.bytes == 0) return;
      Host hs(*this, src, true);
      Host::update(*this, dst, false, [&](std::byte* p) { std::memcpy(p, hs.data(), dst.bytes); });
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
          list.push_back({b.dtype, b.data.get(), b.count, b.device});
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

}  // namespace collie::mw
