#include "model/target_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/dtype_convert.h"
#include "common/errors.h"
#include "common/logging.h"
#include "model/rope_table.h"
#include "model/weight_names.h"
#include "model/weight_store.h"
#include "model/weight_upload.h"

namespace es::model {
namespace {

// Host floats of n elements of a backend buffer of `dtype`.
std::vector<float> toHostFloats(ops::Backend& backend, const void* src, DType dtype, int64_t n) {
  std::vector<uint8_t> raw(static_cast<size_t>(n * dtype_size(dtype)));
  backend.copyToHost(raw.data(), src, static_cast<int64_t>(raw.size()));
  std::vector<float> out(static_cast<size_t>(n));
  loadFloats(raw.data(), dtype, 0, n, out.data());
  return out;
}

// The dtype the layer matrices (q/k/v/o, gate/up/down) are stored in on the backend. A backend
// computing in f32 (the CPU) keeps a checkpoint's bf16 matrices in bf16: the CPU linear widens
// them exactly (kernels/linear.h weightDtype), so the results are unchanged and a decode step
// streams half the bytes. Everything else (norms, biases, embeddings, lm_head) and every other
// case use the compute dtype. GGUF stores are read in the compute dtype (dequantised values need
// not be bf16).
DType chooseMatrixDtype(const WeightStore& store, const ModelConfig& c, DType compute) {
  if (compute != DType::kF32 || store.isGguf()) return compute;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layerPrefix(c, l);
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      const std::string name = p + m + ".weight";
      if (store.quantFormat(name)) continue;  // kept quantized, or dequantized to `compute`
      if (store.info(name).dtype != DType::kBF16) return compute;
    }
  }
  return DType::kBF16;
}

}  // namespace

TargetModel::TargetModel(const std::filesystem::path& dir, ops::Backend& backend, int32_t maxTokens,
                         std::vector<int32_t> tapLayers, int32_t maxLogitRows,
                         const ProgressCallback& onProgress)
    : config_(loadModelConfig(dir)),
      backend_(backend),
      dtype_(backend.computeDtype()),
      matrixDtype_(dtype_),
      maxTokens_(maxTokens),
      maxLogitRows_(maxLogitRows == 0 ? maxTokens : maxLogitRows),
      tapLayers_(std::move(tapLayers)) {
  ES_CHECK_ARG(!config_.isDraft(), "TargetModel", "architecture",
               architectureName(config_.architecture), "is a draft model, not a target");
  ES_CHECK_ARG(maxTokens > 0 && maxTokens <= (1 << 20), "TargetModel", "maxTokens", maxTokens,
               "must be in [1, 1048576]");
  ES_CHECK_ARG(maxLogitRows >= 0 && maxLogitRows <= maxTokens, "TargetModel", "maxLogitRows",
               maxLogitRows, "must be in [0, maxTokens = ", maxTokens, "] (0: maxTokens)");
  ES_CHECK_ARG(config_.head_dim == 64 || config_.head_dim == 128 || config_.head_dim == 256,
               "TargetModel", "head_dim", config_.head_dim, "must be 64, 128 or 256");
  for (int32_t t : tapLayers_) {
    ES_CHECK_ARG(t >= 0 && t < config_.num_hidden_layers, "TargetModel", "tapLayers", t,
                 "must name a layer in [0, ", config_.num_hidden_layers, ")");
  }
  loadWeights(dir, onProgress);
  allocateWorkspace();
  ES_LOG_INFO("target ", config_.summary(), " on ", backend_.name(), ": weights ", weightBytes_,
              " bytes, workspace ", workspaceBytes_, " bytes");
}

std::vector<kv::KvLayerShape> TargetModel::kvLayerShapes() const {
  std::vector<kv::KvLayerShape> shapes(
      static_cast<size_t>(config_.num_hidden_layers),
      kv::KvLayerShape{static_cast<int32_t>(config_.num_key_value_heads),
                       static_cast<int32_t>(config_.head_dim), 0, 0});
  // The marker stays 0: whether a window bounds storage depends on the cache's capacity (a
  // marker above it is an error, spec §1.1), which the plan knows and the model does not.
  for (size_t l = 0; l < shapes.size() && config_.sliding_window; ++l) {
    if (l < config_.layer_types.size() && config_.layer_types[l] == LayerType::kSlidingAttention) {
      shapes[l].slidingWindow = static_cast<int32_t>(*config_.sliding_window);
    }
  }
  return shapes;
}

