# FindAsio: standalone Asio (Debian: libasio-dev), header-only.
# Provides the imported target Asio::Asio. Installed with collie's package so
# that consumers of collie::collie find it the same way.
find_path(Asio_INCLUDE_DIR NAMES asio.hpp)
if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _asio_version_line REGEX "^#define ASIO_VERSION [0-9]+")
  string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1" _asio_version "${_asio_version_line}")
  math(EXPR _asio_major "${_asio_version} / 100000")
  math(EXPR _asio_minor "${_asio_version} / 100 % 1000")
  math(EXPR _asio_patch "${_asio_version} % 100")
  set(Asio_VERSION "${_asio_major}.${_asio_minor}.${_asio_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Asio REQUIRED_VARS Asio_INCLUDE_DIR VERSION_VAR Asio_VERSION
  REASON_FAILURE_MESSAGE "install the Debian package libasio-dev")

# ASIO_DISABLE_STD_ALIGNED_ALLOC: Asio 1.22 chooses between aligned_alloc and
# operator new by a libstdc++ macro that is only defined once some standard
# header was included, so two files including Asio in a different order get
# different inline aligned_new/aligned_delete (an ODR violation that ASan
# reports as alloc-dealloc-mismatch). Pinning the choice keeps every file,
# collie's and its users', in agreement.
if(Asio_FOUND AND NOT TARGET Asio::Asio)
  find_package(Threads REQUIRED)
  add_library(Asio::Asio INTERFACE IMPORTED)
  set_target_properties(Asio::Asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "ASIO_STANDALONE;ASIO_NO_DEPRECATED;ASIO_DISABLE_STD_ALIGNED_ALLOC"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
mark_as_advanced(Asio_INCLUDE_DIR)
