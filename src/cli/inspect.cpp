#include "cli/inspect.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/numeric_flags.h"
#include "common/errors.h"
#include "common/kv_page.h"
#include "common/quant_format.h"
#include "kv/kv_cache_plan.h"
#include "kv/page_geometry.h"
#include "model/model_config.h"
#include "model/quantized_checkpoint.h"
#include "model/weight_names.h"
#include "model/weight_store.h"

namespace es::cli {
namespace {

struct ModelShape {
  int32_t layers;
  int32_t kvHeads;
  int32_t headDim;
};

// Attention shapes of public checkpoints (from their config.json files).
const std::map<std::string, ModelShape>& presets() {
  static const std::map<std::string, ModelShape> table = {
      {"qwen3-0.6b", {28, 8, 128}}, {"qwen3-1.7b", {28, 8, 128}},   {"qwen3-4b", {36, 8, 128}},
      {"qwen3-8b", {36, 8, 128}},   {"llama-3.1-8b", {32, 8, 128}}, {"smollm2-135m", {30, 3, 64}},
  };
  return table;
}

// Far above any serving batch; low enough that the pages it needs stay countable.
constexpr int64_t kMaxInspectBatch = 1 << 16;

struct InspectOptions {
  std::string preset = "qwen3-8b";
  std::string model;  // HF folder, config.json or GGUF file: its shape (and sliding layers) win
                      // over the preset
  // Overrides of the preset's (or --model's) shape; unset: theirs.
  std::optional<int32_t> layers, kvHeads, headDim;
  int32_t draftLayers = 0;
  int32_t maxBatch = 1;
  int32_t maxSeqLen = 4096;
  std::optional<int32_t> slidingWindow;  // unset: no window (the model's, with --model)
  std::vector<int32_t> swaLayers;
  int64_t numPages = 0;
  int64_t prefixCachePages = 0;
  std::string dtype = "bf16";
  bool json = false;
  bool tensors = false;  // with --model: list the checkpoint's tensors and check them
};

// One linear layer's weight as a backend that runs every quantized format holds it (the CPU
// backend; model/linear_weight.h): quantized in the checkpoint's format, else dense as listed.
struct LinearEntry {
  std::string layer;  // "0", "1", ... or "head"
  std::string name;   // "q_proj", ..., "lm_head"
  std::string format;
  int64_t bytes = 0;
  int64_t bf16Bytes = 0;  // the same matrix dense in bf16
  bool quantized = false;
};

LinearEntry linearEntry(const model::WeightStore& store, const std::string& tensor,
                        std::string layer, std::string name) {
  const std::array<int64_t, 2> nk = store.matrixShape(tensor);
  LinearEntry e{.layer = std::move(layer), .name = std::move(name)};
  e.bf16Bytes = nk[0] * nk[1] * 2;
  const std::optional<QuantFormat> format = store.quantFormat(tensor);
  if (!format) {
    const model::TensorInfo& t = store.info(tensor);
    e.format = dtype_name(t.dtype);
    e.bytes = static_cast<int64_t>(t.byteSize());
    return e;
  }
  e.quantized = true;
  e.format = quantFormatName(*format);
  // The backend layout's bytes, from the shape and the group alone (nothing is read).
  const int32_t group = store.isGguf() ? ggufBlockElems(*format)
                                       : model::quantizedLinearGroup(store.quantization(), nk[1]);
  e.bytes = nk[0] * (dataRowBytes(*format, nk[1], group) + scaleRowBytes(*format, nk[1], group) +
                     zeroRowBytes(*format, nk[1], group));
  return e;
}

// A decoder layer's linears: {module prefix, name}.
constexpr std::pair<const char*, const char*> kLayerLinears[] = {
    {"self_attn.", "q_proj"}, {"self_attn.", "k_proj"}, {"self_attn.", "v_proj"},
    {"self_attn.", "o_proj"}, {"mlp.", "gate_proj"},    {"mlp.", "up_proj"},
    {"mlp.", "down_proj"}};

// Every linear of the model, layer by layer, then the lm_head (absent when tied).
std::vector<LinearEntry> linearEntries(const model::WeightStore& store,
                                       const model::ModelConfig& c) {
  std::vector<LinearEntry> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = model::layerPrefix(c, l);
    for (const auto& [module, name] : kLayerLinears) {
      const std::string tensor = p + module + name + ".weight";
      // An AWQ / GPTQ linear has no tensor of its dense name, only its quantized parts.
      if (store.contains(tensor) || store.quantFormat(tensor)) {
        out.push_back(linearEntry(store, tensor, std::to_string(l), name));
      }
    }
  }
  if (store.contains("lm_head.weight")) {
    out.push_back(linearEntry(store, "lm_head.weight", "head", "lm_head"));
  }
  return out;
}

// The checkpoint's tensors (name, dtype, shape, bytes), checked against its config. A GGUF file
// is listed as it loads (HF names and shapes, f32) with each tensor's GGUF name and type. Then
// every linear's format and bytes as a backend running quantized weights holds them, and the
// totals: quantized bytes, dense bytes, and the quantized ones' size were they dense bf16.
void printTensors(const std::string& path, const model::ModelConfig& config, bool json) {
  // --model may name a folder's config.json: its tensors are those of the folder.
  const std::filesystem::path p(path);
  const model::WeightStore store = model::WeightStore::open(p.filename() != "config.json" ? p
                                                            : p.has_parent_path() ? p.parent_path()
                                                                                  : ".");
  model::checkWeights(store, config, store.quantization());
  const std::vector<LinearEntry> linears = linearEntries(store, config);
  int64_t quantizedBytes = 0, denseBytes = 0, quantizedAsBf16 = 0;
  for (const LinearEntry& e : linears) {
    (e.quantized ? quantizedBytes : denseBytes) += e.bytes;
    if (e.quantized) quantizedAsBf16 += e.bf16Bytes;
  }
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const std::string& name : store.names()) {
      const model::TensorInfo& t = store.info(name);
      nlohmann::json entry = {{"name", name},
                              {"dtype", std::string(dtype_name(t.dtype))},
                              {"shape", t.shape},
                              {"bytes", t.byteSize()}};
      if (store.isGguf()) entry["gguf"] = store.ggufOrigin(name);
      list.push_back(std::move(entry));
    }
    nlohmann::json lin = nlohmann::json::array();
    for (const LinearEntry& e : linears) {
      lin.push_back(
          {{"layer", e.layer}, {"name", e.name}, {"format", e.format}, {"bytes", e.bytes}});
    }
    const nlohmann::json totals = {{"quantized_bytes", quantizedBytes},
                                   {"dense_bytes", denseBytes},
                                   {"quantized_as_bf16_bytes", quantizedAsBf16}};
    std::printf("%s\n", nlohmann::json{{"config", config.summary()},
                                       {"tensors", list},
                                       {"linears", lin},
                                       {"linear_totals", totals}}
                            .dump(2)
                            .c_str());
    return;
  }
  std::printf("%s\n%zu tensors, %.1f MiB%s, all names and shapes match the config:\n",
              config.summary().c_str(), store.size(),
              static_cast<double>(store.totalTensorBytes()) / (1024.0 * 1024.0),
              store.isGguf() ? " once dequantised" : "");
  for (const std::string& name : store.names()) {
    const std::string origin = store.ggufOrigin(name);
    std::printf("  %s%s%s\n", store.info(name).describe().c_str(), origin.empty() ? "" : "  <- ",
                origin.c_str());
  }
  std::printf("linear weights as held by a backend that runs quantized formats:\n");
  std::string layer;
  for (const LinearEntry& e : linears) {
    if (e.layer != layer) {
      std::printf("%s  %s%s:", layer.empty() ? "" : "\n", e.layer == "head" ? "" : "layer ",
                  e.layer.c_str());
      layer = e.layer;
    }
    std::printf(" %s %s %lld B;", e.name.c_str(), e.format.c_str(),
                static_cast<long long>(e.bytes));
  }
  std::printf("%s  total: quantized %.2f MiB (%.2f MiB as bf16), dense %.2f MiB\n",
              linears.empty() ? "" : "\n", static_cast<double>(quantizedBytes) / 1048576.0,
              static_cast<double>(quantizedAsBf16) / 1048576.0,
              static_cast<double>(denseBytes) / 1048576.0);
}

