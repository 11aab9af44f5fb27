#include "model/quantized_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/dtype.h"
#include "common/dtype_convert.h"
#include "common/errors.h"
#include "model/weight_names.h"

namespace es::model {
namespace {

// Packed tensors are read in pieces of about this many bytes, so a linear costs its result plus
// one piece, never a second full copy.
constexpr uint64_t kChunkBytes = 1u << 20;

constexpr std::string_view kWeightSuffix = ".weight";

// "model.layers.0.mlp.up_proj" for "model.layers.0.mlp.up_proj.weight"; nullopt for a name that
// is not a weight.
std::optional<std::string> moduleOf(std::string_view weightName) {
  if (weightName.size() <= kWeightSuffix.size() ||
      weightName.substr(weightName.size() - kWeightSuffix.size()) != kWeightSuffix) {
    return std::nullopt;
  }
  return std::string(weightName.substr(0, weightName.size() - kWeightSuffix.size()));
}

// One checkpoint tensor of a quantized linear: its name after the module, and its shape / dtypes.
struct Part {
  std::string suffix;          // ".qweight"
  std::vector<int64_t> shape;  // expected shape
  std::vector<DType> dtypes;   // accepted dtypes
  std::string layout;          // "AWQ qweight [k, n / 8] i32", for messages
  bool optional = false;       // GPTQ's g_idx
  bool scalarAllowed = false;  // compressed-tensors input_scale: [1] or []
};

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string dtypeList(const std::vector<DType>& dtypes) {
  std::string out;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i) out += i + 1 == dtypes.size() ? " or " : ", ";
    out += dtype_name(dtypes[i]);
  }
  return out;
}

std::string methodTitle(QuantMethod method) {
  switch (method) {
    case QuantMethod::kAwq:
      return "AWQ";
    case QuantMethod::kGptq:
      return "GPTQ";
    case QuantMethod::kFp8Block:
      return "FP8 block";
    case QuantMethod::kFp8Channel:
      return "FP8 per-channel";
    case QuantMethod::kNone:
      break;
  }
  return "dense";
}

// The tensors of a quantized linear W [n, k] under `config`.
std::vector<Part> partsOf(const QuantizationConfig& config, int64_t n, int64_t k) {
  const int64_t g = config.group;
  switch (config.method) {
    case QuantMethod::kAwq:
      return {{".qweight", {k, n / 8}, {DType::kI32}, "AWQ qweight [k, n / 8] i32"},
              {".qzeros", {k / g, n / 8}, {DType::kI32}, "AWQ qzeros [k / group, n / 8] i32"},
              {".scales", {k / g, n}, {DType::kF16}, "AWQ scales [k / group, n] f16"}};
    case QuantMethod::kGptq:
      return {{".qweight", {k / 8, n}, {DType::kI32}, "GPTQ qweight [k / 8, n] i32"},
              {".qzeros", {k / g, n / 8}, {DType::kI32}, "GPTQ qzeros [k / group, n / 8] i32"},
              {".scales", {k / g, n}, {DType::kF16}, "GPTQ scales [k / group, n] f16"},
              {".g_idx", {k}, {DType::kI32}, "GPTQ g_idx [k] i32", /*optional=*/true}};
    case QuantMethod::kFp8Block:
      return {{".weight", {n, k}, {DType::kF8E4M3}, "FP8 weight [n, k] f8_e4m3"},
              {".weight_scale_inv",
               {ceilDiv(n, config.blockN), ceilDiv(k, config.blockK)},
               {DType::kF32, DType::kBF16},
               "FP8 weight_scale_inv [ceil(n / 128), ceil(k / 128)] f32 or bf16"}};
    case QuantMethod::kFp8Channel: {
      std::vector<Part> parts = {{".weight", {n, k}, {DType::kF8E4M3}, "FP8 weight [n, k] f8_e4m3"},
                                 {".weight_scale",
                                  {n, 1},
                                  {DType::kF32, DType::kBF16, DType::kF16},
                                  "FP8 weight_scale [n, 1] f32, bf16 or f16"}};
      if (config.staticInputScale) {
        parts.push_back({".input_scale",
                         {1},
                         {DType::kF32, DType::kBF16, DType::kF16},
                         "static input_scale [1] f32, bf16 or f16",
                         /*optional=*/false,
                         /*scalarAllowed=*/true});
      }
      return parts;
    }
    case QuantMethod::kNone:
      break;
  }
  return {};
}

