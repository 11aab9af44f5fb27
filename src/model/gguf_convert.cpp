#include "model/gguf_convert.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

#include "common/errors.h"
#include "common/logging.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_weights.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/weight_names.h"
#include "model/weight_store.h"

namespace es::model {
namespace {

using nlohmann::json;

// GGUF per-layer suffix -> HF per-layer suffix (after "model.layers.N.").
const std::map<std::string, std::string, std::less<>>& layerNames() {
  static const std::map<std::string, std::string, std::less<>> table = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate.bias", "mlp.gate_proj.bias"},
      {"ffn_up.bias", "mlp.up_proj.bias"},
      {"ffn_down.bias", "mlp.down_proj.bias"},
  };
  return table;
}

std::string dumpJson(const json& j, int indent, const std::string& what) {
  try {
    return j.dump(indent);
  } catch (const json::exception& e) {  // invalid UTF-8 in a token or template
    ES_THROW(FormatError, what, ": cannot be written as JSON: ", e.what());
  }
}

void writeFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) ES_THROW(InvalidArgument, "convert: cannot write ", path.string());
}

// A float metadata value as config.json should show it: f32 values (most GGUF floats) as the
// shortest decimal that rounds back to the same f32 (1e-05, not 9.999999747378752e-06).
std::optional<double> optConfigFloat(const GgufHeader& h, const std::string& key) {
  const auto v = h.optFloat(key);
  if (!v || h.find(key)->type != GgufValueType::kF32) return v;
  const auto f = static_cast<float>(*v);
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

uint64_t writeSafetensors(const GgufWeights& weights, const std::filesystem::path& path,
                          const ConvertOptions& options) {
  const DType dtype = weights.dtype();
  std::vector<SafetensorsEntry> entries;
  for (const GgufWeights::Entry& e : weights.entries()) {
    entries.push_back({.name = e.info.name,
                       .dtype = std::string(safetensorsDTypeName(dtype)),
                       .shape = e.info.shape,
                       .bytes = e.info.byteSize()});
  }
  SafetensorsWriter writer(path, entries, {{"format", "pt"}}, "convert");
  std::vector<uint8_t> values;  // one tensor at a time
  const auto& stored = weights.entries();
  for (size_t i = 0; i < stored.size(); ++i) {
    values.resize(stored[i].info.byteSize());
    weights.read(stored[i], values);
    writer.append(values);
    if (options.progress) options.progress(i + 1, stored.size(), stored[i].info.name);
  }
  return writer.finish();
}

}  // namespace

void unpermuteLlamaRows(std::span<const float> src, std::span<float> dst, int64_t num_heads,
                        int64_t rows, int64_t cols) {
  ES_CHECK_ARG(num_heads > 0 && rows > 0 && rows % num_heads == 0 && (rows / num_heads) % 2 == 0,
               "unpermuteLlamaRows", "num_heads", num_heads, "must divide rows = ", rows,
               " into heads of even size");
  ES_CHECK_ARG(cols > 0 && src.size() == static_cast<size_t>(rows * cols), "unpermuteLlamaRows",
               "src.size()", src.size(), "must equal rows * cols = ", rows, " * ", cols);
  ES_CHECK_ARG(dst.size() == src.size(), "unpermuteLlamaRows", "dst.size()", dst.size(),
               "must equal src.size() = ", src.size());
  const int64_t head_dim = rows / num_heads;
  for (int64_t r = 0; r < rows; ++r) {
    const float* from = src.data() + llamaStoredRow(r, head_dim) * cols;
    std::copy(from, from + cols, dst.data() + r * cols);
  }
}

int64_t llamaStoredRow(int64_t row, int64_t head_dim) {
  // HF row h*d + j*(d/2) + i is stored at h*d + 2i + j.
  const int64_t half = head_dim / 2;
  const int64_t h = row / head_dim, k = row % head_dim;
  return h * head_dim + 2 * (k % half) + k / half;
}

Architecture architectureFromGguf(const GgufHeader& h) {
  const std::string arch = h.getString("general.architecture");
  if (arch == "llama") return Architecture::kLlama;
  if (arch == "qwen2") return Architecture::kQwen2;
  if (arch == "qwen3") return Architecture::kQwen3;
  ES_THROW(FormatError, h.source, ": 'general.architecture' = '", arch,
           "' is unsupported (supported: llama, qwen2, qwen3)");
}

