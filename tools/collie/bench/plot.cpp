// The benchmarks' SVG plots, and baselines read from CSV (bench/plot.hpp).
#include "plot.hpp"

#include "size_label.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::cli {

namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string gb_label(double v) {
  if (v >= 1) return fmt::format("{:g}", v);
  return fmt::format("{:.3g}", v);
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, sep)) out.push_back(trim(field));
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

bool number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end != nullptr && *end == '\0' && std::isfinite(value);
}

}  // namespace

std::string svg_plot(const std::string& title, const std::vector<PlotSeries>& series) {
  const double width = 980, height = 600;
  const double left = 90, right = 250, top = 60, bottom = 80;
  const double plot_w = width - left - right, plot_h = height - top - bottom;

  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      if (p.bytes <= 0 || p.gb_per_s <= 0) continue;
      xmin = std::min(xmin, p.bytes);
      xmax = std::max(xmax, p.bytes);
      ymin = std::min(ymin, p.gb_per_s);
      ymax = std::max(ymax, p.gb_per_s);
    }
  }
  if (!(xmin <= xmax)) xmin = 1, xmax = 1024, ymin = 0.01, ymax = 1;
  // x: powers of two around the data; y: whole decades around the data.
  double lx0 = std::floor(std::log2(xmin)), lx1 = std::ceil(std::log2(xmax));
  if (lx1 <= lx0) lx1 = lx0 + 1;
  double ly0 = std::floor(std::log10(ymin)), ly1 = std::ceil(std::log10(ymax));
  if (ly1 <= ly0) ly1 = ly0 + 1;
  auto X = [&](double b) { return left + (std::log2(b) - lx0) / (lx1 - lx0) * plot_w; };
  auto Y = [&](double v) { return top + plot_h - (std::log10(v) - ly0) / (ly1 - ly0) * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
      "font-size=\"13\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"30\" font-size=\"17\" font-weight=\"bold\">{3}</text>\n",
      width, height, left, escape(title));
  // Grid and ticks.
  const int span = static_cast<int>(lx1 - lx0);
  const int step = span <= 12 ? 1 : (span <= 24 ? 2 : 4);
  for (int e = static_cast<int>(lx0); e <= static_cast<int>(lx1); ++e) {
    if ((e - static_cast<int>(lx0)) % step != 0) continue;
    const double x = X(std::ldexp(1.0, e));
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, top, top + plot_h, top + plot_h + 20, size_label(std::ldexp(1.0, e)));
  }
  for (int d = static_cast<int>(ly0); d <= static_cast<int>(ly1); ++d) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, d);
      if (std::log10(v) > ly1 + 1e-9) break;
      const double y = Y(v);
      svg += fmt::format(
          "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\"/>\n"
          "<text x=\"{4}\" y=\"{5:.1f}\" text-anchor=\"end\">{6}</text>\n",
          left, y, left + plot_w, m == 1.0 ? "#d0d0d0" : "#eeeeee", left - 8, y + 4, gb_label(v));
    }
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\">message size (bytes, "
      "log scale)</text>\n"
      "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\" "
      "font-size=\"14\">bus bandwidth (GB/s, log scale)</text>\n",
      left, top, plot_w, plot_h, left + plot_w / 2, height - 25, 28, top + plot_h / 2);
  // Lines, points and the legend.
  int color = 0;
  double legend_y = top + 10;
  for (const auto& s : series) {
    const char* c = kColors[color++ % std::size(kColors)];
    std::string path;
    for (const auto& p : s.points) {
      if (p.bytes <= 0 || p.gb_per_s <= 0) continue;
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", X(p.bytes), Y(p.gb_per_s));
    }
    if (!path.empty()) {
      svg += fmt::format(
          "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.2\"{}/>\n", path, c,
          s.baseline ? " stroke-dasharray=\"7,4\"" : "");
      for (const auto& p : s.points) {
        if (p.bytes <= 0 || p.gb_per_s <= 0) continue;
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.8\" fill=\"{}\"/>\n",
                           X(p.bytes), Y(p.gb_per_s), c);
      }
    }
    const double lx = left + plot_w + 18;
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"3\"{4}/>\n<text x=\"{5}\" y=\"{6:.1f}\">{7}</text>\n",
        lx, legend_y, lx + 26, c, s.baseline ? " stroke-dasharray=\"7,4\"" : "", lx + 34,
        legend_y + 4, escape(s.label));
    legend_y += 22;
  }
  svg += "</svg>\n";
  return svg;
}