DType parseDtype(const std::string& name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "f16" || name == "fp16") return DType::kF16;
  if (name == "f32" || name == "fp32") return DType::kF32;
  ES_THROW(InvalidArgument, "inspect: argument '--dtype' = ", name, " must be bf16, f16 or f32");
}

void runInspect(const InspectOptions& o) {
  const auto it = presets().find(o.preset);
  if (it == presets().end()) {
    ES_THROW(InvalidArgument, "inspect: argument '--preset' = ", o.preset,
             " is not a known preset");
  }
  ModelShape shape = it->second;
  std::vector<int32_t> slidingLayers = o.swaLayers;
  int32_t window = o.slidingWindow.value_or(0);
  std::string name = o.preset;
  if (!o.model.empty()) {
    const model::ModelConfig c = model::loadModelConfig(o.model);
    if (o.tensors) {
      printTensors(o.model, c, o.json);
      return;
    }
    shape = {static_cast<int32_t>(c.num_hidden_layers), static_cast<int32_t>(c.num_key_value_heads),
             static_cast<int32_t>(c.head_dim)};
    name = c.source;
    for (size_t i = 0; i < c.layer_types.size(); ++i) {
      if (c.layer_types[i] == model::LayerType::kSlidingAttention) {
        slidingLayers.push_back(static_cast<int32_t>(i));
        window = static_cast<int32_t>(c.sliding_window.value_or(0));
      }
    }
  }
  shape.layers = o.layers.value_or(shape.layers);
  shape.kvHeads = o.kvHeads.value_or(shape.kvHeads);
  shape.headDim = o.headDim.value_or(shape.headDim);
  ES_CHECK_ARG(!o.headDim || *o.headDim % 8 == 0, "inspect", "--head-dim", shape.headDim,
               "must be a multiple of 8 (KV rows move in 16-byte vectors)");

  // The pool holds at most kMaxKvPoolPages pages: name the flags whose product exceeds it.
  const int64_t pagesPerSequence = kv::computeMinimumKvPoolPages(1, o.maxSeqLen);
  ES_CHECK_ARG(o.maxBatch <= kv::kMaxKvPoolPages / pagesPerSequence, "inspect", "--max-batch",
               o.maxBatch, "must be <= ", kv::kMaxKvPoolPages / pagesPerSequence,
               " with --max-seq-len ", o.maxSeqLen, " (", pagesPerSequence,
               " pages each; the pool holds at most ", kv::kMaxKvPoolPages, ")");
  kv::KvCacheConfig config;
  config.maxBatchSize = o.maxBatch;
  config.maxSequenceLength = o.maxSeqLen;
  config.dtype = parseDtype(o.dtype);
  config.numPages = o.numPages;
  if (o.prefixCachePages != 0) {
    const int64_t limit =
        kv::kMaxKvPoolPages - kv::computeMinimumKvPoolPages(o.maxBatch, o.maxSeqLen);
    ES_CHECK_ARG(o.prefixCachePages >= 0 && o.prefixCachePages <= limit, "inspect",
                 "--prefix-cache-pages", o.prefixCachePages, "must be in [0, ", limit,
                 "] (kMaxKvPoolPages less the minimum pool)");
    ES_CHECK_ARG(
        o.numPages == 0, "inspect", "--num-pages", o.numPages,
        "cannot be combined with --prefix-cache-pages (the pool is the minimum plus those pages)");
  }
  config.prefixCachePages = o.prefixCachePages;
  config.baseLayers.assign(static_cast<size_t>(shape.layers),
                           kv::KvLayerShape{shape.kvHeads, shape.headDim, 0});
  for (int32_t layer : slidingLayers) {
    ES_CHECK_ARG(layer >= 0 && layer < shape.layers, "inspect", "--swa-layers", layer,
                 "must name a layer in [0, ", shape.layers, ")");
    ES_CHECK_ARG(window > 0, "inspect", "--sliding-window", window,
                 "must be > 0 when --swa-layers is given");
    // A window at least as long as the sequence is plain full attention.
    config.baseLayers[static_cast<size_t>(layer)].kvCacheCapacity = std::min(window, o.maxSeqLen);
  }
  config.draftLayers.assign(static_cast<size_t>(o.draftLayers),
                            kv::KvLayerShape{shape.kvHeads, shape.headDim, 0});
  const kv::KvCachePlan plan = kv::planKvCache(config);
  if (o.json) {
    std::printf("%s\n", plan.toJson().dump(2).c_str());
  } else {
    std::printf("model shape: %s, %d layers, %d KV heads, head dim %d\n%s", name.c_str(),
                shape.layers, shape.kvHeads, shape.headDim, plan.describe().c_str());
  }
}

}  // namespace

