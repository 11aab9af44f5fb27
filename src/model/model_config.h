#pragma once
// The model configuration from a Hugging Face `config.json`, in either dialect:
//   transformers 4.x: top-level `rope_theta`, `rope_scaling` ({"type"|"rope_type", ...}),
//                     `torch_dtype`;
//   transformers 5.x: `rope_parameters` ({"rope_theta", "rope_type", ...}) and `dtype`.
// Architectures: Qwen3ForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM, and the z-lab DFlash
// draft (DFlashDraftModel: Qwen3 layers plus `block_size` and `dflash_config`).
//
// Missing optional fields take transformers' defaults for the architecture; values outside the
// limits below are a FormatError naming the file, the field, the value and the limit.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"

namespace es::model {

enum class Architecture : uint8_t { kQwen3, kLlama, kQwen2, kDFlashDraft };
std::string_view architectureName(Architecture a);  // the HF class name

enum class RopeType : uint8_t { kDefault, kLinear, kLlama3, kYarn };
std::string_view ropeTypeName(RopeType t);  // "default", "linear", "llama3", "yarn"

enum class LayerType : uint8_t { kFullAttention, kSlidingAttention };

// Sanity limits: far above any released model, low enough that sizes multiply without overflow.
inline constexpr int64_t kMaxHiddenSize = 65536;
inline constexpr int64_t kMaxIntermediateSize = 1 << 20;
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr int64_t kMaxPositions = 1 << 24;
inline constexpr int64_t kMaxDraftBlockSize = 1024;

// RoPE frequencies and scaling. Fields not used by `type` keep transformers' defaults; how they
// combine (e.g. yarn's attention factor when absent) is the RoPE implementation's business.
struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                           // linear, llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3 (required), yarn (0 = absent)
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  std::optional<double> attention_factor;        // yarn
  std::optional<double> mscale;                  // yarn
  std::optional<double> mscale_all_dim;          // yarn
  bool truncate = true;                          // yarn
};

struct DFlashConfig {
  int64_t block_size = 0;
  int64_t mask_token_id = -1;
  // As written in dflash_config.target_layer_ids, or from the default formula when only
  // num_target_layers is known; empty when neither is given (resolve against the target with
  // resolvedTargetLayerIds).
  std::vector<int64_t> target_layer_ids;
  bool target_layer_ids_explicit = false;
  std::optional<int64_t> num_target_layers;
};

struct ModelConfig {
  std::string source;  // file the config came from, for messages
  Architecture architecture = Architecture::kQwen3;
  std::string model_type;

  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;

  // Biases: q/k/v (Qwen2 always; Llama/Qwen3 when attention_bias), o_proj (Llama/Qwen3 when
  // attention_bias), MLP (Llama when mlp_bias).
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // Qwen3 and the DFlash draft: per-head RMSNorm on q and k

  RopeConfig rope;
  std::optional<DType> dtype;  // torch_dtype / dtype

  std::vector<LayerType> layer_types;     // one per layer (all full when the config has none)
  std::optional<int64_t> sliding_window;  // set only when some layer slides

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // eos_token_id: an int or a list

  std::optional<DFlashConfig> dflash;  // set iff architecture == kDFlashDraft

  int64_t qDim() const { return num_attention_heads * head_dim; }
  int64_t kvDim() const { return num_key_value_heads * head_dim; }
  bool isDraft() const { return architecture == Architecture::kDFlashDraft; }
  // The draft's tapped target layers: the explicit list, or the default formula for a target
  // of `target_num_layers` layers. Throws InvalidArgument if a tap is outside [0, target layers)
  // or the config declares a different num_target_layers.
  std::vector<int64_t> resolvedTargetLayerIds(int64_t target_num_layers) const;
  std::string summary() const;  // one line for the startup log
};

// Parses config.json text; `source` names the file in errors. Throws FormatError.
ModelConfig parseModelConfig(std::string_view json_text, std::string_view source = "config.json");
// Reads `path`, or `path`/config.json when `path` is a directory; a GGUF file (gguf_weights.h
// isGgufPath) gives the config derived from its metadata (gguf_convert.h ggufModelConfig).
ModelConfig loadModelConfig(const std::filesystem::path& path);

// z-lab's build_target_layer_ids: n = 1 -> [L_t // 2]; otherwise round(1 + i (L_t - 4)/(n - 1))
// for i in [0, n) with round-half-to-even (Python's round). Computed in exact integer arithmetic,
// which equals Python's float result for every L_t, n in range. InvalidArgument if
// num_draft_layers < 1 or num_target_layers < 1.
std::vector<int64_t> defaultDFlashTargetLayerIds(int64_t num_target_layers,
                                                 int64_t num_draft_layers);

}  // namespace es::model
