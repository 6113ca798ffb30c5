// The benchmarks' JSON layout (json_out.hpp).
#include "json_out.hpp"

#include <cmath>

namespace collie::cli {

namespace {

// {"a": 1, "b": "x"} on one line.
std::string one_line(const nlohmann::ordered_json& value) {
  if (!value.is_object()) return value.dump();
  std::string out = "{";
  bool first = true;
  for (const auto& [key, item] : value.items()) {
    out += (first ? "" : ", ") + nlohmann::ordered_json(key).dump() + ": " + one_line(item);
    first = false;
  }
  return out + "}";
}

}  // namespace

std::string dump_records(const nlohmann::ordered_json& doc) {
  std::string out = "{";
  bool first = true;
  bool after_array = false;
  for (const auto& [key, value] : doc.items()) {
    const bool array = value.is_array();
    if (!first) out += array || after_array ? ",\n " : ", ";
    out += nlohmann::ordered_json(key).dump() + ": ";
    if (array) {
      out += "[";
      for (std::size_t i = 0; i < value.size(); ++i)
        out += (i == 0 ? "\n  " : ",\n  ") + one_line(value[i]);
      out += "]";
    } else {
      out += one_line(value);
    }
    first = false;
    after_array = array;
  }
  return out + "}\n";
}

double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

}  // namespace collie::cli
