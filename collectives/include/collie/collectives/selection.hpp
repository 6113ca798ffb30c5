// Which algorithm runs a call, by size: the rules a user gives (COLLIE_ALGO,
// InitOptions::algorithms) and Auto for every call they leave.
//
// The grammar: rules separated by commas, each
//
//   COLLECTIVE:ALGORITHM[:BYTES][:ranks=RANKS]
//
//   BYTES   LOW-HIGH: calls of LOW bytes or more and less than HIGH, per
//           rank as the collective counts its elements (all_reduce: the
//           buffer; all_gather: one rank's input); K, M, G are 1024, 1024^2,
//           1024^3; HIGH left out: no end ("64K-")
//   RANKS   LOW-HIGH: groups of LOW to HIGH ranks, both in ("2-8"; "9-": 9
//           and more; one number: that many)
//
// as in all_reduce:recursive_doubling:0-64K,all_reduce:ring:64K-,broadcast:tree
// (oneCCL's CCL_ALLREDUCE="recursive_doubling:0-8192;ring:8192-max" and
// UCC's UCC_TL_UCP_TUNE say the same). For a call, the first rule whose
// collective, sizes and ranks cover it decides (ALGORITHM auto: Auto does);
// where none covers it, Auto chooses. A rule that cannot be read is refused
// naming the token.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <collie/collectives/algorithms.hpp>

namespace collie::collectives {

struct SelectionRule {
  Collective collective = Collective::AllReduce;
  Algorithm algorithm = Algorithm::Auto;
  std::size_t min_bytes = 0;                                        // in
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();  // out (max: no end)
  int min_ranks = 1;                                                // in
  int max_ranks = std::numeric_limits<int>::max();                  // in
  bool covers(Collective c, std::size_t bytes, int ranks) const {
    return c == collective && bytes >= min_bytes &&
           (bytes < max_bytes || max_bytes == std::numeric_limits<std::size_t>::max()) &&
           ranks >= min_ranks && ranks <= max_ranks;
  }
};
using SelectionRules = std::vector<SelectionRule>;

// Reads the grammar above. Throws collie::Error "SOURCE: ..." naming the
// token it cannot read and what it takes there.
SelectionRules parse_selection(std::string_view text, std::string_view source);

// The rule that decides a call of `bytes` on `ranks` ranks, if one covers it.
const SelectionRule* rule_for(const SelectionRules& rules, Collective c, std::size_t bytes,
                              int ranks);

// One range of a selection map: calls of [from, to) bytes run `algorithm`,
// chosen by a rule or by Auto.
struct SelectionRange {
  std::size_t from = 0;
  std::size_t to = 0;  // max: no end
  Algorithm algorithm = Algorithm::Auto;
  bool by_rule = false;
};

// The selection map of c on `ranks` ranks, from 0 bytes on: where the rules
// decide, theirs; elsewhere `automatic(bytes)`, asked at each power of two
// (Auto's choices are kept per power-of-two bucket) up to `up_to`, past
// which its last choice stands. Neighbouring ranges of one algorithm and
// one source are joined.
std::vector<SelectionRange> selection_map(const SelectionRules& rules, Collective c, int ranks,
                                          const std::function<Algorithm(std::size_t)>& automatic,
                                          std::size_t up_to = std::size_t{1} << 30);

struct CostModel;  // cost.hpp
class Hosts;       // hosts.hpp

// The selection map of c at one shape, as a group runs it: the rules where
// they cover a size, auto_algorithm() (cost.hpp) with these arguments
// elsewhere. The runtime logs it when a group first chooses for c, and
// explain --compare prints it.
std::vector<SelectionRange> auto_selection_map(const SelectionRules& rules, Collective c, int ranks,
                                               std::size_t element_bytes, std::size_t segment_bytes,
                                               const CostModel& model,
                                               std::shared_ptr<const Hosts> hosts);

// "0-4K tree, 4K-256K recursive_doubling, 256K- ring (COLLIE_ALGO)": each
// range, its algorithm, and "(rule)" after those a rule chose.
std::string describe(const std::vector<SelectionRange>& map, std::string_view rule_name);

// "64K", "1M", "3000": bytes as the grammar writes them.
std::string bytes_text(std::size_t bytes);

}  // namespace collie::collectives
