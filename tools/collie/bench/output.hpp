// The output of `collie bench <collective>|all`: nccl-tests' table (with a
// progress bar on a terminal), CSV or JSON, a row as each size is measured;
// and the SVG plot of bus bandwidth (bench/plot.hpp draws it).
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <collie/dtype.hpp>
#include <collie/process_group.hpp>
#include <collie/reduce.hpp>

#include "collective.hpp"

namespace collie::cli {

// Rank 0's output, in the format the command line asks for.
struct Printer {
  using Clock = std::chrono::steady_clock;
  const Args& a;
  int ranks;
  DataType dtype;
  ReduceOp op;
  std::string transport;  // rank 0's description of its peers' backends
  std::string hosts;      // ProcessGroup::describe_hosts()
  std::size_t algo_width = 4;
  bool tty_progress = false;
  std::size_t rows_total = 0;
  std::size_t rows_done = 0;
  Clock::time_point started = Clock::now();
  Clock::time_point last_progress{};

  bool table() const { return !a.json && !a.csv; }

  void clear_progress() {
    if (tty_progress) std::fputs("\r\033[K", stderr);
  }

  // Redraws the bar (at most 10 times a second); `what` is formatted only
  // then, so the timed loop pays nothing when there is no bar.
  template <class What>
  void progress(const What& what_of) {
    if (!tty_progress) return;
    const auto now = Clock::now();
    if (now - last_progress < std::chrono::milliseconds(100)) return;
    const std::string what = what_of();
    last_progress = now;
    const int width = 30;
    const double done =
        rows_total == 0 ? 1 : static_cast<double>(rows_done) / static_cast<double>(rows_total);
    const int filled = static_cast<int>(done * width);
    std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu rows, %.1f s  %.*s",
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), rows_done,
                 rows_total, std::chrono::duration<double>(now - started).count(),
                 static_cast<int>(what.size()), what.data());
    std::fflush(stderr);
  }


  // The lines above the first table (or the CSV header).
  void header(const ProcessGroup& pg, const std::string& how);
  // A collective's column headings.
  void columns(Collective c, bool has_out_of_place, bool has_in_place);
  // One table row: a size and an algorithm, both placements.
  void row(const std::optional<Result>& out, const std::optional<Result>& in);
  // The averages (and the JSON document, which is printed whole at the end).
  void footer(const std::vector<Result>& results, std::size_t wrong, bool interrupted);

 private:
  void print_json(const std::vector<Result>& results, std::size_t wrong, bool interrupted,
                  double avg);
};

// --plot: the bus bandwidth of every series (and of --baseline files) as SVG.
void write_plot(const Args& a, int ranks, DataType dtype, const std::vector<Result>& results);

}  // namespace collie::cli
