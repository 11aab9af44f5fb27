#pragma once
// GGUF -> Hugging Face model folder (what `edgespec convert` runs):
//   config.json             LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM from
//                           general.architecture and the {arch}.* hyperparameters
//   model.safetensors       every tensor dequantised to f32 or bf16 under its HF name, Llama q/k
//                           rows un-permuted (GgufWeights, gguf_weights.h: the same reader a
//                           direct .gguf load uses); written tensor by tensor (one tensor in
//                           memory at a time), through a temporary file + rename
//   tokenizer.json, tokenizer_config.json, generation_config.json   (gguf_tokenizer.h)
// Everything is validated before the first byte is written: the config goes through
// parseModelConfig and every tensor is checked against expectedTensors (names, shapes, types); the
// finished folder is re-opened with loadModelConfig + WeightStore::openFolder + checkWeights.
//
// Llama GGUFs (llama.cpp's converter) store q_proj/k_proj with the rows of each head permuted
// for interleaved (GPT-J style) RoPE:  P = W.reshape(n, 2, d/2, in).swapaxes(1, 2).reshape(W.shape)
// i.e. row h*d + 2i + j of P is row h*d + j*(d/2) + i of W (i < d/2, j in {0, 1}). The HF/NeoX
// layout is recovered with the inverse. Qwen2/Qwen3 GGUFs are not permuted.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace es::model {

// Row un-permutation for one projection: `src` and `dst` are [rows, cols] row-major, rows =
// num_heads * head_dim, head_dim even. InvalidArgument on inconsistent sizes.
void unpermuteLlamaRows(std::span<const float> src, std::span<float> dst, int64_t num_heads,
                        int64_t rows, int64_t cols);
// The stored (permuted) row that holds HF row `row`, for heads of `head_dim` (even) rows.
int64_t llamaStoredRow(int64_t row, int64_t head_dim);

// general.architecture -> Architecture (llama, qwen2, qwen3); FormatError otherwise.
Architecture architectureFromGguf(const GgufHeader& header);

// The HF name of a GGUF tensor ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight");
// empty when the name is not one the supported architectures use.
std::string hfTensorName(std::string_view gguf_name);

// config.json content for `header`, with torch_dtype from `dtype` (f32 or bf16).
nlohmann::json hfConfigJson(const GgufHeader& header, DType dtype);
// The ModelConfig a converted folder's config.json would give (hfConfigJson -> parseModelConfig),
// with `source` the GGUF file: what loadModelConfig returns for a .gguf path.
ModelConfig ggufModelConfig(const GgufHeader& header);

struct ConvertOptions {
  DType dtype = DType::kBF16;  // f32 (exact for every supported GGUF type) or bf16
  // Called after each tensor is written (done of total); may be empty.
  std::function<void(size_t done, size_t total, const std::string& hf_name)> progress;
};

struct ConvertReport {
  ModelConfig config;
  size_t tensors = 0;
  uint64_t safetensors_bytes = 0;
  bool unpermuted = false;  // llama q/k rows were un-permuted
};

// Converts `gguf_path` into the folder `out_dir` (created if absent; the files above are
// replaced). FormatError for anything the file does not support, InvalidArgument for bad
// arguments or an unwritable folder.
ConvertReport convertGgufToHf(const std::filesystem::path& gguf_path,
                              const std::filesystem::path& out_dir,
                              const ConvertOptions& options = {});

}  // namespace es::model
