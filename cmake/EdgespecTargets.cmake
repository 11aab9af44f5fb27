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
