// The helpers every schedule is written with, and the checks and symbolic
// execution that read them (schedule.hpp).
#include <algorithm>

#include <fmt/format.h>

#include <collie/collectives/schedule.hpp>
#include <collie/error.hpp>

namespace collie::collectives {

Range chunk(std::size_t count, int parts, int i) {
  const auto n = static_cast<std::size_t>(parts);
  const auto k = static_cast<std::size_t>(i);
  const std::size_t base = count / n;
  const std::size_t extra = count % n;
  return Range{k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

Range block(std::size_t count, int i) {
  return Range{static_cast<std::size_t>(i) * count, count};
}

void add_send(Step& step, int peer, Range range) {
  if (range.count > 0) step.sends.push_back({peer, range, Combine::Copy});
}
void add_recv(Step& step, int peer, Range range, Combine combine) {
  if (range.count > 0) step.recvs.push_back({peer, range, combine});
}
void add_copy(Step& step, Range from, Range to) {
  if (from.count > 0) step.copies.push_back({from, to});
}
void push_step(Schedule& s, Step step) {
  if (!step.sends.empty() || !step.recvs.empty() || !step.copies.empty())
    s.steps.push_back(std::move(step));
}
int wrap(int i, int n) {
  return ((i % n) + n) % n;
}

SymbolicBuffers own_contributions(int world, std::size_t count) {
  SymbolicBuffers buffers(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    buffers[static_cast<std::size_t>(r)].assign(count, Contribution{r});
  return buffers;
}

bool overlap(const Range& a, const Range& b) {
  return a.count > 0 && b.count > 0 && a.offset < b.offset + b.count &&
         b.offset < a.offset + a.count;
}

bool receives_overlap_sends(const Step& step) {
  for (const auto& r : step.recvs)
    for (const auto& s : step.sends)
      if (overlap(r.range, s.range)) return true;
  return false;
}

namespace {

void check_range(const Schedule& s, const Range& range, const std::string& where) {
  if (range.offset + range.count > s.buffer_count)
    throw Error(fmt::format("{}: range [{}, {}) outside a buffer of {}", where, range.offset,
                            range.offset + range.count, s.buffer_count));
}

void check_step(const Schedule& s, int rank, std::size_t index, int world) {
  const auto& step = s.steps[index];
  auto where = [&] { return fmt::format("rank {} step {}", rank, index); };
  for (const auto* list : {&step.sends, &step.recvs}) {
    for (const auto& t : *list) {
      if (t.peer < 0 || t.peer >= world || t.peer == rank)
        throw Error(fmt::format("{}: peer {} is not another rank of {}", where(), t.peer, world));
      if (t.range.count == 0) throw Error(fmt::format("{}: an empty transfer", where()));
      check_range(s, t.range, where());
    }
  }
  for (const auto& c : step.copies) {
    if (c.from.count != c.to.count || c.from.count == 0)
      throw Error(fmt::format("{}: a local copy of {} elements into {}", where(), c.from.count,
                              c.to.count));
    check_range(s, c.from, where());
    check_range(s, c.to, where());
    if (overlap(c.from, c.to)) throw Error(fmt::format("{}: a local copy onto itself", where()));
  }
  for (std::size_t i = 0; i < step.recvs.size(); ++i) {
    for (std::size_t j = i + 1; j < step.recvs.size(); ++j)
      if (overlap(step.recvs[i].range, step.recvs[j].range))
        throw Error(fmt::format("{}: two receives overlap", where()));
  }
}

}  // namespace

void throw_deadlock(const char* who, const std::vector<Schedule>& schedules,
                    const std::vector<std::size_t>& next) {
  std::string stuck;
  for (std::size_t r = 0; r < schedules.size(); ++r)
    if (next[r] < schedules[r].steps.size()) stuck += fmt::format(" rank {} at step {};", r, next[r]);
  throw Error(fmt::format("{}: deadlock:{}", who, stuck));
}

void throw_unreceived(const char* who, std::size_t from, std::size_t to, std::size_t count) {
  throw Error(fmt::format("{}: rank {} sent rank {} {} message(s) never received", who, from, to,
                          count));
}

void validate(const std::vector<Schedule>& schedules) {
  const int world = static_cast<int>(schedules.size());
  for (int r = 0; r < world; ++r) {
    const auto& s = schedules[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < s.steps.size(); ++i) check_step(s, r, i, world);
  }
  // Messages as their sizes: matched in order, as the runtime matches them.
  run_schedules<std::size_t>(
      schedules, "validate",
      [&](std::size_t r, std::size_t index) {
        std::vector<std::size_t> out;
        for (const auto& t : schedules[r].steps[index].sends) out.push_back(t.range.count);
        return out;
      },
      [&](std::size_t r, std::size_t index, const std::vector<std::size_t>& sizes) {
        const auto& recvs = schedules[r].steps[index].recvs;
        for (std::size_t k = 0; k < recvs.size(); ++k)
          if (sizes[k] != recvs[k].range.count)
            throw Error(
                fmt::format("rank {} step {}: receives {} elements from rank {}, which sent {}",
                            r, index, recvs[k].range.count, recvs[k].peer, sizes[k]));
      });
}

SymbolicBuffers simulate(const std::vector<Schedule>& schedules, SymbolicBuffers buffers) {
  const int world = static_cast<int>(schedules.size());
  const auto n = static_cast<std::size_t>(world);
  if (buffers.size() != n) throw Error("simulate: one initial buffer per rank");
  for (int r = 0; r < world; ++r) {
    const auto& s = schedules[static_cast<std::size_t>(r)];
    auto& buffer = buffers[static_cast<std::size_t>(r)];
    if (buffer.size() > s.buffer_count)
      throw Error(fmt::format("simulate: rank {}'s buffer has {} elements, its schedule {}", r,
                              buffer.size(), s.buffer_count));
    buffer.resize(s.buffer_count);  // a schedule's scratch past its layout starts empty
  }
  validate(schedules);
  using Message = std::vector<Contribution>;
  run_schedules<Message>(
      schedules, "simulate",
      [&](std::size_t r, std::size_t index) {
        const auto& step = schedules[r].steps[index];
        auto& buffer = buffers[r];
        for (const auto& c : step.copies)
          for (std::size_t i = 0; i < c.from.count; ++i)
            buffer[c.to.offset + i] = buffer[c.from.offset + i];
        std::vector<Message> out;
        for (const auto& t : step.sends) {
          const auto first = buffer.begin() + static_cast<std::ptrdiff_t>(t.range.offset);
          out.emplace_back(first, first + static_cast<std::ptrdiff_t>(t.range.count));
        }
        return out;
      },
      [&](std::size_t r, std::size_t index, std::vector<Message>& messages) {
        const auto& step = schedules[r].steps[index];
        auto& buffer = buffers[r];
        for (std::size_t k = 0; k < step.recvs.size(); ++k) {
          const auto& t = step.recvs[k];
          auto& message = messages[k];  // its size checked by validate()
          for (std::size_t i = 0; i < message.size(); ++i) {
            auto& element = buffer[t.range.offset + i];
            if (t.combine == Combine::Copy) {
              element = std::move(message[i]);
            } else {
              element.insert(element.end(), message[i].begin(), message[i].end());
              std::sort(element.begin(), element.end());
            }
          }
        }
      });
  return buffers;
}

}  // namespace collie::collectives
