# Install/consumer test, run as cmake -P by ctest (see tests/CMakeLists.txt).
#   MODE=find_package      cmake --install ATTNX_BINARY_DIR into INSTALL_PREFIX,
#                          then configure, build and run tests/consumer with
#                          CMAKE_PREFIX_PATH=INSTALL_PREFIX
#   MODE=add_subdirectory  configure, build and run tests/consumer with
#                          add_subdirectory(ATTNX_SOURCE_DIR)
#   MODE=fetch_content     the same through FetchContent (SOURCE_DIR: nothing is downloaded)
# The consumer is a Debug build (this test is about the packaging, not speed): its header-only program and, in the
# two source modes, attnx's library compile at -O0; find_package uses the library this build installed.
# The consumer is built with the same compiler and generator as the build.
cmake_minimum_required(VERSION 3.25)

foreach(var MODE ATTNX_SOURCE_DIR ATTNX_BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR
            INSTALL_PREFIX GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED CONFIG OR CONFIG STREQUAL "")
  set(CONFIG Release)
endif()
# The consumer builds in Debug (its own code, and attnx's library where the consumer builds it); the library this
# build installs keeps its CONFIG.
set(CONSUMER_CONFIG Debug)

function(run what)
  string(REPLACE ";" " " text "${ARGN}")
  message(STATUS "[${what}] ${text}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message("${out}")
    message(FATAL_ERROR "consumer test (${MODE}): ${what} failed (${rc})")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}"
  -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${CONSUMER_CONFIG}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(DEFINED MAKE_PROGRAM AND NOT MAKE_PROGRAM STREQUAL "")
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()

if(MODE STREQUAL "find_package")
  file(REMOVE_RECURSE "${INSTALL_PREFIX}")
  run(install "${CMAKE_COMMAND}" --install "${ATTNX_BINARY_DIR}"
      --prefix "${INSTALL_PREFIX}" --config "${CONFIG}")
  foreach(f include/attnx/attnx.hpp include/attnx/kernels/impl/dispatch.hpp)
    if(NOT EXISTS "${INSTALL_PREFIX}/${f}")
      message(FATAL_ERROR "consumer test: ${INSTALL_PREFIX}/${f} was not installed")
    endif()
  endforeach()
  run(configure "${CMAKE_COMMAND}" ${configure_args} "-DCMAKE_PREFIX_PATH=${INSTALL_PREFIX}")
  # The package must come from the install prefix, not from the build tree.
  file(STRINGS "${WORK_DIR}/CMakeCache.txt" attnx_dir_line REGEX "^attnx_DIR:")
  string(REGEX REPLACE "^attnx_DIR:[A-Z]+=" "" attnx_dir "${attnx_dir_line}")
  string(FIND "${attnx_dir}" "${INSTALL_PREFIX}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "consumer test: attnx was found at '${attnx_dir}', not under ${INSTALL_PREFIX}")
  endif()
  message(STATUS "attnx_DIR = ${attnx_dir}")
elseif(MODE STREQUAL "add_subdirectory")
  run(configure "${CMAKE_COMMAND}" ${configure_args} "-DATTNX_SOURCE_DIR=${ATTNX_SOURCE_DIR}")
elseif(MODE STREQUAL "fetch_content")
  run(configure "${CMAKE_COMMAND}" ${configure_args} "-DATTNX_FETCH_SOURCE_DIR=${ATTNX_SOURCE_DIR}")
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown MODE '${MODE}'")
endif()

run(build "${CMAKE_COMMAND}" --build "${WORK_DIR}" --config "${CONSUMER_CONFIG}")

foreach(program consumer consumer_header_only)
  set(exe "${WORK_DIR}/${program}")
  if(NOT EXISTS "${exe}" AND EXISTS "${WORK_DIR}/${CONSUMER_CONFIG}/${program}")
    set(exe "${WORK_DIR}/${CONSUMER_CONFIG}/${program}")          # multi-config generators
  endif()
  run(run "${exe}")
  string(STRIP "${last_output}" last_output)
  message(STATUS "${program} printed: ${last_output}")
endforeach()
message(STATUS "consumer test (${MODE}) passed")
