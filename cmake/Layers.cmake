# metajit_layer(NAME [DIRECTORY dir] [PUBLIC_HEADERS h...] [LINK ...])
#
# Builds the layer NAME (docs/architecture.md) as the static library metajit_NAME from
# DIRECTORY/*.cc (default: NAME). Sources include project headers as "layer/file.h" and public
# ones as <metajit/file.h>; the layer compiles against
#   ${CMAKE_BINARY_DIR}/layers/NAME/
# which holds a link to its own directory and to each layer below it, and links to the public
# headers it and the layers below it may use: an #include of anything else fails to compile.
# The layers are declared bottom-up; each one sees what the previous one saw.
set(METAJIT_LAYER_DIRS "")
set(METAJIT_LAYER_PUBLIC "")

function(metajit_layer name)
  cmake_parse_arguments(L "" "DIRECTORY" "PUBLIC_HEADERS;LINK" ${ARGN})
  if(NOT L_DIRECTORY)
    set(L_DIRECTORY ${name})
  endif()
  # Below this layer: every layer declared before it that it links, directly or not. Keeping
  # the visible set per target (not per declaration order) lets cache sit beside codegen.
  set(visible_dirs ${L_DIRECTORY})
  set(visible_public ${L_PUBLIC_HEADERS})
  foreach(dep ${L_LINK})
    if(TARGET ${dep})
      get_property(dirs TARGET ${dep} PROPERTY METAJIT_VISIBLE_DIRS)
      get_property(pub TARGET ${dep} PROPERTY METAJIT_VISIBLE_PUBLIC)
      list(APPEND visible_dirs ${dirs})
      list(APPEND visible_public ${pub})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES visible_dirs)
  list(REMOVE_DUPLICATES visible_public)

  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/metajit)
  foreach(dir ${visible_dirs})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${dir} ${root}/${dir} SYMBOLIC)
  endforeach()
  foreach(h ${visible_public})
    if(NOT EXISTS ${CMAKE_SOURCE_DIR}/include/metajit/${h})
      message(FATAL_ERROR "layer ${name}: no public header include/metajit/${h}")
    endif()
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/include/metajit/${h} ${root}/metajit/${h} SYMBOLIC)
  endforeach()

  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${L_DIRECTORY}/*.cc)
  add_library(metajit_${name} STATIC ${sources})
  set_target_properties(metajit_${name} PROPERTIES
    METAJIT_VISIBLE_DIRS "${visible_dirs}" METAJIT_VISIBLE_PUBLIC "${visible_public}")
  target_include_directories(metajit_${name} PRIVATE ${root})
  target_compile_options(metajit_${name} PRIVATE ${METAJIT_WARNINGS})
  if(METAJIT_SHARED)  # exported from libmetajit.so: the public headers' declarations only
    set_target_properties(metajit_${name} PROPERTIES CXX_VISIBILITY_PRESET hidden
                          VISIBILITY_INLINES_HIDDEN ON)
  endif()
  if(L_LINK)
    target_link_libraries(metajit_${name} ${L_LINK})
  endif()
endfunction()