void TargetModel::loadWeights(const std::filesystem::path& dir,
                              const ProgressCallback& onProgress) {
  const WeightStore store = WeightStore::open(dir, dtype_);  // an HF folder or a GGUF file
  // Every name, shape and dtype against the config first: one error listing every problem.
  checkWeights(store, config_, store.quantization());
  const ModelConfig& c = config_;
  auto one = [&](const std::string& name) {
    return uploadConcatenated(backend_, store, {name}, dtype_);
  };
  auto optional = [&](bool present, const std::string& name) {
    return present ? one(name) : Buffer();
  };
  matrixDtype_ = chooseMatrixDtype(store, c, dtype_);
  // The gate/up matrix interleaved where the intermediate size allows (swiglu.h), so decode rows
  // get SwiGLU in the gemv's epilogue; either layout gives the same logits bit for bit.
  const bool interleave = c.intermediate_size % kernel::kGateUpGroup == 0;
  gateUpLayout_ = interleave ? kernel::GateUpLayout::kInterleaved8 : kernel::GateUpLayout::kHalves;
  // Quantized where the checkpoint's matrices are and the backend runs them (linear_weight.h);
  // q | k | v of differing formats as parts, each quantized where the backend runs it.
  auto matrix = [&](const std::vector<std::string>& names, bool allowParts = false) {
    return loadLinear(backend_, store, names, matrixDtype_, allowParts);
  };
  // Progress counts layers; its clock starts before the embeddings and head load.
  const std::string task = "loading " + dir.filename().string();
  auto progress = [&](int64_t done) {
    if (onProgress) {
      onProgress({.task = task, .unit = "layers", .done = done, .total = c.num_hidden_layers});
    }
  };
  progress(0);
  embed_ = one("model.embed_tokens.weight");
  finalNorm_ = one("model.norm.weight");
  lmHead_ = c.tie_word_embeddings ? sharedLinear(embed_.data(), c.vocab_size, c.hidden_size, dtype_)
                                  : loadLinear(backend_, store, {"lm_head.weight"}, dtype_);
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    TargetLayerWeights& w = layers_[static_cast<size_t>(l)];
    const std::string p = layerPrefix(c, l);
    w.inputNorm = one(p + "input_layernorm.weight");
    w.postNorm = one(p + "post_attention_layernorm.weight");
    const std::string q = p + "self_attn.q_proj", k = p + "self_attn.k_proj",
                      v = p + "self_attn.v_proj";
    w.qkv = matrix({q + ".weight", k + ".weight", v + ".weight"}, /*allowParts=*/true);
    if (c.qkv_bias) {
      w.qkvBias =
          uploadConcatenated(backend_, store, {q + ".bias", k + ".bias", v + ".bias"}, dtype_);
    }
    w.qNorm = optional(c.qk_norm, p + "self_attn.q_norm.weight");
    w.kNorm = optional(c.qk_norm, p + "self_attn.k_norm.weight");
    w.o = matrix({p + "self_attn.o_proj.weight"});
    w.oBias = optional(c.o_bias, p + "self_attn.o_proj.bias");
    const std::string g = p + "mlp.gate_proj", u = p + "mlp.up_proj";
    w.gateUp = matrix({g + ".weight", u + ".weight"});
    if (c.mlp_bias) {
      w.gateUpBias = uploadConcatenated(backend_, store, {g + ".bias", u + ".bias"}, dtype_);
    }
    if (gateUpLayout_ == kernel::GateUpLayout::kInterleaved8) {
      interleaveGateUp(backend_, w.gateUp, c.intermediate_size);
      if (c.mlp_bias)
        w.gateUpBias =
            interleaveGateUp(backend_, w.gateUpBias, c.intermediate_size, dtype_size(dtype_));
    }
    w.down = matrix({p + "mlp.down_proj.weight"});
    w.downBias = optional(c.mlp_bias, p + "mlp.down_proj.bias");
    progress(l + 1);
  }
  weightBytes_ = embed_.bytes() + finalNorm_.bytes() + lmHead_.bytes();
  for (const TargetLayerWeights& w : layers_) {
    for (const Buffer* b : {&w.inputNorm, &w.postNorm, &w.qkvBias, &w.qNorm, &w.kNorm, &w.oBias,
                            &w.gateUpBias, &w.downBias}) {
      weightBytes_ += b->bytes();
    }
    for (const LinearWeight* m : {&w.qkv, &w.o, &w.gateUp, &w.down}) weightBytes_ += m->bytes();
  }

  maxPositions_ = static_cast<int32_t>(std::min<int64_t>(c.max_position_embeddings, kMaxPositions));
  const std::vector<float> table =
      buildRopeTable(c.rope, c.head_dim, c.max_position_embeddings, maxPositions_);
  ropeTable_ = backend_.allocate(static_cast<int64_t>(table.size()) * 4);
  backend_.copyFromHost(ropeTable_.data(), table.data(), ropeTable_.bytes());
}

