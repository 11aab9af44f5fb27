// Generation far past the window with the sliding layers in the bounded window pool,
// through the DecodeEngine on the CUDA backend (bf16 KV in device memory, steps captured as CUDA
// graphs): the scenario of test_sliding_window_generation (runtime/
// sliding_window_generation_scenario.h). The window pool stays flat (every slot owns its 7
// private pages, binds at most 3, the pool is whole at the end) while the dense pool grows, for
// plain decoding and for speculative verify steps of 8 rows, and the sampled tokens equal those
// of full-capacity storage.
//
// Token equality holds on the GPU as on the CPU because the logits are bit-identical between the
// two layouts (test_sliding_window_model_gpu asserts it and says why: the same kernels with the
// same launch shapes read the same keys in the same order, only through another page table).
// Here both layouts also take the same prefill chunks (256, 256, 88 and 256, 134 rows: the 7-page
// reservation never cuts one) and the same decode batches, so the engine's GEMM shapes, split-KV
// plans and sampling inputs agree step by step.
#include <gtest/gtest.h>

#include "ops/backend.h"
#include "runtime/sliding_window_generation_scenario.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

TEST(SlidingWindowGenerationGpu, PlainDecodingPastTheWindowKeepsTheWindowPoolFlat) {
  ES_SKIP_IF_NO_GPU();
  auto backend = ops::makeCudaBackend();
  swa::plainDecodingPastTheWindow(*backend, model::swa::kDeviceBF16);
}

TEST(SlidingWindowGenerationGpu, SpeculativeVerifyStepsPastTheWindowMatchFullCapacity) {
  ES_SKIP_IF_NO_GPU();
  auto backend = ops::makeCudaBackend();
  swa::speculativeVerifyStepsPastTheWindow(*backend, model::swa::kDeviceBF16);
}

}  // namespace
}  // namespace es::runtime
