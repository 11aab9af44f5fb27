#pragma once
// Round-to-nearest quantizers of a dense W [n, k] (f32, row-major) into the backend layouts of
// common/quant_format.h, and the checkpoint layouts `edgespec quantize` writes them in
// (model/quantize_folder.h).
//
// int4 (group-wise, asymmetric): for each group of `group` consecutive k of a row, with lo / hi
// the group's minimum / maximum widened to include 0,
//   s = (hi - lo) / 15, rounded UP to f16 (stored f16; s >= (hi - lo) / 15 keeps [lo, hi] inside
//       the 16 levels, so no value is clamped by more than s / 2),
//   z = clamp(round(-lo / s), 0, 15),  q = clamp(round(w / s) + z, 0, 15)   (round: ties to even)
// computed with the stored f16 s, so w' = (q - z) * s is within s / 2 of w. Widening the range
// to 0 makes z land in [0, 15] (AutoAWQ's plain min / max clamps z, and then w, for a group of
// one sign). A constant group of value c is exact: c = 0 gives s = 1, z = q = 0; c != 0 whose |c|
// is an f16 value (every bf16 value in f16's range) gives s = |c| and q - z = +1 or -1.
//
// fp8 (E4M3, [128, 128] blocks as Qwen3's FP8 checkpoints): per block of 128 rows x 128 columns
// (the last ones short), s = amax(|w|) / 448 in f32 (a block that is all zero, or whose amax / 448
// underflows to 0, gets s = 1), q = e4m3(w / s) rounded to nearest even and saturated to +-448;
// w' = fp8(q) * s. The backend layout repeats each block's s on its 128 rows.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "model/host_quantized_matrix.h"

namespace es::model {

inline constexpr int32_t kDefaultInt4Group = 128;
inline constexpr int32_t kFp8BlockSize = 128;  // rows and columns of one fp8 scale block
inline constexpr float kFp8E4M3Max = 448.0f;   // largest finite E4M3 value
inline constexpr int32_t kAwqPackFactor = 8;   // 4-bit values in one int32 of AWQ's packing

// The E4M3 code (OCP: bias 7, no infinities, S.1111.111 is NaN) of x rounded to nearest even:
// |x| >= 448 and +-inf saturate to +-448 (0x7e / 0xfe), NaN gives 0x7f (0xff for a negative NaN),
// values below the smallest subnormal (2^-9) round to +-0 (ties to even).
uint8_t floatToFp8E4M3(float x);

// The smallest f16 >= x, for x >= 0 (+inf when x is above f16's largest value, 65504).
fp16 fp16RoundUp(float x);

// W [n, k] f32 -> kInt4 with `group` (32, 64 or 128). `name` names the tensor in errors.
// InvalidArgument: a layout quantLayoutRejection refuses (k not a multiple of the group), a
// non-finite value (named with its row and column), or a group whose scale exceeds f16's range.
HostQuantizedMatrix quantizeInt4(std::span<const float> w, int64_t n, int64_t k, int32_t group,
                                 std::string_view name);

// W [n, k] f32 -> kFp8E4M3 with group 128 ([128, 128] blocks). InvalidArgument for a non-finite
// value (named with its row and column) or inconsistent sizes.
HostQuantizedMatrix quantizeFp8Blocks(std::span<const float> w, int64_t n, int64_t k,
                                      std::string_view name);

// AutoAWQ's GEMM packing of a kInt4 matrix (HF names: .qweight, .qzeros, .scales), transposed to
// [in = k, out = n]: int32 j of row r of qweight holds the q of columns 8j .. 8j + 7 of row r of
// W^T, column 8j + kAwqOrder[i] in bits 4i .. 4i + 3; qzeros packs the zero points the same way.
inline constexpr int32_t kAwqOrder[kAwqPackFactor] = {0, 2, 4, 6, 1, 3, 5, 7};
struct AwqGemmTensors {
  std::vector<int32_t> qweight;  // [k, n / 8]
  std::vector<int32_t> qzeros;   // [k / group, n / 8]
  std::vector<fp16> scales;      // [k / group, n]
};
// InvalidArgument unless m is kInt4 with n a multiple of 8.
AwqGemmTensors packAwqGemm(const HostQuantizedMatrix& m);

// Qwen3-FP8's weight_scale_inv [ceil(n / 128), ceil(k / 128)] f32 of a kFp8E4M3 matrix of group
// 128 (each block's scale read from the block's first row). InvalidArgument otherwise.
std::vector<float> fp8BlockScaleInv(const HostQuantizedMatrix& m);

}  // namespace es::model
