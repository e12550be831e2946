# Compile-fail check, run as
#   cmake -DCOMPILER=<c++> -DSOURCE=<file.cpp> -DINCLUDE_DIR=<attnx include>
#         [-DSYSTEM_INCLUDE_DIRS=<dir>|<dir>...] [-DMODE=fail|control]
#         [-DEXTRA_FLAGS=<flag>|<flag>...] [-DPCH=<precompiled attnx.hpp>] -P compile_fail.cmake
#
# MODE=fail (default): compiling SOURCE with -fsyntax-only must FAIL, print
#   exactly ONE error (one line of the form "file:line:col: error: ..."; notes
#   and the context lines of that error are not errors), and the compiler's
#   output must match every regex given in the file on lines
#     // expect: <regex>
#   (CMake regex syntax, matched anywhere in the whole output; at least one
#   such line is required).
# MODE=control: compiling SOURCE with -DATTNX_CONTROL must SUCCEED.
#
# Either way the script reports how many lines the compiler printed.
# The compiler runs with LC_ALL=C and without colours, so the output is the
# same on every machine.

cmake_minimum_required(VERSION 3.25)  # policies (CMP0054, ...)

foreach(var COMPILER SOURCE INCLUDE_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "compile_fail.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED MODE OR MODE STREQUAL "")
  set(MODE fail)
endif()
if(NOT MODE MATCHES "^(fail|control)$")
  message(FATAL_ERROR "compile_fail.cmake: MODE must be 'fail' or 'control', not '${MODE}'")
endif()
if(NOT EXISTS "${SOURCE}")
  message(FATAL_ERROR "compile_fail.cmake: no such file: ${SOURCE}")
endif()

# --- collect the '// expect: <regex>' lines, without CMake list splitting
# (a regex may contain ';' or unbalanced '[') ---------------------------------
set(expects_count 0)
file(READ "${SOURCE}" content)
string(LENGTH "${content}" remaining)
while(remaining GREATER 0)
  string(FIND "${content}" "\n" nl)
  if(nl EQUAL -1)
    set(line "${content}")
    set(content "")
  else()
    string(SUBSTRING "${content}" 0 ${nl} line)
    math(EXPR next "${nl} + 1")
    string(SUBSTRING "${content}" ${next} -1 content)
  endif()
  string(LENGTH "${content}" remaining)
  string(REGEX REPLACE "\r$" "" line "${line}")
  if(line MATCHES "^[ \t]*//[ \t]*expect:[ \t]*(.*[^ \t])[ \t]*$")
    math(EXPR expects_count "${expects_count} + 1")
    set(expect_${expects_count} "${CMAKE_MATCH_1}")
  endif()
endwhile()

if(MODE STREQUAL "fail" AND expects_count EQUAL 0)
  message(FATAL_ERROR "compile_fail: ${SOURCE} has no '// expect: <regex>' line")
endif()

# --- compile --------------------------------------------------------------
set(cmd "${COMPILER}" -std=c++20 -fsyntax-only -fdiagnostics-color=never
        "-I${INCLUDE_DIR}")
if(DEFINED SYSTEM_INCLUDE_DIRS AND NOT SYSTEM_INCLUDE_DIRS STREQUAL "")
  string(REPLACE "|" ";" sys_dirs "${SYSTEM_INCLUDE_DIRS}")
  foreach(dir IN LISTS sys_dirs)
    list(APPEND cmd -isystem "${dir}")
  endforeach()
endif()
if(DEFINED EXTRA_FLAGS AND NOT EXTRA_FLAGS STREQUAL "")
  string(REPLACE "|" ";" extra "${EXTRA_FLAGS}")
  list(APPEND cmd ${extra})
endif()
if(MODE STREQUAL "control")
  list(APPEND cmd -DATTNX_CONTROL)
endif()
# PCH: attnx/attnx.hpp precompiled with these flags (tests/CMakeLists.txt: <dir>/attnx_pch.hpp.gch for g++, a
# .pch for clang). Used when it exists, no extra flags are given and no header is newer; otherwise the headers
# are parsed as usual (g++ would take a stale .gch without a word).
if(DEFINED PCH AND EXISTS "${PCH}" AND (NOT DEFINED EXTRA_FLAGS OR EXTRA_FLAGS STREQUAL ""))
  file(GLOB_RECURSE headers "${INCLUDE_DIR}/attnx/*.hpp" "${INCLUDE_DIR}/attnx/*.inc")
  set(pch_fresh ON)
  foreach(h IN LISTS headers)
    if("${h}" IS_NEWER_THAN "${PCH}")
      set(pch_fresh OFF)
      break()
    endif()
  endforeach()
  if(pch_fresh AND PCH MATCHES "\\.gch$")
    string(REGEX REPLACE "\\.gch$" "" pch_header "${PCH}")
    list(APPEND cmd -include "${pch_header}")
  elseif(pch_fresh)
    list(APPEND cmd -include-pch "${PCH}")
  endif()
endif()
list(APPEND cmd "${SOURCE}")

string(REPLACE ";" " " cmd_text "${cmd}")
message(STATUS "compile_fail (${MODE}): ${cmd_text}")

execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env LC_ALL=C LANG=C ${cmd}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

# Lines printed (stdout and stderr together).
string(REGEX MATCHALL "\n" newlines "${output}")
list(LENGTH newlines lines)
if(NOT output STREQUAL "" AND NOT output MATCHES "\n$")
  math(EXPR lines "${lines} + 1")
endif()
message(STATUS "compiler exited with ${rc}")
message(STATUS "compiler printed ${lines} lines")

if(MODE STREQUAL "control")
  if(NOT rc EQUAL 0)
    message("---- compiler output ----\n${output}---- end of compiler output ----")
    message(FATAL_ERROR
      "compile_fail control: ${SOURCE} with -DATTNX_CONTROL must compile, but the compiler exited with ${rc}")
  endif()
  return()
endif()

# MODE fail: must not compile, and every expected message must appear.
set(problems "")
if(rc EQUAL 0)
  string(APPEND problems "  the compiler accepted the code (exit code 0), it must reject it\n")
elseif(NOT rc MATCHES "^[0-9]+$")
  string(APPEND problems "  the compiler did not run properly: ${rc}\n")
endif()
# One mistake, one error: count the diagnostics (g++ and clang both print "<file>:<line>:<col>: error: ").
string(REGEX MATCHALL ":[0-9]+:[0-9]+: (fatal )?error: " error_lines "${output}")
list(LENGTH error_lines errors)
message(STATUS "compiler reported ${errors} error(s)")
if(NOT errors EQUAL 1)
  string(APPEND problems "  the compiler reported ${errors} errors; one mistake must give exactly one\n")
endif()
foreach(i RANGE 1 ${expects_count})
  if(NOT output MATCHES "${expect_${i}}")
    string(APPEND problems "  expected message not found: ${expect_${i}}\n")
  else()
    message(STATUS "matched: ${expect_${i}}")
  endif()
endforeach()

if(NOT problems STREQUAL "")
  message("---- compiler output ----\n${output}---- end of compiler output ----")
  message(FATAL_ERROR "compile_fail: ${SOURCE}\n${problems}")
endif()
message(STATUS "compile_fail: ${SOURCE} was rejected with all ${expects_count} expected message(s)")
