# Installs the collie build in BUILD_DIR into a scratch prefix, then builds
# and runs the consumer project against it, as an outside user would:
#   find_package(collie) + target_link_libraries(app PRIVATE collie::collie)
# and checks that a program that includes collie.hpp alone compiles without
# Asio's headers (nor spdlog's, fmt's or OpenSSL's): the public collectives
# header shows only what a program that runs collectives needs.
foreach(var BUILD_DIR CONSUMER_SOURCE WORK_DIR CXX_COMPILER GENERATOR MAKE_PROGRAM)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer_test.cmake needs -D${var}=...")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

foreach(header collie/collie.hpp collie/version.hpp collie/store/client.hpp collie/store/server.hpp)
  if(NOT EXISTS "${prefix}/include/${header}")
    message(FATAL_ERROR "the installed tree lacks include/${header}")
  endif()
endforeach()

# What collie.hpp brings in, from the installed tree: no Asio.
run_step("listing collie.hpp's headers" ${CXX_COMPILER} -std=c++20 -M -I${prefix}/include
  "${CONSUMER_SOURCE}/collectives_only.cpp")
# (Matched on the headers outside the installed tree and the consumer's own
# folder, whose paths may hold any word: a build folder named "nocuda".)
string(REPLACE "${prefix}/include/" "<prefix>/" listed "${step_output}")
string(REPLACE "${CONSUMER_SOURCE}/" "<consumer>/" listed "${listed}")
foreach(unwanted /asio /spdlog/ /fmt/ /openssl/ /cuda cuda_runtime)
  string(FIND "${listed}" "${unwanted}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "collie.hpp brings in headers matching '${unwanted}':\n${step_output}")
  endif()
endforeach()
if(NOT step_output MATCHES "collie/process_group.hpp")
  message(FATAL_ERROR "the header listing is not what it should be:\n${step_output}")
endif()

set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()
# The generator collie itself was built with (Ninja, from tools/setup.sh):
# CMake's default, Unix Makefiles, needs `make`, which a fresh Debian lacks.
run_step("configuring the consumer" ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE}" -B "${WORK_DIR}/build"
  -G "${GENERATOR}" -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run_step("building the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("running the consumer" "${WORK_DIR}/build/consumer")
if(NOT step_output MATCHES "consumer: collie [0-9]+\\.[0-9]+\\.[0-9]+ stored and read back 'world'")
  message(FATAL_ERROR "the consumer printed something unexpected:\n${step_output}")
endif()
message(STATUS "${step_output}")
run_step("running the collectives-only program" "${WORK_DIR}/build/collectives_only")
if(NOT step_output MATCHES "collectives_only: all_reduce 6, broadcast 7")
  message(FATAL_ERROR "collectives_only printed something unexpected:\n${step_output}")
endif()
