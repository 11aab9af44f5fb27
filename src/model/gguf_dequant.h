#pragma once
// Dequantisation of GGUF tensor data to f32 (and from there to bf16/f16), for the ggml types
// the supported models ship: F32, F16, BF16, Q8_0, Q4_0, Q4_1 and the K-quants Q4_K, Q5_K, Q6_K.
// Block layouts (ggml's block_* structs; d, m, dmin are fp16):
//   Q8_0: 32 elements, 34 bytes: d, 32 x int8 q          -> x = d * q
//   Q4_0: 32 elements, 18 bytes: d, 16 bytes of nibbles   -> x = d * (nibble - 8)
//   Q4_1: 32 elements, 20 bytes: d, m, 16 bytes of nibbles -> x = d * nibble + m
//   Q4_K: 256 elements, 144 bytes: d, dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks of
//         32, 128 bytes of nibbles                          -> x = (d * sc) * q - (dmin * m)
//   Q5_K: 256 elements, 176 bytes: as Q4_K plus 32 bytes of fifth bits (before the nibbles)
//   Q6_K: 256 elements, 210 bytes: 128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8
//         scales (one per 16 elements), d                  -> x = (d * sc) * (q6 - 32)
// In Q4_0/Q4_1 byte j holds element j in its low nibble and element j + 16 in its high nibble;
// the K-quant bit orders are described at their decoders in common/quant_dequant.cpp, which
// this file calls. Products are computed in f32 in ggml's order (that file is built without
// fused multiply-adds), so results match llama.cpp's dequantize_row_* bit for bit.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "model/gguf.h"

namespace es::model {

// True for the types dequantizeToF32 accepts.
bool ggmlTypeDequantizable(uint32_t type);

// Dequantises `dst.size()` elements of ggml type `type` from `src`, which must hold exactly
// their bytes. `what` names the tensor in errors: FormatError for an unsupported type or a byte
// count that does not match, naming the tensor, the type and the sizes.
void dequantizeToF32(uint32_t type, std::span<const uint8_t> src, std::span<float> dst,
                     std::string_view what);

// A whole tensor of a mapped file, in f32 (row-major, as GgufTensorInfo::rowMajorShape).
std::vector<float> dequantizeTensor(const GgufFile& file, const GgufTensorInfo& tensor);

// Rounds to nearest even (NaN stays NaN).
void convertF32(std::span<const float> src, std::span<bf16> dst);
void convertF32(std::span<const float> src, std::span<fp16> dst);

}  // namespace es::model
