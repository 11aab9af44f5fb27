#include "model/gguf_convert.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <vector>

#include "common/errors.h"
#include "common/logging.h"
#include "model/gguf_dequant.h"
#include "model/gguf_tokenizer.h"
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

std::string joinFirst(const std::vector<std::string>& items, size_t max = 5) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < max; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > max) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
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

struct PlannedTensor {
  const GgufTensorInfo* gguf = nullptr;
  std::string hf_name;
  std::vector<int64_t> shape;
  int64_t permute_heads = 0;  // > 0: un-permute the rows for this many heads
  uint64_t bytes = 0;
};

uint64_t writeSafetensors(const GgufFile& file, const std::vector<PlannedTensor>& plan, DType dtype,
                          const std::filesystem::path& path, const ConvertOptions& options) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const PlannedTensor& p : plan) {
    header[p.hf_name] = {{"dtype", dtype == DType::kF32 ? "F32" : "BF16"},
                         {"shape", p.shape},
                         {"data_offsets", {offset, offset + p.bytes}}};
    offset += p.bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';  // as the reference writer: aligned tensor data

  const std::filesystem::path tmp = path.string() + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) ES_THROW(InvalidArgument, "convert: cannot create ", tmp.string());
  try {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<float> unpermuted;
    std::vector<bf16> half;
    for (size_t i = 0; i < plan.size(); ++i) {
      const PlannedTensor& p = plan[i];
      std::vector<float> values = dequantizeTensor(file, *p.gguf);
      if (p.permute_heads > 0) {
        unpermuted.resize(values.size());
        unpermuteLlamaRows(values, unpermuted, p.permute_heads, p.shape[0], p.shape.size() > 1 ? p.shape[1] : 1);
        values.swap(unpermuted);
      }
      if (dtype == DType::kF32) {
        out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
      } else {
        half.resize(values.size());
        convertF32(values, std::span<bf16>(half));
        out.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
      }
      if (!out) ES_THROW(InvalidArgument, "convert: writing ", tmp.string(), " failed (disk full?)");
      if (options.progress) options.progress(i + 1, plan.size(), p.hf_name);
    }
    out.close();
    if (!out) ES_THROW(InvalidArgument, "convert: writing ", tmp.string(), " failed (disk full?)");
    std::filesystem::rename(tmp, path);
  } catch (...) {
    out.close();
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  return 8 + text.size() + offset;
}

}  // namespace

void unpermuteLlamaRows(std::span<const float> src, std::span<float> dst, int64_t num_heads, int64_t rows,
                        int64_t cols) {
  ES_CHECK_ARG(num_heads > 0 && rows > 0 && rows % num_heads == 0 && (rows / num_heads) % 2 == 0, "unpermuteLlamaRows",
               "num_heads", num_heads, "must divide rows = ", rows, " into heads of even size");
  ES_CHECK_ARG(cols > 0 && src.size() == static_cast<size_t>(rows * cols), "unpermuteLlamaRows", "src.size()",
               src.size(), "must equal rows * cols = ", rows, " * ", cols);
  ES_CHECK_ARG(dst.size() == src.size(), "unpermuteLlamaRows", "dst.size()", dst.size(), "must equal src.size() = ",
               src.size());
  const int64_t head_dim = rows / num_heads;
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const float* from = src.data() + (h * head_dim + 2 * i + j) * cols;
        float* to = dst.data() + (h * head_dim + j * half + i) * cols;
        std::copy(from, from + cols, to);
      }
    }
  }
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
  if (digits == 0 || digits >= name.size() || name[digits] != '.' || (digits > 1 && name[0] == '0')) return "";
  const auto it = layerNames().find(name.substr(digits + 1));
  if (it == layerNames().end()) return "";
  return "model.layers." + std::string(name.substr(0, digits)) + "." + it->second;
}

json hfConfigJson(const GgufHeader& h, DType dtype) {
  ES_CHECK_ARG(dtype == DType::kF32 || dtype == DType::kBF16, "hfConfigJson", "dtype", dtype_name(dtype),
               "must be f32 or bf16");
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
    ES_THROW(FormatError, h.source, ": '", key("attention.value_length"), "' = ", *v, " differs from the key length ",
             head_dim, " (unsupported)");
  }
  if (auto r = h.optInt(key("rope.dimension_count"), 1, kMaxHeadDim); r && *r != head_dim) {
    ES_THROW(FormatError, h.source, ": '", key("rope.dimension_count"), "' = ", *r, " rotates part of the head (",
             head_dim, "); partial rotary embeddings are unsupported");
  }
  if (h.findTensor("rope_freqs.weight") != nullptr) {
    ES_THROW(FormatError, h.source, ": tensor 'rope_freqs.weight' (Llama-3.1 style RoPE frequency factors) is unsupported");
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
            {"max_position_embeddings", h.optInt(key("context_length"), 1, kMaxPositions).value_or(arch == Architecture::kLlama ? 2048 : 32768)},
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
  if (auto pad = h.optInt("tokenizer.ggml.padding_token_id", 0, vocab - 1)) c["pad_token_id"] = *pad;
  return c;
}

