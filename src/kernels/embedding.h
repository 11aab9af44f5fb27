#pragma once
// Token embedding lookup: out[t, :] = table[tokens[t], :]. A token outside [0, vocab) (or a
// negative padding id) gives a zero row; callers validate user token ids on the host first.
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

struct EmbeddingParams {
  const int32_t* tokens = nullptr;  // [numTokens] i32
  const void* table = nullptr;      // [vocabSize, hiddenSize] dtype
  void* out = nullptr;              // [numTokens, hiddenSize] dtype
  int32_t numTokens = 0;            // >= 0; 0 = no-op
  int32_t vocabSize = 0;            // > 0
  int32_t hiddenSize = 0;           // > 0
  DType dtype = DType::kBF16;       // f32, f16 or bf16 (table and out)
};

bool validate(const EmbeddingParams& p);  // false = no-op; throws InvalidArgument
void launchEmbedding(const EmbeddingParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void embedding(const kernel::EmbeddingParams& p);
}
