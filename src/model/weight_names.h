#pragma once
// The tensor set a config implies, with Hugging Face names and shapes ([out, in] for Linear), and
// the load-time check of a WeightStore against it.
//
// Target (Qwen3 / Llama / Qwen2):
//   model.embed_tokens.weight [V, H]; model.norm.weight [H]; lm_head.weight [V, H] unless tied;
//   model.layers.{i}.input_layernorm.weight / post_attention_layernorm.weight [H]
//   model.layers.{i}.self_attn.q_proj.weight [Hq*D, H], k_proj / v_proj [Hkv*D, H],
//     o_proj [H, Hq*D]; q/k/v .bias when qkv_bias (Qwen2), o_proj.bias when o_bias
//   model.layers.{i}.self_attn.q_norm.weight / k_norm.weight [D] (Qwen3)
//   model.layers.{i}.mlp.gate_proj / up_proj [I, H], down_proj [H, I] (+ .bias when mlp_bias)
// DFlash draft: no "model." prefix, no embedding, no lm_head; fc.weight [H, taps*H],
//   hidden_norm.weight [H], norm.weight [H], layers.{i}.* as Qwen3 above, optional
//   mask_embedding [H].
//
// A quantized folder (model/quantization_config.h) holds its quantized linears as other tensors
// (model/quantized_checkpoint.h: AWQ .qweight / .qzeros / .scales, FP8 .weight + scale, ...):
// checkWeights checks those through the reader's shapes and dtypes instead of `.weight`; the
// embeddings, norms, biases and the linears kept dense are checked as in a dense folder.
//
// Extra tensors are an error: a weight the runtime does not know usually means the checkpoint
// computes something this runtime would silently skip. Two kinds are tolerated (logged and
// reported): `*.rotary_emb.inv_freq` buffers that old checkpoints saved (recomputed from the
// config) and `lm_head.weight` when the embeddings are tied (transformers ignores it too).
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/quantization_config.h"
#include "model/weight_store.h"

namespace es::model {

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool required = true;
};

// In a deterministic order: globals first, then layer by layer.
std::vector<ExpectedTensor> expectedTensors(const ModelConfig& config);

// "model.layers.{i}." for a target, "layers.{i}." for the DFlash draft.
std::string layerPrefix(const ModelConfig& config, int64_t layer);

// Number of tapped target layers feeding the draft's fc (its input is taps * hidden).
int64_t draftTapCount(const ModelConfig& config);

struct WeightCheckReport {
  std::vector<std::string> ignored;  // tolerated extra tensors (see above)
  bool has_mask_embedding = false;   // DFlash draft ships its own mask embedding
};

// Verifies that `store` holds exactly the tensors of `config` (up to the tolerated extras), with
// the expected shapes and a supported dtype (bf16, f16, f32); under `quant` each quantized linear
// holds the tensors its format needs (quantizedLinearProblems) instead. Throws one FormatError
// listing every missing, misshapen, unsupported and unexpected tensor (the first few of each, by
// name). Reads no tensor data: the values are checked when a reader reads them.
WeightCheckReport checkWeights(const WeightStore& store, const ModelConfig& config,
                               const QuantizationConfig& quant = QuantizationConfig{});

// "[a, b, c]": how weight errors print a shape (checkWeights, the GGUF loader).
std::string shapeText(const std::vector<int64_t>& shape);

}  // namespace es::model