// Why W [n, k] cannot be held under `config` at all, or empty.
std::string layoutProblem(const QuantizationConfig& config, int64_t n, int64_t k) {
  std::ostringstream os;
  if (n <= 0 || k <= 0) {
    os << "n = " << n << " and k = " << k << " must be positive";
  } else if ((config.method == QuantMethod::kAwq || config.method == QuantMethod::kGptq) &&
             n % 8 != 0) {
    os << "n = " << n << " must be a multiple of 8 (qzeros packs 8 output features per i32)";
  } else if ((config.method == QuantMethod::kAwq || config.method == QuantMethod::kGptq) &&
             k % config.group != 0) {
    os << "k = " << k << " must be a multiple of group_size " << config.group;
  }
  return os.str();
}

// A matrix of this layout with no arrays yet.
HostQuantizedMatrix shell(QuantFormat format, int32_t group, int64_t n, int64_t k) {
  HostQuantizedMatrix m;
  m.format = format;
  m.group = group;
  m.n = n;
  m.k = k;
  return m;
}

std::string tensorFile(const WeightStore& store, std::string_view tensor) {
  return store.fileOf(tensor).path().string();
}

std::vector<uint8_t> readWhole(const WeightStore& store, const std::string& name) {
  const TensorInfo& info = store.info(name);
  std::vector<uint8_t> bytes(info.byteSize());
  store.readBytes(name, 0, bytes.data(), bytes.size());
  return bytes;
}

uint32_t u32At(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Scale element [row, col] of `name` must be finite and >= 0 (every format's scales are a
// magnitude divided by the largest code).
void checkScale(float value, const WeightStore& store, const std::string& name, int64_t row,
                int64_t col) {
  if (!(std::isfinite(value) && value >= 0.0f)) {
    ES_THROW(FormatError, tensorFile(store, name), ": tensor ", quoteShort(name), " element [", row,
             ", ", col, "] = ", value, " must be finite and >= 0 (a quantization scale)");
  }
}

// f16 scales [k / G, n] transposed into the backend's [n, k / G] f16, checked.
void repackInt4Scales(const WeightStore& store, const std::string& name, int64_t n, int64_t groups,
                      std::vector<uint8_t>& out) {
  const std::vector<uint8_t> src = readWhole(store, name);
  out.resize(static_cast<size_t>(n * groups * 2));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n; ++c) {
      const uint8_t* from = src.data() + 2 * (g * n + c);
      fp16 s;
      std::memcpy(&s, from, 2);
      checkScale(to_float(s), store, name, g, c);
      std::memcpy(out.data() + 2 * (c * groups + g), from, 2);
    }
  }
}

// Reads rows [0, rows) of packed tensor `name` (rowBytes each) in chunks of about kChunkBytes,
// each a multiple of `rowMultiple` rows (rows must be one too); visit(firstRow, count, bytes).
template <typename Visit>
void forEachChunk(const WeightStore& store, const std::string& name, int64_t rows, int64_t rowBytes,
                  int64_t rowMultiple, Visit&& visit) {
  const int64_t fit = static_cast<int64_t>(kChunkBytes) / rowBytes / rowMultiple * rowMultiple;
  const int64_t perChunk = std::min(rows, std::max(rowMultiple, fit));
  std::vector<uint8_t> chunk(static_cast<size_t>(perChunk * rowBytes));
  for (int64_t r0 = 0; r0 < rows; r0 += perChunk) {
    const int64_t count = std::min(perChunk, rows - r0);
    store.readBytes(name, static_cast<uint64_t>(r0 * rowBytes), chunk.data(),
                    static_cast<uint64_t>(count * rowBytes));
    visit(r0, count, chunk.data());
  }
}