void addInspectCommand(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print the paged KV cache plan for a model shape");
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  cmd->add_option("--preset", options->preset, "Model shape")
      ->check(CLI::IsMember(names))
      ->capture_default_str();
  cmd->add_option("--model", options->model,
                  "HF model folder, config.json or GGUF file (overrides --preset)");
  addIntegerFlag(cmd, "--layers", options->layers, 1, model::kMaxLayers,
                 "Override: attention layers");
  addIntegerFlag(cmd, "--kv-heads", options->kvHeads, 1, model::kMaxHeads, "Override: KV heads");
  addIntegerFlag(cmd, "--head-dim", options->headDim, 1, model::kMaxHeadDim,
                 "Override: head dimension");
  addIntegerFlag(cmd, "--draft-layers", options->draftLayers, 0, model::kMaxLayers,
                 "DFlash draft layers (0 = no draft)");
  addIntegerFlag(cmd, "--max-batch", options->maxBatch, 1, kMaxInspectBatch,
                 "Concurrent sequences");
  addIntegerFlag(cmd, "--max-seq-len", options->maxSeqLen, 1, kv::kMaxKvCacheCapacity,
                 "Tokens per sequence");
  addIntegerFlag(cmd, "--sliding-window", options->slidingWindow, 1, kv::kMaxKvCacheCapacity,
                 "Window of the --swa-layers");
  cmd->add_option_function<std::vector<std::string>>(
         "--swa-layers",
         [options](const std::vector<std::string>& ids) {
           for (const std::string& id : ids) {
             options->swaLayers.push_back(static_cast<int32_t>(
                 parseIntegerFlag("inspect", "--swa-layers", id, 0, model::kMaxLayers - 1)));
           }
         },
         "Sliding-window layer ids")
      ->delimiter(',');
  addIntegerFlag(cmd, "--num-pages", options->numPages, 0, kv::kMaxKvPoolPages,
                 "Pool pages (0 = minimum)");
  addIntegerFlag(cmd, "--prefix-cache-pages", options->prefixCachePages, 0, kv::kMaxKvPoolPages,
                 "Prefix reuse: pages retained beyond the minimum pool (0 = off)");
  cmd->add_option("--dtype", options->dtype, "KV element type: bf16, f16, f32")
      ->capture_default_str();
  cmd->add_flag("--tensors", options->tensors,
                "With --model: list and check the checkpoint's tensors instead of the KV plan");
  cmd->add_flag("--json", options->json, "Print the plan (or the tensor list) as JSON on stdout");
  cmd->callback([options] { runInspect(*options); });
}

}  // namespace es::cli
