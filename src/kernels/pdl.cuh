#pragma once
// Programmatic dependent launch (sm_90), shared by the kernels of a forward step.
//
// A kernel launched with pdl::launch may be scheduled while the previous kernel of its stream is
// still running: its CTAs become resident during that kernel's tail instead of after it, which
// hides the launch gap between the many small kernels of a decode step (inside a CUDA graph as
// well: stream capture records the programmatic edge). In exchange every such kernel must call
// pdl::wait() before it touches memory the previous kernel reads or writes; pdl::enter() does
// that first thing, then pdl::trigger() lets the next kernel be scheduled in turn (only once this
// one's CTAs have all passed their wait: the chain never runs more than one kernel ahead).
// Both are no-ops in a kernel launched the ordinary way; a kernel that never triggers (cuBLASLt)
// simply lets its dependent start when it completes. The debug switch ES_PDL=0
// (debug_switches.h) makes pdl::launch an ordinary launch.
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.h"
#include "kernels/debug_switches.h"

namespace es::kernel::pdl {

__device__ __forceinline__ void wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void trigger() { asm volatile("griddepcontrol.launch_dependents;" :::); }
__device__ __forceinline__ void enter() {
  wait();
  trigger();
}

// False when the debug switch ES_PDL=0 is set.
inline bool enabled() { return debug::pdlEnabled(); }

// Early reads: a dependent kernel may read, before its wait, memory that the kernel launched
// immediately before it does not write. When a kernel starts, the one before its predecessor has
// completed and its writes are visible (the predecessor's CTAs all passed their wait before this
// one could be scheduled), so host copies and the outputs of any earlier kernel are safe; the
// predecessor's are not. The kernels that read early say what (qkv_rope_kv_write.cu,
// linear_gemv.cu, paged_attention.cu's split kernel); their callers must not let the kernel right
// before them write those inputs. In an ordinary launch the wait returns at once, so reading
// early is safe there too; earlyReads() tells the kernels that take the choice as an argument
// whether launches are programmatic.
inline bool earlyReads() { return enabled(); }

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the stream's
// previous kernel (an ordinary launch with ES_PDL=0).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = enabled() ? 1 : 0;
  ES_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace es::kernel::pdl