HostQuantizedMatrix readAwq(const WeightStore& store, const QuantizationConfig& config,
                            const std::string& module, int64_t n, int64_t k) {
  const int64_t groups = k / config.group;
  const int64_t words = n / 8;
  HostQuantizedMatrix m = shell(QuantFormat::kInt4, quantizedLinearGroup(config, k), n, k);

  // qzeros [k / G, n / 8]: nibble p of word [g, j] is the zero of column 8j + kAwqOrder[p].
  const std::vector<uint8_t> qzeros = readWhole(store, module + ".qzeros");
  m.zeros.resize(static_cast<size_t>(n * groups));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t word = u32At(qzeros.data() + 4 * (g * words + j));
      for (int p = 0; p < 8; ++p) {
        const int64_t col = 8 * j + kAwqOrder[p];
        m.zeros[static_cast<size_t>(col * groups + g)] = static_cast<uint8_t>((word >> 4 * p) & 15);
      }
    }
  }
  repackInt4Scales(store, module + ".scales", n, groups, m.scales);

  // qweight [k, n / 8]: row kk of W^T, word j, nibble p -> W[8j + kAwqOrder[p]][kk]. Eight
  // consecutive rows kk = 8b .. 8b + 7 give one column's bytes 4b .. 4b + 3 in the backend
  // layout (low nibble = even kk); chunks of whole 8-row blocks are transposed column by column,
  // so each column's bytes are written contiguously.
  const int64_t rowBytes = k / 2;
  const int64_t srcRowBytes = words * 4;
  m.data.resize(static_cast<size_t>(n * rowBytes));
  forEachChunk(store, module + ".qweight", k, srcRowBytes, 8,
               [&](int64_t first, int64_t count, const uint8_t* bytes) {
                 for (int64_t j = 0; j < words; ++j) {
                   for (int64_t b = 0; b < count / 8; ++b) {
                     uint32_t word[8];
                     for (int i = 0; i < 8; ++i) {
                       word[i] = u32At(bytes + (8 * b + i) * srcRowBytes + 4 * j);
                     }
                     for (int p = 0; p < 8; ++p) {
                       uint32_t packed = 0;
                       for (int i = 0; i < 8; ++i) packed |= ((word[i] >> 4 * p) & 15) << 4 * i;
                       uint8_t* out =
                           m.data.data() + (8 * j + kAwqOrder[p]) * rowBytes + first / 2 + 4 * b;
                       for (int byte = 0; byte < 4; ++byte) {
                         out[byte] = static_cast<uint8_t>(packed >> 8 * byte);
                       }
                     }
                   }
                 }
               });
  return m;
}

HostQuantizedMatrix readGptq(const WeightStore& store, const QuantizationConfig& config,
                             const std::string& module, int64_t n, int64_t k) {
  const int64_t group = config.group;
  const int64_t groups = k / group;
  const int64_t words = n / 8;
  HostQuantizedMatrix m = shell(QuantFormat::kInt4, quantizedLinearGroup(config, k), n, k);

  // g_idx maps each k to its group; without act-order it is k / G (anything else would need the
  // k permutation this layout does not have).
  const std::string gIdxName = module + ".g_idx";
  if (store.contains(gIdxName)) {
    const std::vector<uint8_t> gIdx = readWhole(store, gIdxName);
    for (int64_t kk = 0; kk < k; ++kk) {
      const auto value = static_cast<int32_t>(u32At(gIdx.data() + 4 * kk));
      if (value != kk / group) {
        ES_THROW(FormatError, tensorFile(store, gIdxName), ": tensor ", quoteShort(gIdxName),
                 " element [", kk, "] = ", value, ", expected k / group_size = ", kk / group,
                 " (desc_act false: act-order g_idx is not supported)");
      }
    }
  }

  // qzeros [k / G, n / 8]: nibble p of word [g, j] is z - 1 of column 8j + p ("v1").
  const std::string qzerosName = module + ".qzeros";
  const std::vector<uint8_t> qzeros = readWhole(store, qzerosName);
  m.zeros.resize(static_cast<size_t>(n * groups));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t word = u32At(qzeros.data() + 4 * (g * words + j));
      for (int p = 0; p < 8; ++p) {
        const uint32_t zero = ((word >> 4 * p) & 15) + 1;
        if (zero > 15) {
          ES_THROW(FormatError, tensorFile(store, qzerosName), ": tensor ", quoteShort(qzerosName),
                   " element [", g, ", ", j, "] nibble ", p,
                   " = 15: zero point 16 of output feature ", 8 * j + p, ", group ", g,
                   " (checkpoint_format gptq stores z - 1) is outside the 4-bit range [0, 15]");
        }
        m.zeros[static_cast<size_t>((8 * j + p) * groups + g)] = static_cast<uint8_t>(zero);
      }
    }
  }
  repackInt4Scales(store, module + ".scales", n, groups, m.scales);

  // qweight [k / 8, n]: word [r, c] nibble p is W[c][8r + p], so its 4 little-endian bytes are
  // bytes 4r .. 4r + 3 of row c in the backend layout (low nibble = even k). Chunks are
  // transposed column by column, so each column's bytes are written contiguously.
  const int64_t rowBytes = k / 2;
  m.data.resize(static_cast<size_t>(n * rowBytes));
  forEachChunk(store, module + ".qweight", k / 8, n * 4, 1,
               [&](int64_t first, int64_t count, const uint8_t* bytes) {
                 for (int64_t c = 0; c < n; ++c) {
                   uint8_t* out = m.data.data() + c * rowBytes + 4 * first;
                   for (int64_t r = 0; r < count; ++r) {
                     std::memcpy(out + 4 * r, bytes + r * n * 4 + 4 * c, 4);
                   }
                 }
               });
  return m;
}

