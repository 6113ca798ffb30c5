# How collie finds its dependencies: Debian packages only, never copied source.
#   libasio-dev   -> Asio::Asio   (standalone Asio, header-only; FindAsio.cmake here)
#   libspdlog-dev -> spdlog::spdlog (brings fmt::fmt from libfmt-dev)
#   libssl-dev    -> OpenSSL::Crypto (HMAC-SHA256 and nonces for store authentication)
#   libcli11-dev  -> CLI11::CLI11 (the collie command line)
#   nlohmann-json3-dev -> nlohmann_json::nlohmann_json (explain's JSON, trace merge, etcd's replies)
#   libcurl4-openssl-dev -> CURL::libcurl (the etcd store: HTTP and TLS to etcd's gateway)
#   catch2        -> Catch2::Catch2 (tests: Catch2 2.13 on Debian 12, 3.x on Debian 13;
#                    test/support/catch.hpp is the one place that tells them apart)
#   the CUDA toolkit (optional, COLLIE_CUDA) -> CUDA::cudart_static (NVIDIA's
#                    installer or Debian's nvidia-cuda-toolkit; never required)
list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_LIST_DIR})

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
find_package(Asio 1.18 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(OpenSSL 1.1 REQUIRED COMPONENTS Crypto)
find_package(CLI11 2.0 REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CURL 7.73 REQUIRED)
if(COLLIE_BUILD_TESTS)
  # No version in the call: Catch2 3's package accepts only requests for 3.x.
  find_package(Catch2 REQUIRED)
  if(Catch2_VERSION VERSION_LESS 2.13 OR Catch2_VERSION VERSION_GREATER_EQUAL 4)
    message(FATAL_ERROR "collie's tests need Catch2 2.13 or 3.x; found ${Catch2_VERSION} in ${Catch2_DIR}")
  endif()
  string(REGEX MATCH "^[0-9]+" COLLIE_CATCH2_MAJOR "${Catch2_VERSION}")
endif()

# CUDA device buffers (runtime/src/device/): AUTO builds them in where the
# toolkit is found; ON requires it; OFF leaves them out. Only the toolkit's
# headers and its static runtime are used (no nvcc, no kernels): the runtime
# loads the driver at its first call, so a machine without one runs collie.
set(COLLIE_WITH_CUDA OFF)
if(NOT COLLIE_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static)
    set(COLLIE_WITH_CUDA ON)
    message(STATUS "collie: CUDA device buffers built in (CUDA ${CUDAToolkit_VERSION} in ${CUDAToolkit_LIBRARY_DIR})")
  elseif(COLLIE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "COLLIE_CUDA=ON but no CUDA toolkit was found: set CUDAToolkit_ROOT, or COLLIE_CUDA=AUTO or OFF")
  else()
    message(STATUS "collie: CUDA device buffers left out (no CUDA toolkit found; COLLIE_CUDA=AUTO)")
  endif()
endif()
# For tools/test.sh: whether this build has them.
set(COLLIE_CUDA_BUILT_IN ${COLLIE_WITH_CUDA} CACHE INTERNAL "CUDA device buffers built in")