ConvertReport convertGgufToHf(const std::filesystem::path& gguf_path, const std::filesystem::path& out_dir,
                              const ConvertOptions& options) {
  ES_CHECK_ARG(options.dtype == DType::kF32 || options.dtype == DType::kBF16, "convertGgufToHf", "dtype",
               dtype_name(options.dtype), "must be f32 or bf16");
  const GgufFile file = GgufFile::open(gguf_path);
  const GgufHeader& h = file.header();
  const json config_json = hfConfigJson(h, options.dtype);
  const std::string config_text = dumpJson(config_json, 2, h.source);
  ConvertReport report;
  report.config = parseModelConfig(config_text, h.source + " (derived config.json)");
  const ModelConfig& c = report.config;

  // Plan and validate every tensor before writing anything.
  std::map<std::string, const ExpectedTensor*, std::less<>> expected_by_name;
  const std::vector<ExpectedTensor> expected = expectedTensors(c);
  for (const ExpectedTensor& e : expected) expected_by_name[e.name] = &e;
  std::vector<PlannedTensor> plan;
  std::vector<std::string> unknown, unsupported, misshapen, missing;
  std::map<std::string, bool, std::less<>> seen;
  for (const GgufTensorInfo& t : h.tensors) {
    PlannedTensor p;
    p.gguf = &t;
    p.hf_name = hfTensorName(t.name);
    const auto e = expected_by_name.find(p.hf_name);
    if (p.hf_name.empty() || e == expected_by_name.end()) {
      unknown.push_back(t.name);
      continue;
    }
    if (!ggmlTypeDequantizable(t.type)) unsupported.push_back(t.name + " (" + ggmlTypeName(t.type) + ")");
    p.shape = t.rowMajorShape();
    if (p.shape != e->second->shape) {
      std::ostringstream os;
      os << t.describe() << " for " << p.hf_name << " [";
      for (size_t i = 0; i < e->second->shape.size(); ++i) os << (i ? ", " : "") << e->second->shape[i];
      os << "]";
      misshapen.push_back(os.str());
    }
    if (c.architecture == Architecture::kLlama) {
      if (p.hf_name.ends_with("self_attn.q_proj.weight")) p.permute_heads = c.num_attention_heads;
      if (p.hf_name.ends_with("self_attn.k_proj.weight")) p.permute_heads = c.num_key_value_heads;
    }
    p.bytes = t.numel * static_cast<uint64_t>(dtype_size(options.dtype));
    seen[p.hf_name] = true;
    plan.push_back(std::move(p));
  }
  for (const ExpectedTensor& e : expected) {
    if (e.required && seen.count(e.name) == 0) missing.push_back(e.name);
  }
  if (!unknown.empty() || !unsupported.empty() || !misshapen.empty() || !missing.empty()) {
    std::ostringstream os;
    os << h.source << ": cannot convert to " << architectureName(c.architecture) << ":";
    if (!unknown.empty()) os << " unknown tensors: " << joinFirst(unknown) << ";";
    if (!unsupported.empty()) os << " tensor types that cannot be dequantised: " << joinFirst(unsupported) << ";";
    if (!misshapen.empty()) os << " misshapen: " << joinFirst(misshapen) << ";";
    if (!missing.empty()) os << " missing: " << joinFirst(missing) << ";";
    throw FormatError(os.str());
  }
  // Tokenizer files, built (and so validated) before the weights are written.
  std::string tokenizer_text, tokenizer_config_text;
  const bool has_tokenizer = h.has("tokenizer.ggml.model");
  if (has_tokenizer) {
    tokenizer_text = dumpJson(hfTokenizerJson(h), 2, h.source + " (tokenizer.json)");
    tokenizer_config_text =
        dumpJson(hfTokenizerConfigJson(h, c.max_position_embeddings), 2, h.source + " (tokenizer_config.json)");
  } else {
    ES_LOG_WARN(h.source, ": no tokenizer.ggml.* metadata; the folder gets no tokenizer files");
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !std::filesystem::is_directory(out_dir)) {
    ES_THROW(InvalidArgument, "convertGgufToHf: argument 'out_dir' = ", out_dir.string(),
             " cannot be created: ", ec ? ec.message() : "not a directory");
  }
  report.safetensors_bytes = writeSafetensors(file, plan, options.dtype, out_dir / kSingleWeightsFile, options);
  report.tensors = plan.size();
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
