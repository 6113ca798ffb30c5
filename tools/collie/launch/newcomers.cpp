// A replacement's admission, as the job's store holds it (newcomers.hpp).
#include "newcomers.hpp"

#include <chrono>

#include <collie/keys.hpp>

namespace collie::cli {

bool newcomer_admitted(store::Store& store, int attempt, pid_t pid, const std::string& host) {
  using namespace std::chrono_literals;
  const auto run = keys::run(attempt, 0) + "/";
  const auto prefix = run + std::string(keys::kExpandNewcomerPrefix);
  const auto names = store.list_keys(prefix, 2s);
  if (names.empty()) return false;
  const auto values = store.multi_get(names, 2s);
  const auto who = keys::newcomer_identity(pid, host);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (values[i] != who) continue;
    const auto ticket = names[i].substr(prefix.size());
    return store.try_get(run + keys::expand_admit(std::stoull(ticket)), 2s).has_value();
  }
  return false;
}

}  // namespace collie::cli
