// Embedding lookup: one CTA per token copies the table row (a byte copy, 16-byte accesses when
// the row size and both bases allow), zeros for ids outside [0, vocabSize).
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/embedding.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/pdl.cuh"

namespace es::kernel {
namespace {

template <typename V>
__global__ void embeddingKernel(const int32_t* __restrict__ tokens, const V* __restrict__ table,
                                V* __restrict__ out, int32_t vocab, int64_t rowVecs) {
  pdl::enter();
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  const bool valid = id >= 0 && id < vocab;
  V* dst = out + t * rowVecs;
  const V* src = table + int64_t{valid ? id : 0} * rowVecs;
  for (int64_t i = threadIdx.x; i < rowVecs; i += blockDim.x) dst[i] = valid ? src[i] : V{};
}

template <typename V>
void launch(const EmbeddingParams& p, int64_t rowBytes, cudaStream_t stream) {
  const int64_t rowVecs = rowBytes / int64_t{sizeof(V)};
  const int threads = rowVecs >= 256 ? 256 : static_cast<int>((rowVecs + 31) / 32 * 32);
  pdl::launch(embeddingKernel<V>, dim3(p.numTokens), dim3(threads), 0, stream, p.tokens,
              static_cast<const V*>(p.table), static_cast<V*>(p.out), p.vocabSize, rowVecs);
}

}  // namespace

void launchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  const int64_t rowBytes = int64_t{p.hiddenSize} * dtype_size(p.dtype);
  const auto a = reinterpret_cast<uintptr_t>(p.table) | reinterpret_cast<uintptr_t>(p.out) |
                 static_cast<uintptr_t>(rowBytes);
  if (a % 16 == 0)
    launch<uint4>(p, rowBytes, stream);
  else if (a % 8 == 0)
    launch<uint2>(p, rowBytes, stream);
  else if (a % 4 == 0)
    launch<uint32_t>(p, rowBytes, stream);
  else
    launch<uint16_t>(p, rowBytes, stream);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
