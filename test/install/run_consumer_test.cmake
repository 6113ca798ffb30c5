# Installs the collie build in BUILD_DIR into a scratch prefix, then builds
# and runs the consumer project against it, as an outside user would:
#   find_package(collie) + target_link_libraries(app PRIVATE collie::collie)
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
