// Each collective's buffer shape, told once (collectives::extents and
// count_of_buffers): checked against the table of torch.distributed's
// buffers written out by hand, on every world, rank, root and count.
#include <optional>
#include <string>

#include "support/catch.hpp"

#include <collie/collectives/algorithms.hpp>
#include <collie/error.hpp>

using namespace collie::collectives;

namespace {

using Size = std::optional<std::size_t>;

// What torch.distributed's documentation says each rank passes, spelled out
// per collective rather than derived from the layout.
std::pair<Size, Size> expected(Collective c, std::size_t n, std::size_t k, bool root) {
  switch (c) {
    case Collective::AllReduce:
    case Collective::Broadcast:
      return {k, k};
    case Collective::Reduce:
      return {k, root ? Size(k) : std::nullopt};
    case Collective::AllGather:
      return {k, n * k};
    case Collective::Gather:
      return {k, root ? Size(n * k) : std::nullopt};
    case Collective::Scatter:
      return {root ? Size(n * k) : std::nullopt, k};
    case Collective::ReduceScatter:
      return {n * k, k};
    case Collective::AllToAll:
      return {n * k, n * k};
    case Collective::Barrier:
      return {std::nullopt, std::nullopt};
  }
  return {};
}

std::string error_of(Collective c, int world, std::size_t in, std::size_t out, int rank, int root) {
  try {
    count_of_buffers(c, world, in, out, rank, root);
  } catch (const collie::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("extents: every collective's buffers on every rank, world, root and count") {
  for (const auto c : kCollectives) {
    for (int world = 1; world <= 6; ++world) {
      const auto n = static_cast<std::size_t>(world);
      for (const std::size_t k :
           {std::size_t{0}, std::size_t{1}, n - 1, n + 2, std::size_t{1009}}) {
        for (int root = 0; root < world; ++root) {
          for (int rank = 0; rank < world; ++rank) {
            INFO(collective_name(c)
                 << " world " << world << " count " << k << " rank " << rank << " root " << root);
            const bool is_root = !has_root(c) || rank == root;
            const auto [in, out] = expected(c, n, k, is_root);
            const auto e = extents(c, world, k, rank, root);
            CHECK(e.input == in);
            CHECK(e.output == out);
            // The count is read back from buffers of those sizes (an ignored
            // side may be anything: empty here, or of any size).
            if (c == Collective::Barrier) continue;
            CHECK(count_of_buffers(c, world, in.value_or(0), out.value_or(0), rank, root) == k);
            if (!in) CHECK(count_of_buffers(c, world, 7, out.value_or(0), rank, root) == k);
            if (!out) CHECK(count_of_buffers(c, world, in.value_or(0), 7, rank, root) == k);
          }
        }
      }
    }
  }
}

TEST_CASE("extents: buffers of the wrong size are refused, saying what they must hold") {
  CHECK_THAT(error_of(Collective::AllReduce, 2, 10, 7, 0, 0),
             ContainsSubstring("rank 0: all_reduce: the output has 7 elements, the input 10: they "
                             "must be equal"));
  CHECK_THAT(error_of(Collective::Broadcast, 3, 4, 5, 1, 0),
             ContainsSubstring("broadcast: the output has 5 elements, the input 4"));
  CHECK_THAT(error_of(Collective::AllGather, 2, 10, 7, 1, 0),
             ContainsSubstring("rank 1: all_gather: a buffer of 7 elements for 2 ranks of 10: it "
                             "must hold 2 x 10 = 20"));
  CHECK_THAT(error_of(Collective::ReduceScatter, 2, 7, 10, 0, 0),
             ContainsSubstring("reduce_scatter: a buffer of 7 elements for 2 ranks of 10"));
  CHECK_THAT(error_of(Collective::AllToAll, 2, 7, 7, 0, 0),
             ContainsSubstring("all_to_all: input of 7 and output of 7 elements: both must hold 2 "
                             "equal blocks"));
  CHECK_THAT(error_of(Collective::AllToAll, 2, 8, 6, 0, 0),
             ContainsSubstring("both must hold 2 equal blocks"));
  // A rooted collective checks the root's side at the root only.
  CHECK_THAT(error_of(Collective::Gather, 3, 4, 11, 2, 2),
             ContainsSubstring("gather: a buffer of 11 elements for 3 ranks of 4"));
  CHECK(error_of(Collective::Gather, 3, 4, 11, 1, 2).empty());
  CHECK_THAT(error_of(Collective::Scatter, 3, 11, 4, 0, 0),
             ContainsSubstring("scatter: a buffer of 11 elements for 3 ranks of 4"));
  CHECK(error_of(Collective::Scatter, 3, 11, 4, 1, 0).empty());
  CHECK_THAT(error_of(Collective::Reduce, 2, 10, 7, 0, 0),
             ContainsSubstring("reduce: the output has 7 elements, the input 10"));
  CHECK(error_of(Collective::Reduce, 2, 10, 7, 1, 0).empty());
}

TEST_CASE("elementwise: the collectives whose input and output are one range") {
  for (const auto c : kCollectives) {
    const bool want =
        c == Collective::AllReduce || c == Collective::Broadcast || c == Collective::Reduce;
    CHECK(elementwise(c) == want);
  }
}
