#include "model/weight_names.h"

#include <map>
#include <set>
#include <sstream>

#include "common/errors.h"
#include "common/logging.h"
#include "model/quantized_checkpoint.h"

namespace es::model {
namespace {

constexpr size_t kListedPerCategory = 8;

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void appendCategory(std::ostringstream& os, const char* what,
                    const std::vector<std::string>& items) {
  if (items.empty()) return;
  os << "\n  " << items.size() << " " << what << ":";
  for (size_t i = 0; i < items.size() && i < kListedPerCategory; ++i) os << "\n    " << items[i];
  if (items.size() > kListedPerCategory)
    os << "\n    ... and " << items.size() - kListedPerCategory << " more";
}

}  // namespace

std::string shapeText(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string layerPrefix(const ModelConfig& config, int64_t layer) {
  return (config.isDraft() ? "layers." : "model.layers.") + std::to_string(layer) + ".";
}

int64_t draftTapCount(const ModelConfig& config) {
  if (config.dflash && !config.dflash->target_layer_ids.empty()) {
    return static_cast<int64_t>(config.dflash->target_layer_ids.size());
  }
  return config.num_hidden_layers;  // the default formula taps one layer per draft layer
}

std::vector<ExpectedTensor> expectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  std::vector<ExpectedTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool required = true) {
    out.push_back(ExpectedTensor{std::move(name), std::move(shape), required});
  };

  if (c.isDraft()) {
    add("fc.weight", {h, draftTapCount(c) * h});
    add("hidden_norm.weight", {h});
    add("norm.weight", {h});
    add("mask_embedding", {h}, /*required=*/false);
  } else {
    add("model.embed_tokens.weight", {c.vocab_size, h});
    add("model.norm.weight", {h});
    if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h});
  }

  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = layerPrefix(c, i);
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {c.qDim(), h});
    add(p + "self_attn.k_proj.weight", {c.kvDim(), h});
    add(p + "self_attn.v_proj.weight", {c.kvDim(), h});
    add(p + "self_attn.o_proj.weight", {h, c.qDim()});
    if (c.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {c.qDim()});
      add(p + "self_attn.k_proj.bias", {c.kvDim()});
      add(p + "self_attn.v_proj.bias", {c.kvDim()});
    }
    if (c.o_bias) add(p + "self_attn.o_proj.bias", {h});
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.head_dim});
      add(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    add(p + "mlp.gate_proj.weight", {inter, h});
    add(p + "mlp.up_proj.weight", {inter, h});
    add(p + "mlp.down_proj.weight", {h, inter});
    if (c.mlp_bias) {
      add(p + "mlp.gate_proj.bias", {inter});
      add(p + "mlp.up_proj.bias", {inter});
      add(p + "mlp.down_proj.bias", {h});
    }
  }
  return out;
}

WeightCheckReport checkWeights(const WeightStore& store, const ModelConfig& config,
                               const QuantizationConfig& quant) {
  WeightCheckReport report;
  std::vector<std::string> missing;
  std::vector<std::string> wrong_shape;
  std::vector<std::string> bad_dtype;
  std::vector<std::string> bad_quantized;
  std::vector<std::string> unexpected;

  std::map<std::string, const ExpectedTensor*, std::less<>> expected;
  const std::vector<ExpectedTensor> tensors = expectedTensors(config);
  for (const ExpectedTensor& e : tensors) expected.emplace(e.name, &e);
  // The tensors that hold quantized linears, and the `.weight` names they replace (a dense
  // `.weight` beside AWQ / GPTQ tensors is unexpected: the checkpoint would hold W twice).
  std::set<std::string, std::less<>> quantized;
  std::set<std::string, std::less<>> replaced;

  for (const ExpectedTensor& e : tensors) {
    // Linears ([out, in] weights) may be quantized; the embedding is a lookup table, never one.
    const bool linear = e.shape.size() == 2 && e.name != "model.embed_tokens.weight";
    if (linear && quantizedLinearFormat(store, quant, e.name)) {
      for (std::string& name : quantizedLinearTensorNames(store, quant, e.name)) {
        quantized.insert(std::move(name));
      }
      if (quantized.count(e.name) == 0) replaced.insert(e.name);
      for (std::string& problem :
           quantizedLinearProblems(store, quant, e.name, e.shape[0], e.shape[1])) {
        bad_quantized.push_back(std::move(problem));
      }
      continue;
    }
    if (!store.contains(e.name)) {
      if (e.required) missing.push_back(e.name + " " + shapeText(e.shape));
      continue;
    }
    const TensorInfo& info = store.info(e.name);
    if (info.shape != e.shape) {
      wrong_shape.push_back(e.name + ": expected " + shapeText(e.shape) + ", found " +
                            shapeText(info.shape));
    }
    // The safetensors parser admits only these today; checked here too because it is the
    // contract the backends rely on, whatever the reader learns later.
    if (info.dtype != DType::kBF16 && info.dtype != DType::kF16 && info.dtype != DType::kF32) {
      bad_dtype.push_back(e.name + ": " + std::string(dtype_name(info.dtype)));
    }
    if (e.name == "mask_embedding") report.has_mask_embedding = true;
  }

  for (const std::string& name : store.names()) {
    const bool isExpected = (expected.find(name) != expected.end() && replaced.count(name) == 0) ||
                            quantized.count(name) != 0;
    if (isExpected) continue;
    const bool tolerated =
        endsWith(name, ".rotary_emb.inv_freq") ||
        (!config.isDraft() && config.tie_word_embeddings && name == "lm_head.weight");
    if (tolerated) {
      report.ignored.push_back(name);
    } else {
      unexpected.push_back(escapeControl(name) + " " + shapeText(store.info(name).shape));
    }
  }

  if (!missing.empty() || !wrong_shape.empty() || !bad_dtype.empty() || !bad_quantized.empty() ||
      !unexpected.empty()) {
    std::ostringstream os;
    os << store.source() << ": weights do not match the " << architectureName(config.architecture)
       << " config (" << config.source << ")";
    if (quant.quantized()) os << " quantized as " << quantMethodName(quant.method);
    appendCategory(os, "missing", missing);
    appendCategory(os, "with a wrong shape", wrong_shape);
    appendCategory(os, "with an unsupported dtype", bad_dtype);
    appendCategory(os, "quantized linear problems", bad_quantized);
    appendCategory(os, "unexpected", unexpected);
    throw FormatError(os.str());
  }
  for (const std::string& name : report.ignored) {
    ES_LOG_WARN(
        store.source(), ": ignoring tensor ", name,
        name == "lm_head.weight" ? " (embeddings are tied)" : " (recomputed from the config)");
  }
  return report;
}

}  // namespace es::model