std::vector<PlotSeries> read_baseline(const std::string& path, const std::string& label) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--baseline: cannot read {}", path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);

  std::map<std::string, PlotSeries> by_label;
  std::vector<std::string> order;
  auto add = [&](const std::string& name, double bytes, double busbw) {
    auto [it, fresh] = by_label.try_emplace(name);
    if (fresh) {
      order.push_back(name);
      it->second.label = name;
      it->second.baseline = true;
    }
    it->second.points.push_back({bytes, busbw});
  };

  // The first line that is neither empty nor a comment decides the format.
  std::size_t first = 0;
  while (first < lines.size() && (trim(lines[first]).empty() || trim(lines[first])[0] == '#'))
    ++first;
  if (first == lines.size()) throw Error(fmt::format("--baseline: {} has no data", path));

  if (lines[first].find(',') != std::string::npos) {
    const auto header = split(lines[first], ',');
    int size_col = -1, bw_col = -1, label_col = -1, placement_col = -1;
    for (int i = 0; i < static_cast<int>(header.size()); ++i) {
      const auto h = lower(header[static_cast<std::size_t>(i)]);
      if (h == "size" || h == "bytes" || h == "size_bytes" || h == "size(b)") size_col = i;
      if (h == "busbw" || h == "busbw_gbps" || h == "busbw(gb/s)") bw_col = i;
      if (h == "label" || h == "system" || h == "algorithm") label_col = i;
      if (h == "placement") placement_col = i;
    }
    if (size_col < 0 || bw_col < 0) {
      throw Error(fmt::format(
          "--baseline: {} line {}: the CSV header needs a size column (size, bytes, size_bytes) "
          "and a bus bandwidth column (busbw, busbw_gbps); it has: {}",
          path, first + 1, lines[first]));
    }
    for (std::size_t l = first + 1; l < lines.size(); ++l) {
      if (trim(lines[l]).empty() || trim(lines[l])[0] == '#') continue;
      const auto f = split(lines[l], ',');
      double bytes = 0, bw = 0;
      if (f.size() <= static_cast<std::size_t>(std::max(size_col, bw_col)) ||
          !number(f[static_cast<std::size_t>(size_col)], bytes) ||
          !number(f[static_cast<std::size_t>(bw_col)], bw)) {
        throw Error(fmt::format("--baseline: {} line {}: cannot read a size and a bus bandwidth "
                                "in '{}'",
                                path, l + 1, lines[l]));
      }
      if (placement_col >= 0 && static_cast<std::size_t>(placement_col) < f.size() &&
          f[static_cast<std::size_t>(placement_col)] == "in-place")
        continue;
      std::string name = label;
      if (label.empty() && label_col >= 0 && static_cast<std::size_t>(label_col) < f.size())
        name = f[static_cast<std::size_t>(label_col)];
      if (name.empty()) name = std::filesystem::path(path).stem().string();
      add(name, bytes, bw);
    }
  } else {
    // nccl-tests: size count type redop root time algbw busbw #wrong ...
    for (std::size_t l = first; l < lines.size(); ++l) {
      const auto line = trim(lines[l]);
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::vector<std::string> f;
      for (std::string w; fields >> w;) f.push_back(w);
      double bytes = 0, bw = 0;
      if (f.size() < 8 || !number(f[0], bytes) || !number(f[7], bw)) {
        throw Error(fmt::format(
            "--baseline: {} line {}: expected nccl-tests' columns (size count type redop root "
            "time algbw busbw ...) or a CSV header; got '{}'",
            path, l + 1, line));
      }
      add(label.empty() ? std::filesystem::path(path).stem().string() : label, bytes, bw);
    }
  }
  std::vector<PlotSeries> out;
  for (const auto& name : order) out.push_back(std::move(by_label[name]));
  return out;
}

}  // namespace collie::cli
