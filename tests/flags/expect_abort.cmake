# Runs PROGRAM with ARG and requires that it fails (a non-zero exit or a signal) and prints MESSAGE (a regex) on its
# output or error output: a report that ends the program (tests/flags/no_exceptions.cpp).
#   cmake -DPROGRAM=<exe> -DARG=<arg> -DMESSAGE=<regex> -P expect_abort.cmake
execute_process(COMMAND "${PROGRAM}" "${ARG}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${PROGRAM} ${ARG}: exit '${rc}'\n${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected ${PROGRAM} ${ARG} to fail, it exited 0")
endif()
if(NOT "${out}${err}" MATCHES "${MESSAGE}")
  message(FATAL_ERROR "expected the message '${MESSAGE}'")
endif()