// FP8 .weight [n, k] read straight into the backend data [n, k]; no byte may be NaN.
void readFp8Weight(const WeightStore& store, const std::string& name, int64_t n, int64_t k,
                   std::vector<uint8_t>& data) {
  data.resize(static_cast<size_t>(n * k));
  store.readBytes(name, 0, data.data(), data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    if ((data[i] & 0x7f) == 0x7f) {
      ES_THROW(FormatError, tensorFile(store, name), ": tensor ", quoteShort(name), " element [",
               static_cast<int64_t>(i) / k, ", ", static_cast<int64_t>(i) % k, "] is NaN (byte 0x",
               std::hex, static_cast<int>(data[i]), ")");
    }
  }
}

HostQuantizedMatrix readFp8Block(const WeightStore& store, const QuantizationConfig& config,
                                 const std::string& module, int64_t n, int64_t k) {
  HostQuantizedMatrix m = shell(QuantFormat::kFp8E4M3, quantizedLinearGroup(config, k), n, k);
  readFp8Weight(store, module + ".weight", n, k, m.data);

  // weight_scale_inv [ceil(n / bn), ceil(k / bk)]: block (i, j)'s scale is repeated on each of
  // its rows (the last block of each dimension may be short).
  const std::string scaleName = module + ".weight_scale_inv";
  const TensorInfo& info = store.info(scaleName);
  const std::vector<uint8_t> src = readWhole(store, scaleName);
  const int64_t blockRows = info.shape[0];
  const int64_t blockCols = info.shape[1];
  std::vector<float> blockScales(static_cast<size_t>(blockRows * blockCols));
  for (int64_t i = 0; i < blockRows; ++i) {
    for (int64_t j = 0; j < blockCols; ++j) {
      const float s = loadAsFloat(src.data(), info.dtype, i * blockCols + j);
      checkScale(s, store, scaleName, i, j);
      blockScales[static_cast<size_t>(i * blockCols + j)] = s;
    }
  }
  m.scales.resize(static_cast<size_t>(n * blockCols * 4));
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(m.scales.data() + r * blockCols * 4,
                blockScales.data() + (r / config.blockN) * blockCols,
                static_cast<size_t>(blockCols * 4));
  }
  return m;
}

