// The argv and envp arrays for execve: this process's environment with
// "NAME=value" overrides (the last of a name wins). Built before fork (the child may only call
// async-signal-safe functions). Shared by `collie launch` and the tests'
// Subprocess helper.
#pragma once

#include <cstddef>
#include <string>
#include <unistd.h>
#include <vector>

namespace collie::cli {

struct ExecArgs {
  ExecArgs(const std::vector<std::string>& args, const std::vector<std::string>& overrides) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const auto name = entry.substr(0, entry.find('=') + 1);
      bool overridden = false;
      for (const auto& extra : overrides)
        overridden = overridden || extra.starts_with(name);
      if (!overridden) environment_.push_back(entry);
    }
    // Of two overrides of one name, the later wins (getenv would find the first).
    for (std::size_t i = 0; i < overrides.size(); ++i) {
      const auto name = overrides[i].substr(0, overrides[i].find('=') + 1);
      bool later = false;
      for (std::size_t j = i + 1; j < overrides.size(); ++j)
        later = later || overrides[j].starts_with(name);
      if (!later) environment_.push_back(overrides[i]);
    }
    arguments_ = args;
    for (auto& a : arguments_)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : environment_)
      envp.push_back(e.data());
    envp.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  std::vector<char*> argv;  // null-terminated
  std::vector<char*> envp;  // null-terminated

 private:
  std::vector<std::string> arguments_;
  std::vector<std::string> environment_;
};

}  // namespace collie::cli
