// The call fingerprint every collective message carries: every signature
// there is survives encoding, different calls get different fingerprints,
// and a value that does not fit fails loudly instead of aliasing another.
#include "group/call.hpp"

#include <set>

#include "support/catch.hpp"

#include <collie/error.hpp>

using collie::Signature;

TEST_CASE("call fingerprints round-trip every collective, dtype, op and algorithm", "[call][pure]") {
  std::set<std::uint64_t> seen;
  std::size_t made = 0;
  for (auto c : collie::collectives::kCollectives)
    for (auto d : collie::kDataTypes)
      for (auto op : collie::kReduceOps)
        for (auto a : collie::collectives::kAlgorithms)
          for (int root : {0, 1, 16383})
            for (std::uint64_t count :
                 {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0xffffffff}}) {
              const Signature s{c, d, op, a, root, count};
              const auto f = collie::fingerprint(s);
              const auto back = collie::decode_fingerprint(f);
              REQUIRE(back.collective == c);
              REQUIRE(back.dtype == d);
              REQUIRE(back.op == op);
              REQUIRE(back.algorithm == a);
              REQUIRE(back.root == root);
              REQUIRE(back.count == count);
              REQUIRE_FALSE(collie::is_failure_notice(f));
              seen.insert(f);
              ++made;
            }
  CHECK(seen.size() == made);  // no two calls alike
}

TEST_CASE("call fingerprints: notices, cut fields and values that do not fit", "[call][pure]") {
  const auto notice = collie::failure_notice(1234);
  CHECK(collie::is_failure_notice(notice));
  CHECK(collie::failed_rank(notice) == 1234);
  CHECK(collie::failure_reason(notice) == collie::FailureReason::ConnectionLost);
  for (auto reason : {collie::FailureReason::ConnectionLost, collie::FailureReason::DeviceError,
                      collie::FailureReason::TimedOut, collie::FailureReason::Interrupted,
                      collie::FailureReason::Mismatch}) {
    const auto n = collie::failure_notice(77, reason);
    CHECK(collie::is_failure_notice(n));
    CHECK(collie::failure_reason(n) == reason);
    CHECK(collie::failed_rank(n) == 77);
  }
  // Root and count keep their low bits.
  const Signature big{collie::collectives::Collective::Broadcast,
                      collie::DataType::Float32,
                      collie::ReduceOp::Sum,
                      collie::collectives::Algorithm::Tree,
                      16384 + 5,
                      (std::uint64_t{1} << 32) + 7};
  const auto back = collie::decode_fingerprint(collie::fingerprint(big));
  CHECK(back.root == 5);
  CHECK(back.count == 7);
  // An algorithm beyond the field's 64 values is refused, loudly.
  Signature wide = big;
  wide.algorithm = static_cast<collie::collectives::Algorithm>(64);
  CHECK_THROWS_WITH(collie::fingerprint(wide),
                    ContainsSubstring("6 bits for the algorithm") && ContainsSubstring("64"));
  Signature dtype = big;
  dtype.dtype = static_cast<collie::DataType>(16);
  CHECK_THROWS_AS(collie::fingerprint(dtype), collie::Error);
  CHECK(collie::describe(big, true) == "broadcast(float32, 4294967303, root=16389) with tree");
}
