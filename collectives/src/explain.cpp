// `collie explain`'s symbolic run: the real schedules executed on runs of
// symbols, step by step (explain.hpp).
#include <algorithm>
#include <deque>

#include <fmt/format.h>

#include <collie/collectives/explain.hpp>
#include <collie/error.hpp>

namespace collie::collectives {

namespace {

std::size_t end_of(const Range& r) {
  return r.offset + r.count;
}

// Makes `pos` a boundary between two runs (pos within the buffer).
void split_at(RunBuffer& buffer, std::size_t pos) {
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    Run& run = buffer[i];
    if (run.offset == pos || pos >= run.offset + run.count) continue;
    if (pos < run.offset) return;
    const std::size_t head = pos - run.offset;
    Run tail{pos, run.count - head, run.symbols};
    for (auto& s : tail.symbols) s.index += head;
    run.count = head;
    buffer.insert(buffer.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(tail));
    return;
  }
}

// Joins neighbours whose symbols continue one another.
void normalize(RunBuffer& buffer) {
  RunBuffer out;
  for (auto& run : buffer) {
    if (run.count == 0) continue;
    if (!out.empty()) {
      Run& last = out.back();
      bool continues = last.symbols.size() == run.symbols.size();
      for (std::size_t k = 0; continues && k < run.symbols.size(); ++k)
        continues = last.symbols[k].rank == run.symbols[k].rank &&
                    last.symbols[k].index + last.count == run.symbols[k].index;
      if (continues) {
        last.count += run.count;
        continue;
      }
    }
    out.push_back(std::move(run));
  }
  buffer = std::move(out);
}

// Writes `content` (offsets relative to `range`) into `range`.
void write(RunBuffer& buffer, Range range, const std::vector<Run>& content, Combine combine) {
  split_at(buffer, range.offset);
  split_at(buffer, end_of(range));
  for (const auto& piece : content) {
    split_at(buffer, range.offset + piece.offset);
    split_at(buffer, range.offset + piece.offset + piece.count);
  }
  for (auto& run : buffer) {
    if (run.offset < range.offset || run.offset >= end_of(range)) continue;
    const std::size_t rel = run.offset - range.offset;
    const auto it = std::find_if(content.begin(), content.end(), [&](const Run& p) {
      return rel >= p.offset && rel < p.offset + p.count;
    });
    std::vector<Symbol> incoming = it->symbols;
    for (auto& s : incoming) s.index += rel - it->offset;
    if (combine == Combine::Copy) {
      run.symbols = std::move(incoming);
    } else {
      run.symbols.insert(run.symbols.end(), incoming.begin(), incoming.end());
      std::sort(run.symbols.begin(), run.symbols.end());
    }
  }
  normalize(buffer);
}

bool has_input(Collective c, int rank, int root) {
  return (c != Collective::Broadcast && c != Collective::Scatter) || rank == root;
}

struct Posted {
  int from = 0;
  std::size_t from_step = 0;
  Range range;
  std::size_t sent_in = 0;
  std::vector<Run> content;
};

}  // namespace

std::vector<Run> runs_in(const RunBuffer& buffer, Range range) {
  std::vector<Run> out;
  for (const auto& run : buffer) {
    const std::size_t lo = std::max(run.offset, range.offset);
    const std::size_t hi = std::min(run.offset + run.count, end_of(range));
    if (lo >= hi) continue;
    Run piece{lo - range.offset, hi - lo, run.symbols};
    for (auto& s : piece.symbols) s.index += lo - run.offset;
    out.push_back(std::move(piece));
  }
  return out;
}

std::vector<RunBuffer> initial_runs(Collective c, const Shape& shape) {
  std::vector<RunBuffer> state;
  for (int r = 0; r < shape.world; ++r) {
    Shape s = shape;
    s.rank = r;
    const auto l = layout(c, s);
    RunBuffer buffer{Run{0, l.buffer_count, {}}};
    if (has_input(c, r, shape.root) && l.input.count > 0)
      write(buffer, l.input, {Run{0, l.input.count, {Symbol{r, 0}}}}, Combine::Copy);
    normalize(buffer);
    state.push_back(std::move(buffer));
  }
  return state;
}