void TargetModel::allocateWorkspace() {
  const ModelConfig& c = config_;
  const int64_t T = maxTokens_, es = dtype_size(dtype_);
  auto alloc = [&](Buffer& b, int64_t bytes) {
    b = backend_.allocate(bytes);
    workspaceBytes_ += bytes;
  };
  alloc(residual_, T * c.hidden_size * es);
  alloc(normed_, T * c.hidden_size * es);
  alloc(qkv_, T * (c.qDim() + 2 * c.kvDim()) * es);
  alloc(q_, T * c.qDim() * es);
  alloc(attn_, T * c.qDim() * es);
  alloc(tmp_, T * c.hidden_size * es);
  alloc(gateUp_, T * 2 * c.intermediate_size * es);
  alloc(act_, T * c.intermediate_size * es);
  alloc(rows_, int64_t{maxLogitRows_} * c.hidden_size * es);
  int64_t widestPart = 0;  // a q|k|v in parts runs each part into splitOut_ (runLinear)
  for (const TargetLayerWeights& w : layers_) {
    for (const LinearWeight& part : w.qkv.parts) widestPart = std::max(widestPart, part.n);
  }
  if (widestPart > 0) alloc(splitOut_, T * widestPart * es);
  alloc(logits_, int64_t{maxLogitRows_} * c.vocab_size * 4);
  if (!tapLayers_.empty())
    alloc(taps_, static_cast<int64_t>(tapLayers_.size()) * T * c.hidden_size * es);
  // Split-KV partials of decode/verify-shaped attention (rows <= 16 per sequence), for any batch
  // of this workspace and any context the RoPE table allows (the CPU reference needs none).
  if (backend_.space() == MemorySpace::kDevice) {
    const int64_t bytes = kernel::pagedAttentionWorkspaceBytes(
        maxTokens_, kernel::kSplitKvMaxQSeqLen, static_cast<int32_t>(c.num_attention_heads),
        static_cast<int32_t>(c.num_key_value_heads), static_cast<int32_t>(c.head_dim),
        maxPositions_, maxTokens_);
    if (bytes > 0) alloc(attnSplit_, bytes);
  }
}

