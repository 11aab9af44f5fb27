#pragma once
// The decode ("gemv") path of the linear layer on a quantized W (LinearParams::quantized,
// common/quant_format.h), for launchLinear's dispatch, the tests and the benchmark; plain C++ (no
// CUDA headers). See linear_quant_gemv.cu for the kernel's design.
//
// Work split: one CTA of 8 warps owns 16 rows of W (output features) for every one of the m <= 16
// rows of x. K is cut into spans of quantGemvSpan(format) elements (whole GGUF blocks, or
// 128 / 256 elements of int4 and fp8); the spans are dealt round-robin to the 8 warps of the CTA
// and the kSplit CTAs of a thread-block cluster (span u goes to warp u mod (8 * kSplit)). Partial
// sums meet in shared memory (the cluster's through distributed shared memory) and are added in a
// fixed order, so the result does not depend on timing or on m: the rows of a 16-row verify equal
// 1-row decodes bit for bit.
#include <cstdint>

#include "common/quant_format.h"
#include "common/stream.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"

namespace es::kernel::detail {

inline constexpr int32_t kQuantGemvWarps = 8;   // warps per CTA (256 threads)
inline constexpr int32_t kQuantGemvStages = 3;  // shared-memory stages per warp (spans in flight)

// K elements of one span of `format`: 256 for int4, Q4_0, Q4_1 and the K-quants (one 256-element
// super-block), 128 for fp8 and Q8_0 (four 34-byte blocks), so a span's row holds 128-210 bytes.
int32_t quantGemvSpan(QuantFormat format);

// Bytes of one staged span row in shared memory: the span's row bytes rounded up to 16, plus 16
// where a row's span may start inside its first 16-byte segment (the GGUF formats whose blocks
// are not multiples of 16 bytes), plus 16 more where that leaves an even number of segments (bank
// conflicts).
int32_t quantGemvRowStride(QuantFormat format);

// Dynamic shared memory of one CTA of `format`: 8 warps x kQuantGemvStages spans x 16 rows.
int32_t quantGemvSmemBytes(QuantFormat format);

struct QuantGemvConfig {
  int32_t kSplit = 1;  // CTAs per cluster splitting K: 1, 2, 4 or 8
};

// The launcher's configuration for W [n, k] of `format` on numSms multiprocessors, the same at
// every m (so each output is summed in the same order at every m). Every CTA streams the same
// bytes, so the grid runs in waves of 2 CTAs an SM (the occupancy the kernel is built for) and a
// part-filled last wave costs a whole one: kSplit is the split of 1, 2, 4, 8 (with at least one
// span for every warp of the cluster) whose grid fills its waves best, the smaller one unless a
// larger fills them by 3 points more. Qwen3-8B on 132 SMs: qkv (6144 x 4096, 384 tiles: 1.45
// waves unsplit) takes 2; o, gate_up, down and lm_head fill their waves to 97 % and more with 1;
// thin matrices (a few tiles) take the largest split their spans allow.
QuantGemvConfig chooseQuantGemvConfig(QuantFormat format, int32_t n, int32_t k, int32_t numSms);

// Why the quantized gemv cannot run p (a short requirement naming the limit, e.g. "k must be a
// multiple of 16"), or nullptr when it can. Host-only checks: p.quantized set with a valid layout,
// bf16 / f16 x, 1 <= m <= 16, k % 16 == 0, the alignments of x, y, bias, normWeight and the
// quantized arrays, y in the input dtype with a fused norm or residual add (normWeight,
// accumulate: fused as the dense gemv fuses them, linear.h) (linear_quant_gemv_args.cpp).
const char* quantGemvRejection(const LinearParams& p);

// Validates p (validate + quantGemvRejection) and cfg, then launches (linear_quant_gemv.cu, CUDA
// builds). epilogue: as the dense gemv's (linear_gemv.h; kSwiglu: W's gate/up rows in
// GateUpLayout::kInterleaved8, n % 16 == 0, y [m, n / 2] in the input dtype, bit for bit kNone
// followed by launchSwiglu). No allocation, no synchronisation, no host reads of device memory:
// capturable in a CUDA graph.
void launchLinearQuantGemv(const LinearParams& p, QuantGemvConfig cfg, cudaStream_t stream,
                           GemvEpilogue epilogue = GemvEpilogue::kNone);

}  // namespace es::kernel::detail