Explanation explain(Collective c, Algorithm a, const Shape& shape,
                    const std::function<void(const ExplainedStep&)>& on_step) {
  Explanation e;
  e.collective = c;
  e.algorithm = a;
  e.shape = shape;
  e.shape.rank = 0;
  for (int r = 0; r < shape.world; ++r) {
    Shape s = shape;
    s.rank = r;
    e.schedules.push_back(make_schedule(c, a, s));
  }
  // What is explained below is a schedule the runtime can run.
  validate(e.schedules);
  e.initial = initial_runs(c, shape);
  // A schedule's scratch past the layout (two_level all_to_all's) starts
  // empty.
  for (std::size_t r = 0; r < e.initial.size(); ++r) {
    auto& buffer = e.initial[r];
    const std::size_t have = buffer.empty() ? 0 : buffer.back().offset + buffer.back().count;
    const std::size_t want = e.schedules[r].buffer_count;
    if (want > have) buffer.push_back(Run{have, want - have, {}});
  }

  const auto n = static_cast<std::size_t>(shape.world);
  auto state = e.initial;
  PairQueues<Posted> queues(n);
  std::vector<std::size_t> next(n, 0);
  std::vector<bool> sent(n, false);
  for (std::size_t number = 1;; ++number) {
    ExplainedStep step;
    step.number = number;
    bool all_done = true;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& steps = e.schedules[r].steps;
      if (next[r] == steps.size() || sent[r]) continue;
      const auto& st = steps[next[r]];
      for (const auto& copy : st.copies) {
        write(state[r], copy.to, runs_in(state[r], copy.from), Combine::Copy);
        step.copies.push_back(Copy{static_cast<int>(r), next[r], copy});
      }
      for (const auto& t : st.sends) {
        queues.of(r, static_cast<std::size_t>(t.peer)).push_back(
            Posted{static_cast<int>(r), next[r], t.range, number, runs_in(state[r], t.range)});
        ++step.sent;
      }
      sent[r] = true;
    }
    for (std::size_t r = 0; r < n; ++r) {
      const auto& steps = e.schedules[r].steps;
      if (next[r] == steps.size()) continue;
      all_done = false;
      const auto& st = steps[next[r]];
      if (!receivable(st, queues, r)) continue;
      for (const auto& t : st.recvs) {
        Posted p = queues.pop(static_cast<std::size_t>(t.peer), r);
        write(state[r], t.range, p.content, t.combine);
        step.messages.push_back(Message{p.from, static_cast<int>(r), p.from_step, next[r], p.range,
                                        t.range, t.combine, p.sent_in, std::move(p.content)});
      }
      ++next[r];
      sent[r] = false;
    }
    if (all_done) break;
    if (step.sent == 0 && step.messages.empty() && step.copies.empty())
      throw Error(fmt::format("explain {} with {}: no rank can go on at step {}", collective_name(c),
                              algorithm_name(a), number));
    step.state = state;
    on_step(step);
    e.steps = number;
  }
  e.final_state = std::move(state);
  return e;
}

SymbolicBuffers contributions(Collective c, const Shape& shape, const std::vector<RunBuffer>& state) {
  const auto k = shape.count;
  SymbolicBuffers out;
  for (const auto& buffer : state) {
    std::vector<Contribution> elements;
    for (const auto& run : buffer) {
      for (std::size_t i = 0; i < run.count; ++i) {
        Contribution whose;
        for (const auto& s : run.symbols) {
          const std::size_t index = s.index + i;
          if (c == Collective::AllToAll)
            whose.push_back(s.rank * shape.world + static_cast<int>(index / k));
          else if (c == Collective::Scatter)
            whose.push_back(static_cast<int>(index / k));
          else
            whose.push_back(s.rank);
        }
        std::sort(whose.begin(), whose.end());
        elements.push_back(std::move(whose));
      }
    }
    out.push_back(std::move(elements));
  }
  return out;
}

