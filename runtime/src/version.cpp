#include <collie/version.hpp>

namespace collie {

const char* version() {
  return COLLIE_VERSION_STRING;
}

}  // namespace collie
