// torchrun's words put into collie's spelling before CLI11 reads them
// (normalize_launch_words, torchrun_args.hpp), and the small readers both
// steps use (torchrun_words.hpp).
#include "torchrun_words.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>

#include <CLI/CLI.hpp>

#include "torchrun_args.hpp"

namespace collie::cli {

namespace {

// torchrun's flags, in collie's spelling (torchrun's has '_' for '-'), and
// whether each is a flag without a value: what PET_<NAME> may set.
struct TorchrunFlag {
  const char* name;
  bool is_flag;
};
constexpr TorchrunFlag kTorchrunFlags[] = {{"nnodes", false},
                                           {"nproc-per-node", false},
                                           {"rdzv-backend", false},
                                           {"rdzv-endpoint", false},
                                           {"rdzv-id", false},
                                           {"rdzv-conf", false},
                                           {"standalone", true},
                                           {"max-restarts", false},
                                           {"monitor-interval", false},
                                           {"start-method", false},
                                           {"role", false},
                                           {"module", true},
                                           {"no-python", true},
                                           {"run-path", true},
                                           {"log-dir", false},
                                           {"redirects", false},
                                           {"tee", false},
                                           {"node-rank", false},
                                           {"master-addr", false},
                                           {"master-port", false},
                                           {"local-addr", false},
                                           {"local-ranks-filter", false}};

// "PET_NPROC_PER_NODE" for "nproc-per-node".
std::string pet_variable(std::string_view name) {
  std::string v = "PET_";
  for (char c : name)
    v.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return v;
}

}  // namespace

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> items_of(std::string_view text) {
  std::vector<std::string_view> items;
  for (std::size_t at = 0; at <= text.size() && !text.empty();) {
    const auto comma = std::min(text.find(',', at), text.size());
    items.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

bool is_stream_spec(const std::string& text) {
  if (text.size() == 1) return text[0] >= '0' && text[0] <= '3';
  const auto items = items_of(text);
  return !items.empty() && std::all_of(items.begin(), items.end(), [](std::string_view item) {
    const auto colon = item.find(':');
    return colon != std::string_view::npos && parse_int(item.substr(0, colon)) &&
           item.size() == colon + 2 && item[colon + 1] >= '0' && item[colon + 1] <= '3';
  });
}

bool truthy(const std::string& value) {
  std::string v;
  for (char c : value)
    v.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return v == "1" || v == "true" || v == "yes";
}

void normalize_launch_words(std::vector<std::string>& words, CLI::App& launch) {
  if (words.empty() || words[0] != "launch") return;
  std::set<const CLI::Option*> given;
  const CLI::Option* tee = launch.get_option_no_throw("--tee");
  for (std::size_t i = 1; i < words.size(); ++i) {
    auto& w = words[i];
    if (w == "--") break;
    if (w.size() < 2 || w[0] != '-') {  // the program, with no "--" before it
      words.insert(words.begin() + static_cast<std::ptrdiff_t>(i), "--");
      break;
    }
    std::string name = w;
    std::optional<std::string> value;
    if (w.starts_with("--")) {
      const auto eq = w.find('=');
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
        name = w.substr(0, eq);
      }
      std::replace(name.begin() + 2, name.end(), '_', '-');
    } else if (w.size() > 2) {  // -n4
      value = w.substr(2);
      name = w.substr(0, 2);
    }
    const CLI::Option* option = launch.get_option_no_throw(name);
    if (option == nullptr) continue;  // CLI11 names it
    given.insert(option);
    if (option == tee) {
      // torchrun's -t/--tee SPEC; collie's bare --tee is "3", both streams.
      if (!value && i + 1 < words.size() && is_stream_spec(words[i + 1])) {
        value = words[i + 1];
        words.erase(words.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      }
      w = "--tee=" + value.value_or("3");
      continue;
    }
    if (name.starts_with("--")) w = value ? name + "=" + *value : name;
    if (!value && option->get_type_size_min() > 0 && option->get_expected_min() > 0) ++i;
  }
  // torchrun's PET_ variables, for the flags the command line does not give.
  std::vector<std::string> from_environment;
  for (const auto& flag : kTorchrunFlags) {
    const std::string name = std::string("--") + flag.name;
    const CLI::Option* option = launch.get_option_no_throw(name);
    if (option == nullptr || given.count(option) != 0) continue;
    const char* value = std::getenv(pet_variable(flag.name).c_str());
    if (value == nullptr || *value == '\0') continue;
    if (flag.is_flag) {
      if (truthy(value)) from_environment.push_back(name);
    } else {
      from_environment.push_back(name + "=" + value);
    }
  }
  words.insert(words.begin() + 1, from_environment.begin(), from_environment.end());
}

}  // namespace collie::cli