void check_final_symbols(Collective c, const Shape& shape, const std::vector<RunBuffer>& state) {
  const auto k = shape.count;
  const int n = shape.world;
  for (int r = 0; r < n; ++r) {
    if (c == Collective::Barrier) {
      // The token must have heard from every rank (some more than once).
      std::vector<int> heard;
      for (const auto& run : state[static_cast<std::size_t>(r)])
        for (const auto& sym : run.symbols) heard.push_back(sym.rank);
      std::sort(heard.begin(), heard.end());
      heard.erase(std::unique(heard.begin(), heard.end()), heard.end());
      if (static_cast<int>(heard.size()) != n)
        throw Error(fmt::format("barrier: rank {} has heard from {} of {} ranks only ({})", r,
                                heard.size(), n, fmt::join(heard, ",")));
      continue;
    }
    if ((c == Collective::Reduce || c == Collective::Gather) && r != shape.root) continue;
    Shape s = shape;
    s.rank = r;
    const auto l = layout(c, s);
    const auto rr = static_cast<std::size_t>(r);
    // The symbols output element p must hold (sorted).
    auto expected = [&](std::size_t p) {
      std::vector<Symbol> want;
      auto everyone = [&](std::size_t index) {
        for (int q = 0; q < n; ++q) want.push_back(Symbol{q, index});
      };
      switch (c) {
        case Collective::Broadcast: want.push_back(Symbol{shape.root, p}); break;
        case Collective::Reduce:
        case Collective::AllReduce: everyone(p); break;
        case Collective::ReduceScatter: everyone(rr * k + p); break;
        case Collective::Gather:
        case Collective::AllGather: want.push_back(Symbol{static_cast<int>(p / k), p % k}); break;
        case Collective::Scatter: want.push_back(Symbol{shape.root, rr * k + p}); break;
        case Collective::AllToAll:
          want.push_back(Symbol{static_cast<int>(p / k), rr * k + p % k});
          break;
        case Collective::Barrier: break;
      }
      return want;
    };
    // Within one block the expected symbols advance by one index per
    // element, as a run's do: checking each block's first and last element
    // of every run checks every element.
    const bool blocked = c == Collective::Gather || c == Collective::AllGather ||
                         c == Collective::AllToAll;
    for (const auto& run : runs_in(state[rr], l.output)) {
      auto check = [&](std::size_t p) {
        std::vector<Symbol> got = run.symbols;
        for (auto& sym : got) sym.index += p - run.offset;
        const auto want = expected(p);
        if (got == want) return;
        auto words = [](const std::vector<Symbol>& symbols) {
          std::string out;
          for (const auto& sym : symbols) {
            if (!out.empty()) out += '+';
            out += run_label(Run{0, 1, {sym}});
          }
          return out.empty() ? std::string("nothing") : out;
        };
        throw Error(fmt::format("{}: rank {} output element {} holds {}, expected {}",
                                collective_name(c), r, p, words(got), words(want)));
      };
      for (std::size_t lo = run.offset; lo < run.offset + run.count;) {
        std::size_t hi = run.offset + run.count;
        if (blocked && k > 0) hi = std::min(hi, (lo / k + 1) * k);
        check(lo);
        check(hi - 1);
        lo = hi;
      }
    }
  }
}

std::string rank_letter(int rank) {
  if (rank >= 0 && rank < 26) return std::string(1, static_cast<char>('a' + rank));
  return fmt::format("r{}", rank);
}

std::string run_label(const Run& run, bool with_index) {
  std::string out;
  for (const auto& s : run.symbols) {
    if (!out.empty()) out += '+';
    out += rank_letter(s.rank);
    if (!with_index) continue;
    if (s.rank >= 26) out += ':';  // r26:3, not r263
    if (run.count == 1)
      out += fmt::format("{}", s.index);
    else
      out += fmt::format("[{}..{}]", s.index, s.index + run.count - 1);
  }
  return out;
}

}  // namespace collie::collectives
