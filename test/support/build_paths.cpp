// The paths of build_paths.hpp, from the definitions test/CMakeLists.txt
// gives this file alone.
#include "support/build_paths.hpp"

namespace collie::test::paths {

const char* const kCli = COLLIE_CLI_PATH;
const char* const kP2pWorker = COLLIE_P2P_WORKER_PATH;
const char* const kCollectiveWorker = COLLIE_COLLECTIVE_WORKER_PATH;
const char* const kMwProgram = COLLIE_MW_PROGRAM_PATH;
const char* const kShrinkWorker = COLLIE_SHRINK_WORKER_PATH;
const char* const kExamples = COLLIE_EXAMPLES_DIR;
const char* const kGolden = COLLIE_GOLDEN_DIR;
const char* const kDocs = COLLIE_DOCS_DIR;
const char* const kSource = COLLIE_SOURCE_DIR;

}  // namespace collie::test::paths
