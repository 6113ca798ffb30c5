// For the tests that run torch programs on namespace hosts under `collie
// launch`: whether they can run here, the job's secret, and the store's
// port once its node wrote it down.
#pragma once

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support/eventually.hpp"
#include "support/netns.hpp"
#include "support/read_file.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

namespace collie::test {

// Why torch jobs on `hosts` cannot run here; "" when they can.
inline std::string torch_hosts_missing(const NetworkNamespaces& hosts) {
  if (!hosts.ok()) return hosts.why();
  if (!COLLIE_TORCH_BACKEND_BUILT)
    return "this build has no collie_torch backend (the sanitizer presets build none)";
  if (run({"/usr/bin/python3", "-c", "import torch"}).exit_code != 0)
    return "/usr/bin/python3 has no torch (python3-torch)";
  return "";
}

// A secret in `dir`, and the environment that gives it to the launchers
// (whose log level is warn, or COLLIE_TEST_LOG's: `COLLIE_TEST_LOG=debug`
// shows a job's timeline, the launchers' rounds included, with -s).
inline std::vector<std::string> job_secret(const ScratchDir& dir, const std::string& secret) {
  std::ofstream(dir.file("job.token")) << secret << "\n";
  const char* level = std::getenv("COLLIE_TEST_LOG");
  return {"COLLIE_STORE_TOKEN_FILE=" + dir.file("job.token"), "COLLIE_STORE_TOKEN=",
          std::string("COLLIE_LOG_LEVEL=") + (level != nullptr ? level : "warn")};
}

// The port the store's node wrote to `file` (--port-file); "" if it did not
// within a minute.
inline std::string port_written(const std::string& file) {
  if (!eventually([&] { return !read_file(file).empty(); }, std::chrono::seconds(60))) return "";
  const auto text = read_file(file);
  return text.substr(0, text.find('\n'));
}

}  // namespace collie::test
