// ProcessGroup::sync_state() (process_group.hpp): named buffers from one
// member to the others, as a newcomer needs them after expand().
//
// The root's manifest (each buffer's name, dtype and count) goes first, and
// every member compares it with its own; the members then agree, by an
// all_reduce, on the first that differs, so that either every member
// throws or none does (a member left waiting for a broadcast the others
// skipped would hang until its timeout). Then one broadcast per buffer.
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "group/group.hpp"

namespace collie {

namespace {

std::string describe(const StateBuffer& b) {
  return fmt::format("'{}' ({} x {})", b.name, b.count, dtype_name(b.dtype));
}

// "name\tdtype\tcount\n" per buffer.
std::string manifest(std::span<const StateBuffer> state) {
  std::string out;
  for (const auto& b : state)
    out += fmt::format("{}\t{}\t{}\n", b.name, dtype_name(b.dtype), b.count);
  return out;
}

// How this member's state differs from the root's manifest; empty: alike.
std::string difference(std::span<const StateBuffer> state, const std::string& root_manifest) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < root_manifest.size();) {
    const auto end = root_manifest.find('\n', at);
    lines.push_back(root_manifest.substr(at, end - at));
    at = end + 1;
  }
  for (std::size_t i = 0; i < state.size() || i < lines.size(); ++i) {
    if (i >= lines.size())
      return fmt::format("buffer {} is {} here, and the root has no buffer {}", i,
                         describe(state[i]), i);
    std::string line = lines[i];
    for (auto& c : line)
      if (c == '\t') c = ' ';
    if (i >= state.size())
      return fmt::format("the root's buffer {} is '{}', and this member has {} buffers", i, line,
                         state.size());
    const auto mine = fmt::format("{}\t{}\t{}", state[i].name, dtype_name(state[i].dtype),
                                  state[i].count);
    if (mine != lines[i])
      return fmt::format("buffer {} is {} here but '{}' (name dtype count) at the root", i,
                         describe(state[i]), line);
  }
  return {};
}

}  // namespace

void ProcessGroup::sync_state(std::span<const StateBuffer> state, int root) {
  auto& g = *impl_;
  g.require_member("sync_state");
  if (root < 0 || root >= size()) {
    throw ArgumentError(fmt::format("rank {}: sync_state on {}: root {} is not a rank of its {}",
                                    g.rank, g.name, root, size()));
  }
  for (const auto& b : state) {
    if (b.data == nullptr && b.count > 0)
      throw ArgumentError(fmt::format("rank {}: sync_state on {}: buffer {} is null", g.rank,
                                      g.name, describe(b)));
    if (b.name.find_first_of("\t\n") != std::string::npos)
      throw ArgumentError(fmt::format("rank {}: sync_state on {}: a buffer's name may not hold a "
                                      "tab or a newline: {}",
                                      g.rank, g.name, describe(b)));
  }
  // The root's manifest: its length, then its text.
  std::string text = g.rank == root ? manifest(state) : std::string();
  std::uint64_t length = text.size();
  broadcast(std::span(&length, 1), root);
  std::vector<std::uint8_t> bytes(text.begin(), text.end());
  bytes.resize(length);
  broadcast(std::span(bytes), root);
  const std::string why = difference(state, std::string(bytes.begin(), bytes.end()));
  std::int32_t first = why.empty() ? INT32_MAX : g.rank;
  all_reduce(std::span(&first, 1), ReduceOp::Min);
  if (first != INT32_MAX) {
    if (!why.empty())
      throw MismatchError(fmt::format("rank {}: sync_state on {}: {}", g.rank, g.name, why));
    throw MismatchError(fmt::format(
        "rank {}: sync_state on {}: rank {}'s state differs from rank {}'s (its error says how); "
        "nothing was sent",
        g.rank, g.name, first, root));
  }
  for (const auto& b : state)
    run_collective(Collective::Broadcast, b.dtype, b.data, b.data, b.count, ReduceOp::Sum, root);
}

}  // namespace collie