HostQuantizedMatrix readFp8Channel(const WeightStore& store, const QuantizationConfig& config,
                                   const std::string& module, int64_t n, int64_t k) {
  HostQuantizedMatrix m = shell(QuantFormat::kFp8E4M3, quantizedLinearGroup(config, k), n, k);
  readFp8Weight(store, module + ".weight", n, k, m.data);

  const std::string scaleName = module + ".weight_scale";
  const DType scaleType = store.info(scaleName).dtype;
  const std::vector<uint8_t> src = readWhole(store, scaleName);
  m.scales.resize(static_cast<size_t>(n * 4));
  for (int64_t r = 0; r < n; ++r) {
    const float s = loadAsFloat(src.data(), scaleType, r);
    checkScale(s, store, scaleName, r, 0);
    std::memcpy(m.scales.data() + 4 * r, &s, 4);
  }

  // A static input scale is checked, not applied: activations stay unquantized (weight-only).
  if (config.staticInputScale) {
    const std::string inputName = module + ".input_scale";
    const DType inputType = store.info(inputName).dtype;
    const std::vector<uint8_t> input = readWhole(store, inputName);
    const float s = loadAsFloat(input.data(), inputType, 0);
    if (!(std::isfinite(s) && s > 0.0f)) {
      ES_THROW(FormatError, tensorFile(store, inputName), ": tensor ", quoteShort(inputName), " = ",
               s, " must be finite and > 0");
    }
  }
  return m;
}

}  // namespace

std::optional<QuantFormat> quantizedLinearFormat(const WeightStore& store,
                                                 const QuantizationConfig& config,
                                                 std::string_view weightName) {
  if (!config.quantized() || store.isGguf()) return std::nullopt;
  const std::optional<std::string> module = moduleOf(weightName);
  if (!module || config.isNotConverted(*module)) return std::nullopt;
  switch (config.method) {
    case QuantMethod::kAwq:
    case QuantMethod::kGptq:
      for (const char* suffix : {".qweight", ".qzeros", ".scales"}) {
        if (store.contains(*module + suffix)) return QuantFormat::kInt4;
      }
      return std::nullopt;
    case QuantMethod::kFp8Block:
    case QuantMethod::kFp8Channel: {
      const char* scale =
          config.method == QuantMethod::kFp8Block ? ".weight_scale_inv" : ".weight_scale";
      const bool fp8Weight =
          store.contains(weightName) && store.info(weightName).dtype == DType::kF8E4M3;
      if (fp8Weight || store.contains(*module + scale)) return QuantFormat::kFp8E4M3;
      return std::nullopt;
    }
    case QuantMethod::kNone:
      break;
  }
  return std::nullopt;
}

int32_t quantizedLinearGroup(const QuantizationConfig& config, int64_t k) {
  switch (config.method) {
    case QuantMethod::kAwq:
    case QuantMethod::kGptq:
      return config.group;
    case QuantMethod::kFp8Block:
      return config.blockK;
    case QuantMethod::kFp8Channel:
      return static_cast<int32_t>(k);
    case QuantMethod::kNone:
      break;
  }
  return 0;
}

std::optional<std::array<int64_t, 2>> quantizedLinearShape(const WeightStore& store,
                                                           const QuantizationConfig& config,
                                                           std::string_view weightName) {
  if (!quantizedLinearFormat(store, config, weightName)) return std::nullopt;
  const std::string module = *moduleOf(weightName);
  auto matrix = [&](const std::string& name) -> const std::vector<int64_t>* {
    if (!store.contains(name)) return nullptr;
    const std::vector<int64_t>& shape = store.info(name).shape;
    return shape.size() == 2 ? &shape : nullptr;
  };
  switch (config.method) {
    case QuantMethod::kAwq: {  // qweight [k, n / 8], scales [k / G, n]
      const std::vector<int64_t>* qweight = matrix(module + ".qweight");
      const std::vector<int64_t>* scales = matrix(module + ".scales");
      if (!qweight || !scales) return std::nullopt;
      return std::array<int64_t, 2>{(*scales)[1], (*qweight)[0]};
    }
    case QuantMethod::kGptq: {  // qweight [k / 8, n]
      const std::vector<int64_t>* qweight = matrix(module + ".qweight");
      if (!qweight) return std::nullopt;
      return std::array<int64_t, 2>{(*qweight)[1], 8 * (*qweight)[0]};
    }
    case QuantMethod::kFp8Block:
    case QuantMethod::kFp8Channel: {  // weight [n, k]
      const std::vector<int64_t>* weight = matrix(std::string(weightName));
      if (!weight) return std::nullopt;
      return std::array<int64_t, 2>{(*weight)[0], (*weight)[1]};
    }
    case QuantMethod::kNone:
      break;
  }
  return std::nullopt;
}

