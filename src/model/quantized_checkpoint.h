#pragma once
// The quantized linears of a Hugging Face folder with a quantization_config
// (model/quantization_config.h), read and repacked into the backend layouts of
// common/quant_format.h.
//
// A linear is named by its dense weight, "model.layers.0.self_attn.q_proj.weight" (n = out
// features, k = in features); its module is that name without ".weight". The checkpoint holds
// it as these tensors instead (G = group_size; all little-endian):
//   AWQ (GEMM)  .qweight [k, n / 8] i32    8 columns of a row of W^T per word, nibble p (bits
//                                          4p..4p+3) holding column 8j + kAwqOrder[p]
//               .qzeros  [k / G, n / 8] i32 the zero points, packed like qweight
//               .scales  [k / G, n] f16     w = (q - z) * s
//   GPTQ        .qweight [k / 8, n] i32    nibble p of word [r, c] holds W[c][8r + p]
//               .qzeros  [k / G, n / 8] i32 nibble p of word [g, j] holds z - 1 of column 8j + p
//                                          ("v1" zero points: the zero is the nibble + 1)
//               .scales  [k / G, n] f16     w = (q - z) * s
//               .g_idx   [k] i32            optional; when present, g_idx[k] must be k / G
//   FP8 block   .weight  [n, k] f8_e4m3
//               .weight_scale_inv [ceil(n / 128), ceil(k / 128)] f32 or bf16: w = fp8(q) * s
//                                          for the [128, 128] block holding (n, k)
//   FP8 channel .weight  [n, k] f8_e4m3
//   (compressed .weight_scale [n, 1] f32, bf16 or f16: w = fp8(q) * s[n]
//    -tensors)  .input_scale [1] (or a scalar) f32, bf16 or f16, only with a static input
//                                          scheme: checked (finite, > 0) but not applied
// They become kInt4 (AWQ, GPTQ: nibbles transposed to [n, k], GPTQ zeros + 1, scales [n, k / G])
// or kFp8E4M3 (group 128 with each block's scale repeated on its rows, or group k).
//
// Whether a linear is quantized is decided by the tensors the checkpoint holds for it: a module
// listed by name in the config's modules kept dense is dense; otherwise AWQ / GPTQ linears are
// those with any of .qweight / .qzeros / .scales, FP8 linears those whose .weight is f8_e4m3 or
// that have the scale tensor. Everything else is read as a dense weight.
//
// Errors are FormatErrors naming the file and the tensor with the expected and the found shape or
// dtype, or the element and its value (a non-finite or negative scale, a GPTQ zero point of 16,
// a g_idx out of order, an FP8 NaN weight).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/quant_format.h"
#include "model/host_quantized_matrix.h"
#include "model/quantization_config.h"
#include "model/weight_store.h"

namespace es::model {

// AutoAWQ's GEMM packing: nibble p of a packed word holds column kAwqOrder[p] of its 8.
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// The backend format of linear `weightName` in `store`, or nullopt when it is dense (the config
// has no quantization, the module is kept dense, or its tensors are the dense .weight).
std::optional<QuantFormat> quantizedLinearFormat(const WeightStore& store,
                                                 const QuantizationConfig& config,
                                                 std::string_view weightName);

// The group of the backend layout a linear of k columns repacks into (common/quant_format.h):
// AWQ / GPTQ group_size, the FP8 block's k extent, or k for per-channel FP8.
int32_t quantizedLinearGroup(const QuantizationConfig& config, int64_t k);

// [n, k] of quantized linear `weightName` as its checkpoint tensors hold it (AWQ: qweight rows
// and scales columns; GPTQ: 8 x qweight rows and its columns; FP8: the weight's shape); nullopt
// when it is dense or the tensor giving a dimension is missing or not a matrix (then
// quantizedLinearProblems names the problem).
std::optional<std::array<int64_t, 2>> quantizedLinearShape(const WeightStore& store,
                                                           const QuantizationConfig& config,
                                                           std::string_view weightName);

// The checkpoint tensors that hold quantized linear `weightName` (those the format needs, plus
// the optional ones the store has: GPTQ's .g_idx). Empty when it is dense.
std::vector<std::string> quantizedLinearTensorNames(const WeightStore& store,
                                                    const QuantizationConfig& config,
                                                    std::string_view weightName);

// Every shape / dtype / presence problem of quantized linear `weightName` of W [n, k], one line
// each ("<file>: tensor '<name>': shape [..], expected [..] (...)"); empty when it is readable.
// Reads no tensor data. checkWeights and readQuantizedLinear both use it.
std::vector<std::string> quantizedLinearProblems(const WeightStore& store,
                                                 const QuantizationConfig& config,
                                                 std::string_view weightName, int64_t n, int64_t k);

// Linear `weightName` of W [n, k] in its backend layout. InvalidArgument when it is not
// quantized (quantizedLinearFormat is nullopt) or n / k are not positive; FormatError for any
// problem of quantizedLinearProblems or of the values (see above). Reads with
// WeightStore::readBytes in bounded chunks: peak host memory is the result plus its source
// scales / zeros and about 1 MiB.
HostQuantizedMatrix readQuantizedLinear(const WeightStore& store, const QuantizationConfig& config,
                                        std::string_view weightName, int64_t n, int64_t k);

}  // namespace es::model
