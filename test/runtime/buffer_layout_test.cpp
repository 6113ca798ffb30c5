// An input in pieces (runtime/src/executor/buffer_layout.hpp, input_pieces()): a
// reduce_scatter copies only what its schedule writes. Written out by hand
// for two_level on 4 hosts x 2 ranks, then checked for every algorithm on
// many shapes against what the schedule itself reads and writes.
#include <memory>
#include <numeric>
#include <vector>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/hosts.hpp>

#include "executor/buffer_layout.hpp"

namespace {

using collie::InputPiece;
using collie::collectives::Algorithm;
using collie::collectives::Collective;
using collie::collectives::Hosts;
using collie::collectives::Range;
using collie::collectives::Shape;
using Kind = InputPiece::Kind;

Shape shape_of(int rank, std::vector<int> host_of, std::size_t count) {
  const int world = static_cast<int>(host_of.size());
  return Shape{rank, world, count, 0, 1, std::make_shared<const Hosts>(std::move(host_of))};
}

// One letter a block: O output, S scratch, C the caller's input (blocks
// that lie in one piece each).
std::string by_block(const std::vector<InputPiece>& pieces, std::size_t count) {
  std::string out;
  for (const auto& p : pieces) {
    REQUIRE(p.range.offset % count == 0);
    REQUIRE(p.range.count % count == 0);
    const char c = p.kind == Kind::Output ? 'O' : p.kind == Kind::Scratch ? 'S' : 'C';
    out.append(p.range.count / count, c);
  }
  return out;
}

}  // namespace

TEST_CASE("two_level reduce_scatter copies only the blocks it sums into", "[layout]") {
  // By host: rank 2 (host 1, local 0) sums the blocks of the local-0 ranks
  // of every host (0, 2, 4, 6); its own is the output.
  const std::size_t count = 3;
  const auto by_host = shape_of(2, {0, 0, 1, 1, 2, 2, 3, 3}, count);
  const auto s = collie::collectives::make_schedule(Collective::ReduceScatter, Algorithm::TwoLevel,
                                                    by_host);
  CHECK(by_block(collie::input_pieces(s, Collective::ReduceScatter, by_host), count) ==
        "SCOCSCSC");
  // Round robin: rank r on host r % 4, so ranks 0-3 are local 0 of hosts
  // 0-3 and rank 1 sums their blocks.
  const auto rr = shape_of(1, {0, 1, 2, 3, 0, 1, 2, 3}, count);
  const auto s2 =
      collie::collectives::make_schedule(Collective::ReduceScatter, Algorithm::TwoLevel, rr);
  CHECK(by_block(collie::input_pieces(s2, Collective::ReduceScatter, rr), count) == "SOSSCCCC");
  // One rank: the output is the input (the layout's first case, not
  // pieces).
  const auto one = shape_of(0, {0}, count);
  const auto s3 = collie::collectives::make_schedule(Collective::ReduceScatter, Algorithm::Ring, one);
  CHECK(collie::input_pieces(s3, Collective::ReduceScatter, one).empty());
}

TEST_CASE("an input in pieces holds every range the schedule touches, and only what it writes "
          "is copied",
          "[layout]") {
  const std::vector<std::vector<int>> layouts = {
      {0},       {0, 0},          {0, 1},          {0, 0, 0},          {0, 1, 0, 1, 0},
      {0, 0, 1}, {0, 0, 1, 1, 2}, {0, 1, 2, 0, 1}, {0, 0, 0, 1, 2, 2}, {0, 0, 1, 1, 2, 2, 3, 3}};
  int in_pieces = 0;
  for (const auto& host_of : layouts) {
    const int world = static_cast<int>(host_of.size());
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
      for (const auto algo : collie::collectives::algorithms_for(Collective::ReduceScatter)) {
        if (algo == Algorithm::Auto) continue;
        for (int rank = 0; rank < world; ++rank) {
          const auto shape = shape_of(rank, host_of, count);
          const auto s = collie::collectives::make_schedule(Collective::ReduceScatter, algo, shape);
          const auto pieces = collie::input_pieces(s, Collective::ReduceScatter, shape);
          INFO(fmt::format("{} on {} ranks, count {}, rank {}",
                           collie::collectives::algorithm_name(algo), world, count, rank));
          if (pieces.empty()) {
            // Only a schedule with a range across pieces, or nothing to map
            // (no elements; one rank, whose output is its input).
            CHECK((count == 0 || world == 1 || algo == Algorithm::RecursiveHalving));
            continue;
          }
          ++in_pieces;
          // In order, contiguous, over the whole input; one output piece,
          // the rank's block.
          std::size_t at = 0;
          int outputs = 0;
          for (const auto& p : pieces) {
            CHECK(p.range.offset == at);
            CHECK(p.range.count > 0);
            at += p.range.count;
            if (p.kind == Kind::Output) {
              ++outputs;
              CHECK(p.range == collie::collectives::block(count, rank));
            }
          }
          CHECK(at == count * static_cast<std::size_t>(world));
          CHECK(outputs == 1);
          // Element by element: written by the schedule -> scratch or
          // output; never written -> the caller's (or the output); every
          // range inside one piece.
          std::vector<bool> written(at, false);
          const auto mark = [&](const Range& r) {
            for (std::size_t i = r.offset; i < r.offset + r.count; ++i)
              written[i] = true;
          };
          const auto in_one = [&](const Range& r) {
            if (r.count == 0) return true;
            for (const auto& p : pieces)
              if (r.offset >= p.range.offset &&
                  r.offset + r.count <= p.range.offset + p.range.count)
                return true;
            return false;
          };
          for (const auto& st : s.steps) {
            for (const auto& t : st.recvs) {
              mark(t.range);
              CHECK(in_one(t.range));
            }
            for (const auto& t : st.sends)
              CHECK(in_one(t.range));
            for (const auto& c : st.copies) {
              mark(c.to);
              CHECK(in_one(c.from));
              CHECK(in_one(c.to));
            }
          }
          for (const auto& p : pieces) {
            for (std::size_t i = p.range.offset; i < p.range.offset + p.range.count; ++i) {
              if (p.kind == Kind::Caller) CHECK_FALSE(written[i]);
              if (p.kind == Kind::Scratch) CHECK(written[i]);
            }
          }
        }
      }
    }
  }
  CHECK(in_pieces > 100);
}

TEST_CASE("only an output inside the input is mapped in pieces", "[layout]") {
  const auto shape = shape_of(1, {0, 0, 1, 1}, 4);
  for (const auto c : {Collective::AllReduce, Collective::AllGather, Collective::Broadcast}) {
    const auto s = collie::collectives::make_schedule(c, Algorithm::Ring, shape);
    CHECK(collie::input_pieces(s, c, shape).empty());
  }
  const auto s = collie::collectives::make_schedule(Collective::AllToAll, Algorithm::Pairwise, shape);
  CHECK(collie::input_pieces(s, Collective::AllToAll, shape).empty());
}
