# Shared compile settings for every edgespec target.
function(es_target_defaults target)
  if(ES_HAVE_CUDA)
    target_compile_definitions(${target} PUBLIC ES_HAVE_CUDA=1)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
                               -Xcompiler=-Wall -lineinfo>)
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                             POSITION_INDEPENDENT_CODE ON)
endfunction()

# es_add_layer(<layer> [PUBLIC <layer>...] [PRIVATE <layer>...] [LIBS <target>...])
# One static library es_<layer> of src/<layer>/*.cpp (and, in CUDA builds, its *.cu and
# *_cuda.cpp). Its include root, ${CMAKE_BINARY_DIR}/layers/<layer>, holds only a link
# <layer> -> src/<layer>, so "<layer>/x.h" is includable exactly where es_<layer> is linked:
# an include of a layer that is not a declared dependency fails with "file not found".
# PUBLIC layers: the layer's headers include theirs (dependents see them too). PRIVATE layers:
# only its sources call them (linked, but their headers stay hidden from dependents). LIBS:
# external targets, public.
function(es_add_layer layer)
  cmake_parse_arguments(arg "" "" "PUBLIC;PRIVATE;LIBS" ${ARGN})
  set(dir ${PROJECT_SOURCE_DIR}/src/${layer})
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  list(FILTER sources EXCLUDE REGEX "_cuda\\.cpp$")
  list(FILTER sources EXCLUDE REGEX "/src/cli/main\\.cpp$")
  if(ES_HAVE_CUDA)
    file(GLOB cuda_sources CONFIGURE_DEPENDS ${dir}/*.cu ${dir}/*_cuda.cpp)
    list(APPEND sources ${cuda_sources})
  endif()
  set(root ${CMAKE_BINARY_DIR}/layers/${layer})
  file(MAKE_DIRECTORY ${root})
  file(CREATE_LINK ${dir} ${root}/${layer} SYMBOLIC)
  add_library(es_${layer} STATIC ${sources})
  target_include_directories(es_${layer} PUBLIC ${root})
  list(TRANSFORM arg_PUBLIC PREPEND es_)
  list(TRANSFORM arg_PRIVATE PREPEND es_)
  target_link_libraries(es_${layer} PUBLIC ${arg_PUBLIC} ${arg_LIBS} PRIVATE ${arg_PRIVATE})
  es_target_defaults(es_${layer})
endfunction()
