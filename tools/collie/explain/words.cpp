// What both of `collie explain`'s formats say in words (words.hpp).
#include "words.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "size_label.hpp"

namespace collie::cli::explain {

// "16 B", "85.3333 MiB": the bench's labels.
std::string bytes_label(std::size_t bytes) {
  return size_label(static_cast<double>(bytes));
}

std::string range_label(const cs::Range& r) {
  if (r.count == 1) return fmt::format("[{}]", r.offset);
  return fmt::format("[{}..{}]", r.offset, r.offset + r.count - 1);
}

bool with_index(const Request& r) {
  return r.collective != cs::Collective::Barrier;
}

std::string content_label(const Request& r, const std::vector<cs::Run>& runs) {
  std::string out;
  for (const auto& run : runs) {
    if (!out.empty()) out += " ";
    const auto label = cs::run_label(run, with_index(r));
    out += label.empty() ? "." : label;
  }
  return out;
}

// What each rank's buffer holds, in words.
std::string layout_words(const Request& r) {
  const auto k = r.shape.count;
  const auto n = static_cast<std::size_t>(r.shape.world);
  switch (r.collective) {
    case cs::Collective::AllReduce:
    case cs::Collective::Reduce:
    case cs::Collective::Broadcast:
      return fmt::format("Each rank's buffer is its {} elements, where the result lands{}.", k,
                         r.collective == cs::Collective::AllReduce ? "" : " (the root's)");
    case cs::Collective::ReduceScatter:
      return fmt::format(
          "Each rank's buffer is its input, {} blocks of {}; rank r's result is "
          "block r.",
          n, k);
    case cs::Collective::AllGather:
    case cs::Collective::Gather:
      return fmt::format(
          "Each rank's buffer: [0..{}] the output, block j from rank j; [{}..{}] "
          "its input.",
          n * k - 1, n * k, (n + 1) * k - 1);
    case cs::Collective::Scatter:
      return fmt::format(
          "Each rank's buffer: [0..{}] the root's input, block j for rank j; "
          "[{}..{}] its output.",
          n * k - 1, n * k, (n + 1) * k - 1);
    case cs::Collective::AllToAll:
      return fmt::format(
          "Each rank's buffer: [0..{}] its input, block j for rank j; [{}..{}] its "
          "output, block j from rank j{}.",
          n * k - 1, n * k, 2 * n * k - 1,
          r.algorithm == cs::Algorithm::TwoLevel
              ? fmt::format("; from [{}], scratch: the blocks it gathers for ranks of other "
                            "hosts, and what arrives for it before it is put in place",
                            2 * n * k)
              : "");
    case cs::Collective::Barrier:
      return "Each rank has one token; a rank may leave once its token has heard from everyone.";
  }
  return "";
}

std::string model_words(const Request& r) {
  const auto& m = r.model;
  auto words = fmt::format(
      "{}alpha {} per message, beta {:.3g} GB/s per link,\n  gamma {:.3g} GB/s "
      "reduced, delta {} per message posted",
      r.shared_memory ? "shared memory: " : "", time_label(m.alpha), 1e-9 / m.beta, 1e-9 / m.gamma,
      time_label(m.delta));
  if (r.hosts && r.hosts->hosts() > 1) {
    words += fmt::format(",\n  between hosts: {} and {:.3g} Gbit/s per host's link",
                         time_label(m.host_alpha), 8e-9 / m.host_beta);
    if (std::isinf(m.host_burst_bytes))  // priced_as_called(): broadcast, reduce
      words += " (calls one after another\n  overlap: each host's link takes its bytes at the "
               "rate, not its hops' latencies\n  in turn)";
    else if (m.host_burst_bytes > 0)
      words += fmt::format(", a bucket of {} on each",
                           bytes_label(static_cast<std::size_t>(m.host_burst_bytes)));
  }
  if (m.crowding > 1)
    words += fmt::format(",\n  {:.3g} ranks per core (the crowded-host bound)", m.crowding);
  if (m.crowding > 1 && r.hosts && r.hosts->hosts() > 1)
    words += fmt::format(", a message between\n  hosts {} of a core's work at each end",
                         time_label(m.host_work_per_message));
  if (m.crowding > 1 && m.flow_bytes > 0 && r.collective == cs::Collective::AllReduce)
    words += fmt::format(", with the caches of this\n  project's machine ({} a core, {} shared)",
                         bytes_label(static_cast<std::size_t>(m.core_cache_bytes)),
                         bytes_label(static_cast<std::size_t>(m.cache_bytes)));
  return words;
}

std::string request_words(const Request& r) {
  std::string out = fmt::format("{} on {} rank{}", cs::collective_name(r.collective), r.shape.world,
                                r.shape.world == 1 ? "" : "s");
  if (r.hosts) out += " (" + cs::describe(*r.hosts) + ")";
  if (r.collective != cs::Collective::Barrier)
    out += fmt::format(", {} {} element{} per rank ({})", r.shape.count, r.dtype,
                       r.shape.count == 1 ? "" : "s", bytes_label(r.shape.count * r.element_bytes));
  if (cs::has_root(r.collective)) out += fmt::format(", root {}", r.shape.root);
  return out;
}

std::string time_label(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.3g} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:.3g} ms", seconds * 1e3);
  return fmt::format("{:.3g} s", seconds);
}

}  // namespace collie::cli::explain
