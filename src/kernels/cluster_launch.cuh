#pragma once
// Launching a kernel over 1-D thread-block clusters (the cluster spans grid x), and choosing the
// cluster size. Kernels that split one row over a cluster and merge through distributed shared
// memory (argmax.cu, the full-row sampling decision in sampling.cu) want 16 CTAs, a
// non-portable size that the device may refuse for a given kernel's resources; 8 is the portable
// size every sm_90 device co-schedules.
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.h"

namespace es::kernel::cluster {

inline constexpr int kPortableSize = 8;

// cudaLaunchKernelEx's configuration with one cluster-dimension attribute. Not copyable: the
// configuration points at the attribute stored beside it.
struct Config {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1]{};

  Config(dim3 grid, dim3 block, unsigned sizeX, cudaStream_t stream) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = sizeX;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  Config(const Config&) = delete;
  Config& operator=(const Config&) = delete;
};

// `want` (e.g. 16) when the device allows that non-portable size for `kernel` with `threads`
// threads per CTA and can co-schedule at least one such cluster, else kPortableSize. A refused
// query leaves no sticky error behind. Callers cache the answer per kernel.
template <typename... Params>
int widestSize(void (*kernel)(Params...), int want, int threads) {
  int size = kPortableSize;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
      cudaSuccess) {
    const Config c(dim3(want), dim3(threads), static_cast<unsigned>(want), nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &c.cfg) == cudaSuccess && clusters > 0) {
      size = want;
    }
  }
  (void)cudaGetLastError();
  return size;
}

// kernel<<<grid, block, 0, stream>>>(args...) with clusters of sizeX CTAs along grid x.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, int sizeX, cudaStream_t stream,
            Args&&... args) {
  const Config c(grid, block, static_cast<unsigned>(sizeX), stream);
  ES_CUDA_CHECK(cudaLaunchKernelEx(&c.cfg, kernel, std::forward<Args>(args)...));
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel::cluster