std::vector<std::string> quantizedLinearTensorNames(const WeightStore& store,
                                                    const QuantizationConfig& config,
                                                    std::string_view weightName) {
  std::vector<std::string> names;
  if (!quantizedLinearFormat(store, config, weightName)) return names;
  const std::string module = *moduleOf(weightName);
  // n and k do not change which tensors there are; 8 x group keeps every shape well defined.
  for (const Part& part : partsOf(config, 8, std::max(config.group, 8))) {
    const std::string name = module + part.suffix;
    if (!part.optional || store.contains(name)) names.push_back(name);
  }
  return names;
}

std::vector<std::string> quantizedLinearProblems(const WeightStore& store,
                                                 const QuantizationConfig& config,
                                                 std::string_view weightName, int64_t n,
                                                 int64_t k) {
  std::vector<std::string> problems;
  if (!quantizedLinearFormat(store, config, weightName)) return problems;
  const std::string module = *moduleOf(weightName);
  const std::string title = methodTitle(config.method);
  if (const std::string why = layoutProblem(config, n, k); !why.empty()) {
    problems.push_back(store.source() + ": " + title + " linear " + quoteShort(module) + " " +
                       shapeText({n, k}) + ": " + why);
    return problems;
  }
  const std::vector<Part> parts = partsOf(config, n, k);
  for (const Part& part : parts) {
    const std::string name = module + part.suffix;
    if (!store.contains(name)) {
      if (part.optional) continue;
      std::string needs;
      for (const Part& p : parts) {
        if (!p.optional) needs += (needs.empty() ? "" : ", ") + p.suffix;
      }
      problems.push_back(store.source() + ": tensor " + quoteShort(name) + " is missing (" + title +
                         " linear " + quoteShort(module) + " needs " + needs + ")");
      continue;
    }
    const TensorInfo& info = store.info(name);
    const std::string where = tensorFile(store, name) + ": tensor " + quoteShort(name) + ": ";
    if (std::find(part.dtypes.begin(), part.dtypes.end(), info.dtype) == part.dtypes.end()) {
      problems.push_back(where + "dtype " + std::string(dtype_name(info.dtype)) + ", expected " +
                         dtypeList(part.dtypes) + " (" + part.layout + ")");
    }
    const bool shapeOk = info.shape == part.shape || (part.scalarAllowed && info.shape.empty());
    if (!shapeOk) {
      problems.push_back(where + "shape " + shapeText(info.shape) + ", expected " +
                         shapeText(part.shape) + " (" + part.layout +
                         " for n = " + std::to_string(n) + ", k = " + std::to_string(k) + ")");
    }
  }
  return problems;
}

HostQuantizedMatrix readQuantizedLinear(const WeightStore& store, const QuantizationConfig& config,
                                        std::string_view weightName, int64_t n, int64_t k) {
  ES_CHECK_ARG(n > 0 && k > 0, "readQuantizedLinear", "n, k",
               std::to_string(n) + ", " + std::to_string(k), "must be positive");
  if (!quantizedLinearFormat(store, config, weightName)) {
    ES_THROW(InvalidArgument,
             "readQuantizedLinear: argument 'weightName' = ", quoteShort(weightName),
             " is not a quantized linear of ", store.source(),
             " (quantization: ", quantMethodName(config.method), ")");
  }
  const std::vector<std::string> problems =
      quantizedLinearProblems(store, config, weightName, n, k);
  if (!problems.empty()) {
    std::string message = problems.front();
    for (size_t i = 1; i < problems.size(); ++i) message += "; " + problems[i];
    throw FormatError(message);
  }
  const std::string module = *moduleOf(weightName);
  HostQuantizedMatrix m;
  switch (config.method) {
    case QuantMethod::kAwq:
      m = readAwq(store, config, module, n, k);
      break;
    case QuantMethod::kGptq:
      m = readGptq(store, config, module, n, k);
      break;
    case QuantMethod::kFp8Block:
      m = readFp8Block(store, config, module, n, k);
      break;
    case QuantMethod::kFp8Channel:
      m = readFp8Channel(store, config, module, n, k);
      break;
    case QuantMethod::kNone:
      break;
  }
  return m;
}

}  // namespace es::model