std::string hfTensorName(std::string_view name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  constexpr std::string_view kBlock = "blk.";
  if (name.substr(0, kBlock.size()) != kBlock) return "";
  name.remove_prefix(kBlock.size());
  size_t digits = 0;
  while (digits < name.size() && digits < 6 && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0 || digits >= name.size() || name[digits] != '.' || (digits > 1 && name[0] == '0'))
    return "";
  const auto it = layerNames().find(name.substr(digits + 1));
  if (it == layerNames().end()) return "";
  return "model.layers." + std::string(name.substr(0, digits)) + "." + it->second;
}

json hfConfigJson(const GgufHeader& h, DType dtype) {
  ES_CHECK_ARG(dtype == DType::kF32 || dtype == DType::kBF16, "hfConfigJson", "dtype",
               dtype_name(dtype), "must be f32 or bf16");
  const Architecture arch = architectureFromGguf(h);
  const std::string a = h.getString("general.architecture");
  auto key = [&](const char* k) { return a + "." + k; };
  auto requireConfigFloat = [&](const std::string& k) {
    h.getFloat(k);  // the error for a missing or ill-typed key
    return *optConfigFloat(h, k);
  };

  const int64_t hidden = h.getInt(key("embedding_length"), 1, kMaxHiddenSize);
  const int64_t heads = h.getInt(key("attention.head_count"), 1, kMaxHeads);
  const int64_t kv_heads = h.optInt(key("attention.head_count_kv"), 1, kMaxHeads).value_or(heads);
  int64_t head_dim = 0;
  if (auto k = h.optInt(key("attention.key_length"), 1, kMaxHeadDim)) {
    head_dim = *k;
  } else {
    if (hidden % heads != 0) {
      ES_THROW(FormatError, h.source, ": '", key("attention.head_count"), "' = ", heads,
               " does not divide the embedding length ", hidden, " and no key_length is given");
    }
    head_dim = hidden / heads;
  }
  if (auto v = h.optInt(key("attention.value_length"), 1, kMaxHeadDim); v && *v != head_dim) {
    ES_THROW(FormatError, h.source, ": '", key("attention.value_length"), "' = ", *v,
             " differs from the key length ", head_dim, " (unsupported)");
  }
  if (auto r = h.optInt(key("rope.dimension_count"), 1, kMaxHeadDim); r && *r != head_dim) {
    ES_THROW(FormatError, h.source, ": '", key("rope.dimension_count"), "' = ", *r,
             " rotates part of the head (", head_dim,
             "); partial rotary embeddings are unsupported");
  }
  if (h.findTensor("rope_freqs.weight") != nullptr) {
    ES_THROW(
        FormatError, h.source,
        ": tensor 'rope_freqs.weight' (Llama-3.1 style RoPE frequency factors) is unsupported");
  }
  const GgufTensorInfo* embed = h.findTensor("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    ES_THROW(FormatError, h.source, ": tensor 'token_embd.weight' is missing or not 2-D");
  }
  const bool tied = h.findTensor("output.weight") == nullptr;

  json c = {{"architectures", {std::string(architectureName(arch))}},
            {"model_type", a},
            {"hidden_size", hidden},
            {"intermediate_size", h.getInt(key("feed_forward_length"), 1, kMaxIntermediateSize)},
            {"num_hidden_layers", h.getInt(key("block_count"), 1, kMaxLayers)},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"head_dim", head_dim},
            {"vocab_size", static_cast<int64_t>(embed->dims[1])},
            {"max_position_embeddings", h.optInt(key("context_length"), 1, kMaxPositions)
                                            .value_or(arch == Architecture::kLlama ? 2048 : 32768)},
            {"rms_norm_eps", requireConfigFloat(key("attention.layer_norm_rms_epsilon"))},
            {"rope_theta", optConfigFloat(h, key("rope.freq_base")).value_or(10000.0)},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", tied},
            {"torch_dtype", dtype == DType::kF32 ? "float32" : "bfloat16"},
            {"use_cache", true}};
  if (arch != Architecture::kQwen2) {
    // Llama/Qwen3 biases are all-or-nothing flags in transformers; the tensor check below
    // reports a file that has some and not others.
    c["attention_bias"] = h.findTensor("blk.0.attn_q.bias") != nullptr;
  }
  if (arch == Architecture::kLlama) c["mlp_bias"] = h.findTensor("blk.0.ffn_gate.bias") != nullptr;
  if (arch != Architecture::kLlama) c["use_sliding_window"] = false;

  const std::string scaling = h.optString(key("rope.scaling.type")).value_or("none");
  if (scaling == "linear" || scaling == "yarn") {
    json rs = {{"type", scaling}, {"factor", requireConfigFloat(key("rope.scaling.factor"))}};
    if (auto orig = h.optInt(key("rope.scaling.original_context_length"), 1, kMaxPositions)) {
      rs["original_max_position_embeddings"] = *orig;
    }
    c["rope_scaling"] = rs;
  } else if (scaling != "none") {
    ES_THROW(FormatError, h.source, ": '", key("rope.scaling.type"), "' = '", scaling,
             "' is unsupported (supported: none, linear, yarn)");
  }

  const int64_t vocab = static_cast<int64_t>(embed->dims[1]);
  if (auto bos = h.optInt("tokenizer.ggml.bos_token_id", 0, vocab - 1)) c["bos_token_id"] = *bos;
  if (auto eos = h.optInt("tokenizer.ggml.eos_token_id", 0, vocab - 1)) c["eos_token_id"] = *eos;
  if (auto pad = h.optInt("tokenizer.ggml.padding_token_id", 0, vocab - 1))
    c["pad_token_id"] = *pad;
  return c;
}

