#pragma once
// Quantized weight matrices: the formats a linear layer's W [N, K] may be held in on a backend,
// and the one layout each has there. Every checkpoint format is repacked into these at load
// (model/quantized_checkpoint.h), so kernels, the CPU reference and the models know only these.
//
// Every layout is row-major and row-independent: row n (output feature n) owns
// dataRowBytes(format, k, group) bytes of `data` at data + n * dataRowBytes, and, where the
// format has them, its own row of `scales` and `zeros`. Concatenating matrices along N (the fused
// q|k|v rows) and reordering rows (the interleaved gate/up layout, GGUF's Llama q/k permutation)
// are therefore plain row copies of each array, as for dense weights.
//
//   kInt4       4-bit unsigned q in [0, 15], one scale s (f16) and zero point z (u8 in [0, 15]) per
//               `group` consecutive k of a row: w[n][k] = (q - z) * s, computed in f32.
//                 data   [N, K / 2] u8: byte j holds k = 2j in its low nibble, k = 2j + 1 in its
//                        high nibble.
//                 scales [N, K / group] f16;  zeros [N, K / group] u8.
//                 group in {32, 64, 128}; K % group == 0.
//               AWQ (GEMM packing), GPTQ (desc_act false) and `edgespec quantize --to int4` all
//               become this; GPTQ's stored zero points are its "v1" values (z - 1), repacked +1.
//   kFp8E4M3    FP8 E4M3 (OCP: bias 7, no infinities, 0x7f / 0xff NaN, max 448) q with one f32
//               scale per `group` consecutive k of a row: w[n][k] = fp8(q) * s.
//                 data   [N, K] u8;  scales [N, ceil(K / group)] f32;  zeros: none.
//               group = 128 for Qwen3-FP8's [128, 128] blocks (the block's weight_scale_inv is
//               repeated on each of its 128 rows; the last block of a row may be short), group = K
//               for compressed-tensors per-channel scales.
//   kGgufQ8_0 … kGgufQ6_K   ggml's blocks along k, exactly as a GGUF file stores a row
//               (model/gguf_dequant.h defines each block): data [N, K / blockElems * blockBytes]
//               u8; scales and zeros live inside the blocks (none here); group = blockElems.
#include <cstdint>
#include <optional>
#include <string_view>

namespace es {

enum class QuantFormat : uint8_t {
  kInt4,
  kFp8E4M3,
  kGgufQ8_0,
  kGgufQ4_0,
  kGgufQ4_1,
  kGgufQ4_K,
  kGgufQ5_K,
  kGgufQ6_K,
};

// "int4", "fp8-e4m3", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k".
std::string_view quantFormatName(QuantFormat format);

// The ggml type id (model/gguf.h) of a GGUF format, and the GGUF format of a ggml type id
// (nullopt for a type kept dense or not supported quantized).
uint32_t ggmlTypeOf(QuantFormat format);
std::optional<QuantFormat> quantFormatOfGgmlType(uint32_t ggmlType);

// Elements and bytes of one GGUF block (32 / 256 elements); 0 for kInt4 and kFp8E4M3.
int32_t ggufBlockElems(QuantFormat format);
int32_t ggufBlockBytes(QuantFormat format);

// Bytes of one row of `data` / `scales` / `zeros` for a row of k elements (0 where the format
// has no such array). k and group must satisfy the format's rule (quantLayoutRejection).
int64_t dataRowBytes(QuantFormat format, int64_t k, int32_t group);
int64_t scaleRowBytes(QuantFormat format, int64_t k, int32_t group);
int64_t zeroRowBytes(QuantFormat format, int64_t k, int32_t group);

// Why (format, k, group) is not a valid layout (a short requirement naming the limit, e.g. "k
// must be a multiple of the group (128)"), or nullptr when it is.
const char* quantLayoutRejection(QuantFormat format, int64_t k, int32_t group);

// A quantized W [n, k] in memory (host or backend), as LinearParams::quantized passes it.
struct QuantizedWeightView {
  QuantFormat format = QuantFormat::kInt4;
  const void* data = nullptr;    // [n, dataRowBytes]
  const void* scales = nullptr;  // [n, scaleRowBytes], or null where the format has none
  const void* zeros = nullptr;   // [n, zeroRowBytes], or null where the format has none
  int32_t group = 0;             // see the formats above
};

}  // namespace es
