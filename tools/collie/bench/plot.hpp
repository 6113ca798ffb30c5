// `collie bench --plot`: bus bandwidth against message size as an SVG file,
// both axes log-scaled, one line per series; and the --baseline files that
// add other systems' measurements to it.
#pragma once

#include <string>
#include <vector>

namespace collie::cli {

struct PlotPoint {
  double bytes = 0;
  double gb_per_s = 0;
};

struct PlotSeries {
  std::string label;
  std::vector<PlotPoint> points;
  bool baseline = false;  // drawn dashed
};

// A self-contained SVG document (no scripts, no external references).
std::string svg_plot(const std::string& title, const std::vector<PlotSeries>& series);

// Reads a --baseline file: a CSV with a header naming a size column ("size",
// "bytes", "size_bytes" or "size(B)") and a bus bandwidth column ("busbw",
// "busbw_gbps" or "busbw(GB/s)"), optionally a "label", "system" or
// "algorithm" column (one series per value) and a "placement" column (only
// out-of-place rows are read where both are present); or nccl-tests' text
// output (size in column 1, out-of-place busbw in column 8). `label` names
// the series; when it is empty, a label column's values do (one series per
// value), else the file's name. Throws collie::Error
// naming the file and line of anything it cannot read.
std::vector<PlotSeries> read_baseline(const std::string& path, const std::string& label);

}  // namespace collie::cli