ModelConfig ggufModelConfig(const GgufHeader& header) {
  // f32: the dequantised values are exact in it (the dtype a loader reads them in is its own).
  return parseModelConfig(dumpJson(hfConfigJson(header, DType::kF32), 2, header.source),
                          header.source);
}

ConvertReport convertGgufToHf(const std::filesystem::path& gguf_path,
                              const std::filesystem::path& out_dir, const ConvertOptions& options) {
  ES_CHECK_ARG(options.dtype == DType::kF32 || options.dtype == DType::kBF16, "convertGgufToHf",
               "dtype", dtype_name(options.dtype), "must be f32 or bf16");
  // Config, tensor names, shapes and types are all validated here, before anything is written.
  const std::unique_ptr<const GgufWeights> weights = GgufWeights::open(gguf_path, options.dtype);
  const GgufHeader& h = weights->file().header();
  const json config_json = hfConfigJson(h, options.dtype);
  const std::string config_text = dumpJson(config_json, 2, h.source);
  ConvertReport report;
  report.config = parseModelConfig(config_text, h.source + " (derived config.json)");
  const ModelConfig& c = report.config;

  // Tokenizer files, built (and so validated) before the weights are written.
  std::string tokenizer_text, tokenizer_config_text;
  const bool has_tokenizer = h.has("tokenizer.ggml.model");
  if (has_tokenizer) {
    tokenizer_text = dumpJson(hfTokenizerJson(h), 2, h.source + " (tokenizer.json)");
    tokenizer_config_text = dumpJson(hfTokenizerConfigJson(h, c.max_position_embeddings), 2,
                                     h.source + " (tokenizer_config.json)");
  } else {
    ES_LOG_WARN(h.source, ": no tokenizer.ggml.* metadata; the folder gets no tokenizer files");
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !std::filesystem::is_directory(out_dir)) {
    ES_THROW(InvalidArgument, "convertGgufToHf: argument 'out_dir' = ", out_dir.string(),
             " cannot be created: ", ec ? ec.message() : "not a directory");
  }
  report.safetensors_bytes = writeSafetensors(*weights, out_dir / kSingleWeightsFile, options);
  report.tensors = weights->entries().size();
  report.unpermuted = c.architecture == Architecture::kLlama;
  writeFile(out_dir / "config.json", config_text + "\n");
  if (has_tokenizer) {
    writeFile(out_dir / "tokenizer.json", tokenizer_text + "\n");
    writeFile(out_dir / "tokenizer_config.json", tokenizer_config_text + "\n");
  }
  json generation = json::object();
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (config_json.contains(k)) generation[k] = config_json[k];
  }
  writeFile(out_dir / "generation_config.json", generation.dump(2) + "\n");

  // The folder must load the way every HF folder does.
  const ModelConfig loaded = loadModelConfig(out_dir);
  const WeightStore store = WeightStore::openFolder(out_dir);
  checkWeights(store, loaded);
  return report;
}

}  // namespace es::model
