#pragma once
// The `quantization_config` object of a Hugging Face config.json: which quantized checkpoint
// format a model folder holds. model/quantized_checkpoint.h reads the tensors it implies.
//
// Accepted (anything else is a FormatError naming config.json, the field, the value and what is
// supported; fields not listed are ignored):
//   AWQ    quant_method "awq": bits 4, group_size 32 | 64 | 128, zero_point true, version "gemm"
//          (AutoAWQ's GEMM packing; backend "autoawq" when given), modules_to_not_convert.
//          Absent fields take transformers' AwqConfig defaults (4, 128, true, "gemm").
//   GPTQ   quant_method "gptq": bits 4, group_size 32 | 64 | 128, desc_act false, sym true or
//          false, checkpoint_format (or GPTQModel's `format`) "gptq": the v1 zero points that
//          AutoGPTQ and transformers write (stored z - 1). "gptq_v2" and desc_act true (act-order
//          g_idx) are rejected. Absent desc_act / sym / checkpoint_format take the defaults
//          (false, true, "gptq"); bits and group_size are required.
//   FP8    quant_method "fp8" as Qwen3's FP8 checkpoints ship it: fmt "e4m3", activation_scheme
//          "dynamic", weight_block_size [128, 128] (required: per-tensor FP8 is not supported),
//          modules_to_not_convert.
//   compressed-tensors FP8 per channel: quant_method "compressed-tensors", format
//          "float-quantized" or "naive-quantized", quantization_status "compressed" (when given),
//          exactly one config group with targets ["Linear"] and weights {num_bits 8, type
//          "float", strategy "channel", symmetric true, not dynamic, no group_size /
//          block_structure / actorder}, input_activations absent / null or {num_bits 8, type
//          "float", dynamic true or false}, no output_activations, kv_cache_scheme,
//          transform_config or sparsity; `ignore` lists the modules kept dense. A static input
//          scale (input_activations.dynamic false) is read and checked, but the product stays
//          weight-only: activations are not quantized, so it is not applied.
// Input activations are never quantized here: every accepted format runs as weight-only.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace es::model {

enum class QuantMethod : uint8_t {
  kNone,        // no quantization_config: every weight is dense
  kAwq,         // AutoAWQ GEMM: .qweight / .qzeros / .scales
  kGptq,        // GPTQ v1 zero points, desc_act false: .qweight / .qzeros / .scales / .g_idx
  kFp8Block,    // FP8 E4M3 weight, .weight_scale_inv per [blockN, blockK] block
  kFp8Channel,  // compressed-tensors FP8 E4M3 weight, .weight_scale per output row
};

// "none", "awq", "gptq", "fp8_block", "fp8_channel".
std::string_view quantMethodName(QuantMethod method);

struct QuantizationConfig {
  std::string source;  // the config.json it came from, for messages
  QuantMethod method = QuantMethod::kNone;
  int32_t bits = 0;               // 4 (AWQ, GPTQ) or 8 (FP8); 0 for none
  int32_t group = 0;              // k per scale: group_size (AWQ, GPTQ), blockK (FP8 block), 0 (per
                                  // channel: one scale for the whole row)
  bool zeroPoint = false;         // the checkpoint stores zero points (AWQ, GPTQ)
  bool symmetric = false;         // GPTQ sym; FP8 formats are symmetric
  int32_t blockN = 0;             // FP8 block: rows (output features) per scale block
  int32_t blockK = 0;             // FP8 block: columns (input features) per scale block
  bool staticInputScale = false;  // compressed-tensors: each linear carries .input_scale
  // Modules kept dense (AWQ / GPTQ / FP8 modules_to_not_convert, compressed-tensors ignore), as
  // written. Plain names ("lm_head", "model.layers.0.mlp.down_proj") are matched exactly;
  // compressed-tensors "re:" patterns are kept but not evaluated: whether a linear is quantized
  // is decided by the tensors the checkpoint holds for it (quantized_checkpoint.h).
  std::vector<std::string> notConverted;

  bool quantized() const { return method != QuantMethod::kNone; }
  // Whether `module` (a dense weight name without ".weight") is listed by name in notConverted.
  bool isNotConverted(std::string_view module) const;
};

// The quantization of a parsed config.json root object `config`; method kNone when it has no
// `quantization_config` (or it is null). `where` names the file in errors. Throws FormatError.
QuantizationConfig parseQuantizationConfig(const nlohmann::json& config, std::string_view where);

// Reads `path`/config.json (or `path` when it is a file) and parses its quantization_config.
QuantizationConfig loadQuantizationConfig(const std::filesystem::path& path);

}  // namespace es::model
