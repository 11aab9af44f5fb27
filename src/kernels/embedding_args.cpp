// Host validation of launchEmbedding / ref::embedding (every build).
#include "common/errors.h"
#include "kernels/embedding.h"

namespace es::kernel {

bool validate(const EmbeddingParams& p) {
  constexpr const char* kWhere = "launchEmbedding";
  ES_CHECK_ARG(p.numTokens >= 0, kWhere, "numTokens", p.numTokens, "must be >= 0");
  ES_CHECK_ARG(p.vocabSize > 0, kWhere, "vocabSize", p.vocabSize, "must be > 0");
  ES_CHECK_ARG(p.hiddenSize > 0, kWhere, "hiddenSize", p.hiddenSize, "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, kWhere,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  if (p.numTokens == 0) return false;
  ES_CHECK_ARG(p.tokens != nullptr, kWhere, "tokens", "null", "must not be null");
  ES_CHECK_ARG(p.table != nullptr, kWhere, "table", "null", "must not be null");
  ES_CHECK_ARG(p.out != nullptr, kWhere, "out", "null", "must not be null");
  return true;
}

}  // namespace es::kernel
