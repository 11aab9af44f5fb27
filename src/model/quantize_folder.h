#pragma once
// `edgespec quantize`: a Hugging Face model folder (bf16 / f16 / f32 safetensors) -> a quantized
// folder that transformers-style readers load:
//   --to int4   AutoAWQ GEMM layout: per linear .qweight [K, N/8] i32, .qzeros [K/G, N/8] i32,
//               .scales [K/G, N] f16 (model/quantize.h packAwqGemm); config.json gains
//               quantization_config {"quant_method": "awq", "bits": 4, "group_size": G,
//               "zero_point": true, "version": "gemm", "modules_to_not_convert": null}.
//   --to fp8    Qwen3-FP8 layout: per linear .weight [N, K] F8_E4M3 and .weight_scale_inv
//               [ceil(N/128), ceil(K/128)] f32; quantization_config {"quant_method": "fp8",
//               "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}.
// Quantized: every decoder layer's q/k/v/o and gate/up/down projection weights (their biases, the
// embeddings, norms, lm_head and a draft's fc stay as stored). The other top-level files of the
// folder (tokenizer*, generation_config.json, chat templates, ...) are copied; weight files are
// not. The weights go to model.safetensors, or to model-0000i-of-0000n.safetensors shards plus
// model.safetensors.index.json when they exceed the shard size.
//
// Everything is validated before the first byte is written: the input's config and tensors
// (loadModelConfig, WeightStore::openFolder, checkWeights), that it is not quantized already, and
// every quantized linear's shape against the format. One linear is held in f32 at a time; copied
// tensors stream through in bounded pieces. A failed run removes the files it wrote.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/progress.h"
#include "model/model_config.h"
#include "model/quantize.h"

namespace es::model {

enum class QuantizeTo : uint8_t { kInt4, kFp8 };

inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;  // transformers' "5GB"

struct QuantizeOptions {
  QuantizeTo to = QuantizeTo::kInt4;
  int32_t group = kDefaultInt4Group;               // int4: 32, 64 or 128
  bool force = false;                              // write into an OUT that is not empty
  uint64_t maxShardBytes = kDefaultMaxShardBytes;  // a shard's tensor data, at most (>= 1)
  ProgressCallback progress;                       // per tensor; may be empty
};

struct QuantizeReport {
  ModelConfig config;
  size_t tensorsIn = 0;    // tensors read
  size_t tensorsOut = 0;   // tensors written
  size_t quantized = 0;    // linears quantized
  uint64_t bytesIn = 0;    // tensor data read
  uint64_t bytesOut = 0;   // tensor data written
  size_t shards = 0;       // safetensors files written
  size_t copiedFiles = 0;  // other files copied
};

// The names (".weight" included) of the linears quantize replaces, layer by layer.
std::vector<std::string> quantizedLinearNames(const ModelConfig& config);

// Quantizes the model folder `in` into `out` (created if absent). InvalidArgument for a bad
// argument or path (a GGUF file, `out` not empty without force, `out` the same as `in`), a
// tensor the format cannot hold; FormatError for a malformed or already quantized input.
QuantizeReport quantizeFolder(const std::filesystem::path& in, const std::filesystem::path& out,
                              const QuantizeOptions& options);

}  // namespace es::model
