// Where this build put the programs the CLI's tests start, and where the
// sources are (collie_cli_tests only). Absolute paths, so they are compiled
// into build_paths.cpp alone: every other file of the tests then compiles
// the same in every clone, and a compiler cache shared by two clones hits
// them (third_party/compiler_cache.cmake).
#pragma once

namespace collie::test::paths {

extern const char* const kCli;               // the collie CLI
extern const char* const kP2pWorker;         // test/transport/p2p_worker.cpp
extern const char* const kCollectiveWorker;  // test/collectives/collective_worker.cpp
extern const char* const kMwProgram;         // test/runtime/master_worker_program.cpp
extern const char* const kShrinkWorker;      // test/runtime/shrink_worker.cpp
extern const char* const kExamples;          // runtime/examples' programs
extern const char* const kGolden;            // test/tools/golden
extern const char* const kDocs;              // docs/
extern const char* const kSource;            // the source tree's root

}  // namespace collie::test::paths