void TargetModel::forwardOnBackend(const ForwardBatch& b, kv::KvCacheManager& cache) {
  const ModelConfig& c = config_;
  const int32_t T = static_cast<int32_t>(b.tokens.size());
  const int32_t B = static_cast<int32_t>(b.kvLengths.size());
  const int32_t R = static_cast<int32_t>(b.logitRows.size());
  ES_CHECK_ARG(T > 0 && T <= maxTokens_, "TargetModel::forward", "tokens.size()", T,
               "must be in [1, maxTokens = ", maxTokens_, "]");
  ES_CHECK_ARG(b.positions.size() == b.tokens.size() && b.tokenToSequence.size() == b.tokens.size(),
               "TargetModel::forward", "positions/tokenToSequence size", b.positions.size(),
               "must equal tokens.size() = ", T);
  ES_CHECK_ARG(
      B > 0 && B <= cache.maxBatchSize() && b.cuQSeqLens.size() == static_cast<size_t>(B) + 1,
      "TargetModel::forward", "kvLengths.size()", B,
      "must be in [1, maxBatch] with cuQSeqLens of B + 1 entries");
  ES_CHECK_ARG(b.cuQSeqLens.front() == 0 && b.cuQSeqLens.back() == T, "TargetModel::forward",
               "cuQSeqLens", b.cuQSeqLens.back(), "must run from 0 to tokens.size() = ", T);
  for (int32_t t : b.tokens) {
    ES_CHECK_ARG(t >= 0 && t < c.vocab_size, "TargetModel::forward", "token", t,
                 "must be in [0, vocab_size = ", c.vocab_size, ")");
  }
  for (int32_t p : b.positions) {
    ES_CHECK_ARG(p < maxPositions_ && p < cache.capacity(), "TargetModel::forward", "position", p,
                 "must be below the RoPE table (", maxPositions_, ") and the KV capacity (",
                 cache.capacity(), ")");
  }
  ES_CHECK_ARG(R <= maxLogitRows_, "TargetModel::forward", "logitRows.size()", R,
               "must be <= maxLogitRows = ", maxLogitRows_);
  for (int32_t r : b.logitRows) {
    ES_CHECK_ARG(r >= 0 && r < T, "TargetModel::forward", "logitRows", r, "must be in [0, ", T,
                 ")");
  }
  int32_t maxQ = 0;
  for (int32_t s = 0; s < B; ++s)
    maxQ = std::max(
        maxQ, b.cuQSeqLens[static_cast<size_t>(s) + 1] - b.cuQSeqLens[static_cast<size_t>(s)]);
  if (cache.swaPages()) {
    // Every key a sliding row can see, (position - W, position], must be mapped in the window
    // table: unmapped pages are skipped by the kernels, which would silently drop keys.
    const int64_t W = cache.plan().slidingWindow;
    for (int32_t s = 0; s < B; ++s) {
      int64_t lo = INT64_MAX, hi = -1;
      for (int32_t r = b.cuQSeqLens[static_cast<size_t>(s)];
           r < b.cuQSeqLens[static_cast<size_t>(s) + 1]; ++r) {
        const int32_t p = b.positions[static_cast<size_t>(r)];
        if (p < 0) continue;
        lo = std::min<int64_t>(lo, std::max<int64_t>(0, p - W + 1));
        hi = std::max<int64_t>(hi, std::min<int64_t>(p, b.kvLengths[static_cast<size_t>(s)] - 1));
      }
      if (hi >= lo) cache.checkWindowMapped(s, lo, hi + 1);
    }
  }
  const int32_t maskWords = (maxQ + 31) / 32;
  if (b.mask == kernel::AttentionMask::kPackedTree) {
    ES_CHECK_ARG(b.packedMask.size() == static_cast<size_t>(T) * maskWords, "TargetModel::forward",
                 "packedMask.size()", b.packedMask.size(),
                 "must be tokens * ceil(maxQ/32) = ", static_cast<int64_t>(T) * maskWords);
  }

  // Metadata to the backend: tokens | positions | owners | cuQ | kvLens | logitRows | mask.
  std::vector<int32_t> meta;
  meta.reserve(static_cast<size_t>(3 * T + 2 * B + 1 + R) + b.packedMask.size());
  auto append = [&](const std::vector<int32_t>& v) {
    const size_t at = meta.size();
    meta.insert(meta.end(), v.begin(), v.end());
    return at;
  };
  const size_t oTokens = append(b.tokens), oPos = append(b.positions),
               oOwner = append(b.tokenToSequence), oCuQ = append(b.cuQSeqLens),
               oKvLen = append(b.kvLengths), oRows = append(b.logitRows),
               oMask = append(b.packedMask);
  if (meta_.bytes() < static_cast<int64_t>(meta.size() * 4))
    meta_ = backend_.allocate(static_cast<int64_t>(meta.size()) * 4);
  backend_.copyFromHost(meta_.data(), meta.data(), static_cast<int64_t>(meta.size()) * 4);
  const int32_t* dmeta = meta_.as<int32_t>();

  DeviceForwardBatch d;
  d.tokens = dmeta + oTokens;
  d.positions = dmeta + oPos;
  d.tokenToSequence = dmeta + oOwner;
  d.cuQSeqLens = dmeta + oCuQ;
  d.kvLengths = dmeta + oKvLen;
  d.logitRows = dmeta + oRows;
  d.packedMask = b.mask == kernel::AttentionMask::kPackedTree ? dmeta + oMask : nullptr;
  d.numTokens = T;
  d.batchSize = B;
  d.maxQSeqLen = maxQ;
  d.numLogitRows = R;
  d.mask = b.mask;
  forwardDevice(d, cache);
  backend_.synchronize();
}

