# Checks that attnx's headers include only their own layer and the layers below it (CONTRIBUTING.md, "Where
# code goes"; docs/design.md, "Layers"). Run as the test unit.layers_order, or by hand:
#   cmake -DINCLUDE_DIR=include -P cmake/check_layers.cmake
# One line per offending include and a failure otherwise. Written in CMake so that the test suite needs no
# interpreter beyond the build's own.

# Layers, lowest first: "name:prefix,prefix,...". A prefix ending in "/" names a folder.
set(layers
  "base:config.hpp,util/,math/,simd/,exec/"
  "shape:shape/"
  "core:core/"
  "tensor:tensor/"
  "expr:expr/"
  "kernels:kernels/"
  "eval:eval/"
  "api:attention.hpp,state.hpp,io.hpp"
  "grad:grad/"
  "modules:modules/"
  "io:io/"
  "models:models/"
  "train:train/"
  "all:attnx.hpp")

if(NOT INCLUDE_DIR)
  message(FATAL_ERROR "check_layers: pass -DINCLUDE_DIR=<the include directory>")
endif()
get_filename_component(base "${INCLUDE_DIR}/attnx" ABSOLUTE)

# layer_of(<out> <path relative to attnx/>): the layer's index, or -1.
function(layer_of out rel)
  set(index 0)
  foreach(layer IN LISTS layers)
    string(REGEX REPLACE "^[^:]*:" "" prefixes "${layer}")
    string(REPLACE "," ";" prefixes "${prefixes}")
    foreach(p IN LISTS prefixes)
      string(LENGTH "${p}" n)
      string(SUBSTRING "${rel}" 0 ${n} head)
      if(rel STREQUAL p OR (p MATCHES "/$" AND head STREQUAL p))
        set(${out} ${index} PARENT_SCOPE)
        return()
      endif()
    endforeach()
    math(EXPR index "${index} + 1")
  endforeach()
  set(${out} -1 PARENT_SCOPE)
endfunction()

function(layer_name out index)
  list(GET layers ${index} layer)
  string(REGEX REPLACE ":.*" "" layer "${layer}")
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE headers RELATIVE "${base}" "${base}/*.hpp")
list(SORT headers)
set(bad 0)
foreach(rel IN LISTS headers)
  layer_of(me "${rel}")
  if(me EQUAL -1)
    message("${rel}: in no layer (add it to cmake/check_layers.cmake)")
    math(EXPR bad "${bad} + 1")
    continue()
  endif()
  file(STRINGS "${base}/${rel}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]attnx/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]attnx/([^>\"]+)[>\"].*" "\\1" dep_path "${line}")
    layer_of(dep "${dep_path}")
    layer_name(mine ${me})
    if(dep EQUAL -1)
      message("${rel}: includes attnx/${dep_path}, which is in no layer")
      math(EXPR bad "${bad} + 1")
    elseif(dep GREATER me)
      layer_name(theirs ${dep})
      message("${rel}: ${mine} includes attnx/${dep_path} of the higher layer ${theirs}")
      math(EXPR bad "${bad} + 1")
    endif()
  endforeach()
endforeach()
list(LENGTH headers count)
if(bad GREATER 0)
  message(FATAL_ERROR "check_layers: ${bad} include(s) against the layer order")
endif()
message("check_layers: the includes of ${count} headers follow the layer order")
