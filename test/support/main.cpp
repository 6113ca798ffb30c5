// Test runner: Catch2's main, after raising the open-file limit (the
// concurrency tests hold hundreds of sockets) and quieting the logger
// unless COLLIE_LOG_LEVEL asks otherwise.
#include <cstdlib>

#if COLLIE_CATCH2_MAJOR == 3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER  // Catch2 2: this file holds the runner
#include <catch2/catch.hpp>
#endif

#include <collie/log.hpp>
#include <collie/store/server.hpp>

int main(int argc, char* argv[]) {
  collie::store::raise_open_file_limit();
  if (std::getenv("COLLIE_LOG_LEVEL") == nullptr) collie::set_log_level(spdlog::level::err);
  return Catch::Session().run(argc, argv);
}
