# The compiler cache: Debian's ccache, where it is installed (tools/setup.sh
# installs it), in front of every C++ compile; COLLIE_CCACHE=OFF goes without.
# Its settings let a clone in another folder hit what this one built (CI
# builds a fresh clone of each submission), and they travel on the compile
# line, so they hold without a ccache.conf and change nothing else's:
#   CCACHE_BASEDIR=<source dir>  paths under the clone become relative to the
#                                compile's folder, the same in every clone (the
#                                build folders lie inside it: CMakePresets.json)
#   CCACHE_NOHASHDIR=1           the compile's folder is not hashed: the -g1 of
#                                the sanitizer presets names it in the debug
#                                information, which then names the first clone's
#   CCACHE_SLOPPINESS            the precompiled headers (pch_defines,
#                                time_macros: ccache's manual), and headers a
#                                fresh clone wrote a moment ago (include_file_*)
# A compile definition holding a path differs between clones and misses: such
# paths are kept to one small file per target (test/support/build_paths.cpp,
# the CLI's rank_environment.cpp). docs/building.md has the figures.
option(COLLIE_CCACHE "Compile through ccache where it is installed" ON)
if(COLLIE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(COLLIE_CCACHE_PROGRAM ccache)
  # A ccache that cannot reach its cache folder (no home folder, say) is
  # left out rather than failing every compile.
  if(COLLIE_CCACHE_PROGRAM)
    execute_process(COMMAND ${COLLIE_CCACHE_PROGRAM} --print-stats RESULT_VARIABLE ccache_rc
      OUTPUT_QUIET ERROR_VARIABLE ccache_error)
    if(NOT ccache_rc EQUAL 0)
      message(STATUS "Compiler cache: ${COLLIE_CCACHE_PROGRAM} left out: ${ccache_error}")
      unset(COLLIE_CCACHE_PROGRAM CACHE)
      set(COLLIE_CCACHE_PROGRAM "")
    endif()
  endif()
  if(COLLIE_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      ${COLLIE_CCACHE_PROGRAM})
    message(STATUS "Compiler cache: ${COLLIE_CCACHE_PROGRAM} (COLLIE_CCACHE=OFF to go without)")
  endif()
endif()