ForwardResult TargetModel::forward(const ForwardBatch& b, kv::KvCacheManager& cache) {
  forwardOnBackend(b, cache);
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t R = static_cast<int64_t>(b.logitRows.size());
  ForwardResult result;
  if (R > 0) {
    result.logits = toHostFloats(backend_, logits_.data(), DType::kF32, R * config_.vocab_size);
  }
  if (!tapLayers_.empty()) {
    result.taps = toHostFloats(backend_, taps_.data(), dtype_,
                               static_cast<int64_t>(tapLayers_.size()) * T * config_.hidden_size);
  }
  return result;
}

std::pair<const int32_t*, const int32_t*> TargetModel::syncPageTable(kv::KvCacheManager& cache) {
  const int32_t* base = pageTable_.sync(backend_, cache.basePageTable());
  kv::PageTable* window = cache.swaPageTable();
  return {base, window ? swaPageTable_.sync(backend_, *window) : nullptr};
}

void TargetModel::forwardDevice(const DeviceForwardBatch& b, kv::KvCacheManager& cache) {
  constexpr const char* kWhere = "TargetModel::forwardDevice";
  const ModelConfig& c = config_;
  const int32_t T = b.numTokens, B = b.batchSize, R = b.numLogitRows, maxQ = b.maxQSeqLen;
  ES_CHECK_ARG(T > 0 && T <= maxTokens_, kWhere, "numTokens", T,
               "must be in [1, maxTokens = ", maxTokens_, "]");
  ES_CHECK_ARG(B > 0 && B <= cache.maxBatchSize(), kWhere, "batchSize", B,
               "must be in [1, cache maxBatchSize = ", cache.maxBatchSize(), "]");
  ES_CHECK_ARG(R >= 0 && R <= maxLogitRows_, kWhere, "numLogitRows", R,
               "must be in [0, maxLogitRows = ", maxLogitRows_, "]");
  ES_CHECK_ARG(maxQ > 0 && maxQ <= T, kWhere, "maxQSeqLen", maxQ, "must be in [1, numTokens = ", T,
               "]");
  ES_CHECK_ARG(b.tokens && b.positions && b.tokenToSequence && b.cuQSeqLens && b.kvLengths, kWhere,
               "tokens/positions/tokenToSequence/cuQSeqLens/kvLengths", "null", "must not be null");
  ES_CHECK_ARG(R == 0 || b.logitRows, kWhere, "logitRows", "null",
               "must not be null when numLogitRows > 0");
  ES_CHECK_ARG(b.mask != kernel::AttentionMask::kPackedTree || b.packedMask, kWhere, "packedMask",
               "null", "must not be null for a tree mask");
  ES_CHECK_ARG(cache.space() == backend_.space(), kWhere, "cache memory space",
               static_cast<int>(cache.space()), "must be the backend's");
  kv::PageTable& table = cache.basePageTable();
  const kv::KvCachePlan& plan = cache.plan();
  ES_CHECK_ARG(static_cast<int64_t>(plan.base.size()) == c.num_hidden_layers, kWhere,
               "cache base layers", plan.base.size(),
               "must equal num_hidden_layers = ", c.num_hidden_layers);
  for (size_t l = 0; l < plan.base.size(); ++l) {
    // A reduced layer's pool holds only its window: the layer must attend within that window.
    const bool sliding =
        l < c.layer_types.size() && c.layer_types[l] == LayerType::kSlidingAttention;
    ES_CHECK_ARG(
        !plan.base[l].reduced || (sliding && c.sliding_window.value_or(0) == plan.slidingWindow),
        kWhere, "cache layer " + std::to_string(l) + " window", plan.base[l].capacity,
        "is bounded, but the model's layer ", sliding ? "slides over " : "is full attention",
        sliding ? std::to_string(c.sliding_window.value_or(0)) : std::string(),
        " (build the cache from kvLayerShapes)");
  }
  // Both copies are current after this (a no-op when syncPageTable just ran).
  const auto [pageTable, windowTable] = syncPageTable(cache);

  const int32_t H = static_cast<int32_t>(c.hidden_size), D = static_cast<int32_t>(c.head_dim);
  const int32_t Hq = static_cast<int32_t>(c.num_attention_heads);
  const int32_t Hkv = static_cast<int32_t>(c.num_key_value_heads);
  const int32_t I = static_cast<int32_t>(c.intermediate_size);
  const int32_t qkvDim = (Hq + 2 * Hkv) * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t es = dtype_size(dtype_);

  // A layer matrix or the lm_head (dense in its own dtype, or quantized: LinearWeight::fill).
  auto linearParams = [&](const void* x, const LinearWeight& w, const Buffer& bias, void* y,
                          int32_t m, int32_t n, int32_t k, DType outDtype) {
    kernel::LinearParams p{.x = x,
                           .bias = bias.bytes() ? bias.data() : nullptr,
                           .y = y,
                           .m = m,
                           .n = n,
                           .k = k,
                           .dtype = dtype_,
                           .outDtype = outDtype};
    if (w.parts.empty()) w.fill(p);  // a W in parts is filled part by part (runLinear)
    return p;
  };
  auto norm = [&](const void* x, void* residual, const Buffer& w, void* out) {
    backend_.rmsNorm({.x = x,
                      .residual = residual,
                      .weight = w.data(),
                      .out = out,
                      .rows = T,
                      .hiddenSize = H,
                      .eps = eps,
                      .dtype = dtype_});
  };
  auto saveTap = [&](int32_t layer) {
    for (size_t i = 0; i < tapLayers_.size(); ++i) {
      if (tapLayers_[i] == layer) {
        backend_.copy(taps_.as<uint8_t>() + static_cast<int64_t>(i) * T * H * es, residual_.data(),
                      static_cast<int64_t>(T) * H * es);
      }
    }
  };

  backend_.embedding({.tokens = b.tokens,
                      .table = embed_.data(),
                      .out = residual_.data(),
                      .numTokens = T,
                      .vocabSize = static_cast<int32_t>(c.vocab_size),
                      .hiddenSize = H,
                      .dtype = dtype_});

  // A single-sequence cache's decode and verify rows (<= 16) may have each RMSNorm fused into
  // the linear layer after it and each residual add into the one before it (linear.h:
  // normWeight, accumulate): the o and down projections add into residual_ and
  // the qkv and gate/up projections normalize it as they read it, six kernels a layer instead of
  // eight. The fused norm rounds x * w where the RMSNorm kernel rounds x * s * w, so only a cache
  // of one sequence takes it: its decode rows and verify rows then round alike and greedy
  // speculation still equals plain decoding bit for bit, while a batch's plain rows (gemv) and
  // verify rows (over 16: cuBLASLt) keep rounding alike up to summation order.
  const bool fusedNorms = cache.maxBatchSize() == 1 && backend_.fusesRowNorms(T);
  void* const blockOut = fusedNorms ? residual_.data() : tmp_.data();  // o and down outputs
  auto normedInput = [&](kernel::LinearParams& p, const Buffer& normWeight) {
    if (!fusedNorms) return;
    p.x = residual_.data();
    p.normWeight = normWeight.data();
    p.normEps = eps;
  };

  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    const TargetLayerWeights& w = layers_[static_cast<size_t>(l)];
    // residual += previous layer's MLP output, then the input norm (both fused into the linear
    // layers with fusedNorms).
    if (!fusedNorms) {
      norm(l == 0 ? residual_.data() : tmp_.data(), l == 0 ? nullptr : residual_.data(),
           w.inputNorm, normed_.data());
    }
    if (l > 0) saveTap(l - 1);
    kernel::LinearParams qkv =
        linearParams(normed_.data(), w.qkv, w.qkvBias, qkv_.data(), T, qkvDim, H, dtype_);
    normedInput(qkv, w.inputNorm);
    runLinear(backend_, w.qkv, qkv, splitOut_.data());

    const TensorView pool = cache.basePool(l);
    // Reduced layers read and write the bounded pool through the window table, whose entries
    // below each slot's window are -1: K/V writes skip them and the attention loops start at the
    // window's first key (pos - W + 1), so they are never read (paged_attention.h).
    const int32_t* layerTable = plan.base[static_cast<size_t>(l)].reduced ? windowTable : pageTable;
    const kernel::QkvRopeKvWriteParams rope{
        .qkv = qkv_.data(),
        .qNormWeight = w.qNorm.bytes() ? w.qNorm.data() : nullptr,
        .kNormWeight = w.kNorm.bytes() ? w.kNorm.data() : nullptr,
        .normEps = eps,
        .cosSin = ropeTable_.as<float>(),
        .maxPositions = maxPositions_,
        .positions = b.positions,
        .tokenToSequence = b.tokenToSequence,
        .pageTable = layerTable,
        .kvPool = pool.data,
        .qOut = q_.data(),
        .numTokens = T,
        .batchSize = cache.maxBatchSize(),
        .numQHeads = Hq,
        .numKVHeads = Hkv,
        .headDim = D,
        .rotaryDim = D,
        .numPages = static_cast<int32_t>(pool.shape[1]),
        .maxPagesPerSeq = table.maxPagesPerSeq(),
        .dtype = dtype_};
    backend_.qkvRopeKvWrite(rope);

    const bool sliding = !c.layer_types.empty() &&
                         c.layer_types[static_cast<size_t>(l)] == LayerType::kSlidingAttention;
    kernel::PagedAttentionParams att{
        .query = {.q = q_.data(),
                  .out = attn_.data(),
                  .cuQSeqLens = b.cuQSeqLens,
                  .qPositions = b.positions,
                  .totalQ = T,
                  .maxQSeqLen = maxQ,
                  .numQHeads = Hq},
        .kv = {.pool = pool.data,
               .pageTable = layerTable,
               .numPages = rope.numPages,
               .maxPagesPerSeq = rope.maxPagesPerSeq,
               .numKVHeads = Hkv},
        .kvLengths = b.kvLengths,
        .mask = b.mask,
        .packedMask = b.mask == kernel::AttentionMask::kPackedTree ? b.packedMask : nullptr,
        .slidingWindow = sliding ? static_cast<int32_t>(c.sliding_window.value_or(0)) : 0,
        .batchSize = B,
        .headDim = D,
        .scale = 1.0f / std::sqrt(static_cast<float>(D)),
        .dtype = dtype_,
        .maxKvLength = std::min(cache.capacity(), maxPositions_),
        .workspace = attnSplit_.bytes() ? attnSplit_.data() : nullptr,
        .workspaceBytes = attnSplit_.bytes()};
    kernel::LinearParams o =
        linearParams(attn_.data(), w.o, w.oBias, blockOut, T, H, Hq * D, dtype_);
    o.accumulate = fusedNorms;
    att.nextFillsSms = backend_.linearFillsSms(o);  // the o projection comes right after
    backend_.pagedAttention(att);
    backend_.linear(o);
    if (!fusedNorms) norm(tmp_.data(), residual_.data(), w.postNorm, normed_.data());
    // One kernel at decode rows (gate_up_swiglu.h).
    kernel::GateUpSwigluParams mlp{.linear = linearParams(normed_.data(), w.gateUp, w.gateUpBias,
                                                          gateUp_.data(), T, 2 * I, H, dtype_),
                                   .out = act_.data(),
                                   .layout = gateUpLayout_};
    normedInput(mlp.linear, w.postNorm);
    backend_.gateUpSwiglu(mlp);
    kernel::LinearParams down =
        linearParams(act_.data(), w.down, w.downBias, blockOut, T, H, I, dtype_);
    down.accumulate = fusedNorms;
    backend_.linear(down);
  }
  if (fusedNorms)
    norm(residual_.data(), nullptr, finalNorm_, normed_.data());
  else
    norm(tmp_.data(), residual_.data(), finalNorm_, normed_.data());
  saveTap(static_cast<int32_t>(c.num_hidden_layers) - 1);

  if (R > 0) {
    // Row gather: the rows are the "vocabulary".
    backend_.embedding({.tokens = b.logitRows,
                        .table = normed_.data(),
                        .out = rows_.data(),
                        .numTokens = R,
                        .vocabSize = T,
                        .hiddenSize = H,
                        .dtype = dtype_});
    backend_.linear(linearParams(rows_.data(), lmHead_, Buffer(), logits_.data(), R,
                                 static_cast<int32_t>(c.vocab_size), H, DType::kF32));
  }
}

}  // namespace es::model
