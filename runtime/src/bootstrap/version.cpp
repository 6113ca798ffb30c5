// collie's version, as the build configured it (version.hpp).
#include <collie/version.hpp>

namespace collie {

const char* version() {
  return COLLIE_VERSION_STRING;
}

}  // namespace collie
