#include "model/dflash_draft.h"

#include <algorithm>
#include <cmath>
#include <sstream>
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

constexpr const char* kWhere = "DFlashDraft";

std::string listOf(const std::vector<int32_t>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << ']';
  return os.str();
}

// Host floats -> backend buffer of `dtype` (the compute dtype).
void uploadFloats(ops::Backend& backend, const float* src, int64_t n, DType dtype, void* dst) {
  std::vector<uint8_t> raw(static_cast<size_t>(n * dtype_size(dtype)));
  storeFloats(src, dtype, 0, n, raw.data());
  backend.copyFromHost(dst, raw.data(), static_cast<int64_t>(raw.size()));
}

// The paged DFlash KV write for the cache element type `T` (f32 on CPU, bf16/fp16 on CUDA).
template <typename T>
void kvUpdate(ops::Backend& backend, const void* k, const void* v, void* pool, const float* cosSin,
              const int32_t* positions, const int32_t* owners, const int32_t* pageTable,
              int32_t numTokens, int32_t batch, int32_t hkv, int32_t d, int32_t numPages,
              int32_t maxPagesPerSeq) {
  backend.dflashKvUpdate(
      kernel::DFlashTargetKVCacheUpdateParams<T>{.kDelta = static_cast<const T*>(k),
                                                 .vDelta = static_cast<const T*>(v),
                                                 .kvCache = static_cast<T*>(pool),
                                                 .tokenAlignedCosSin = cosSin,
                                                 .deltaPositions = positions,
                                                 .deltaTokenToSequence = owners,
                                                 .pageTable = pageTable,
                                                 .numDeltaTokens = numTokens,
                                                 .batchSize = batch,
                                                 .numKVHeads = hkv,
                                                 .headDim = d,
                                                 .rotaryDim = d,
                                                 .numPages = numPages,
                                                 .maxPagesPerSeq = maxPagesPerSeq});
}

}  // namespace

std::vector<int32_t> DFlashDraft::requiredTargetTaps(const std::filesystem::path& draftDir,
                                                     const ModelConfig& targetConfig) {
  const ModelConfig c = loadModelConfig(draftDir);
  ES_CHECK_ARG(c.isDraft(), "DFlashDraft::requiredTargetTaps", "architecture",
               architectureName(c.architecture), "must be DFlashDraftModel (", c.source, ")");
  std::vector<int32_t> out;
  for (int64_t id : c.resolvedTargetLayerIds(targetConfig.num_hidden_layers)) {
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

int32_t DFlashDraft::blockSizeOf(const std::filesystem::path& draftDir) {
  const ModelConfig c = loadModelConfig(draftDir);
  ES_CHECK_ARG(c.isDraft(), "DFlashDraft::blockSizeOf", "architecture",
               architectureName(c.architecture), "must be DFlashDraftModel (", c.source, ")");
  return static_cast<int32_t>(c.dflash->block_size);
}

DFlashDraft::DFlashDraft(const std::filesystem::path& dir, ops::Backend& backend,
                         const TargetModel& target, int32_t maxContextTokens, int32_t maxBatch)
    : config_(loadModelConfig(dir)),
      targetSource_(target.config().source),
      backend_(backend),
      dtype_(backend.computeDtype()),
      maxContextTokens_(maxContextTokens),
      maxBatch_(maxBatch) {
  ES_CHECK_ARG(maxContextTokens > 0 && maxContextTokens <= (1 << 20), kWhere, "maxContextTokens",
               maxContextTokens, "must be in [1, 1048576]");
  ES_CHECK_ARG(maxBatch > 0 && maxBatch <= 4096, kWhere, "maxBatch", maxBatch,
               "must be in [1, 4096]");
  checkPair(target, dir);
  loadWeights(dir, target);
  allocateWorkspace();
  ES_LOG_INFO("draft ", config_.summary(), " on ", backend_.name(), ": weights ", weightBytes_,
              " bytes, workspace ", workspaceBytes_, " bytes");
}

// Pair checks that need only the two configs and the target; the fc width is checked against
// the tensor in loadWeights.
void DFlashDraft::checkPair(const TargetModel& target, const std::filesystem::path& dir) {
  const ModelConfig& d = config_;
  const ModelConfig& t = target.config();
  const std::string pair = " (draft " + d.source + ", target " + t.source + ")";
  if (!d.isDraft()) {
    ES_THROW(InvalidArgument, kWhere,
             ": argument 'architecture' = ", architectureName(d.architecture),
             " must be DFlashDraftModel: ", dir.string(), " is not a DFlash draft", pair);
  }
  if (d.hidden_size != t.hidden_size) {
    ES_THROW(InvalidArgument, kWhere, ": the draft's 'hidden_size' = ", d.hidden_size,
             " does not match the target's 'hidden_size' = ", t.hidden_size,
             "; this draft was trained for another target", pair);
  }
  const DFlashConfig& df = *d.dflash;
  if (df.num_target_layers && *df.num_target_layers != t.num_hidden_layers) {
    ES_THROW(InvalidArgument, kWhere, ": the draft's 'num_target_layers' = ", *df.num_target_layers,
             " does not match the target's 'num_hidden_layers' = ", t.num_hidden_layers, pair);
  }
  if (df.target_layer_ids_explicit) {
    for (int64_t id : df.target_layer_ids) {
      if (id < 0 || id >= t.num_hidden_layers) {
        ES_THROW(InvalidArgument, kWhere,
                 ": the draft's 'dflash_config.target_layer_ids' taps layer ", id,
                 ", outside the target's layers [0, ", t.num_hidden_layers, ")", pair);
      }
    }
  }
  for (int64_t id : d.resolvedTargetLayerIds(t.num_hidden_layers))
    taps_.push_back(static_cast<int32_t>(id));
  if (target.tapLayers() != taps_) {
    ES_THROW(InvalidArgument, kWhere,
             ": the target was built with 'tapLayers' = ", listOf(target.tapLayers()),
             " but the draft's fc reads target layers ", listOf(taps_),
             " in that order; build the TargetModel with DFlashDraft::requiredTargetTaps", pair);
  }
  ES_CHECK_ARG(d.head_dim == 64 || d.head_dim == 128 || d.head_dim == 256, kWhere, "head_dim",
               d.head_dim, "must be 64, 128 or 256 (", d.source, ")");
  ES_CHECK_ARG(d.num_attention_heads % d.num_key_value_heads == 0, kWhere, "num_attention_heads",
               d.num_attention_heads,
               "must be a multiple of num_key_value_heads = ", d.num_key_value_heads, " (",
               d.source, ")");
  for (LayerType lt : d.layer_types) {
    // Sliding draft layers (newer drafts) have engine-dependent causality; not supported yet.
    ES_CHECK_ARG(lt == LayerType::kFullAttention, kWhere, "layer_types", "sliding_attention",
                 "is not supported for a DFlash draft (", d.source, ")");
  }
  blockSize_ = static_cast<int32_t>(df.block_size);
  ES_CHECK_ARG(int64_t{maxBatch_} * blockSize_ <= (1 << 20), kWhere, "maxBatch", maxBatch_,
               "times block_size = ", blockSize_, " must be <= 1048576");
  // The draft reads the target's embeddings and head, so it must speak the same vocabulary: a
  // draft trained for another tokenizer would propose tokens that mean something else.
  ES_CHECK_ARG(d.vocab_size == t.vocab_size, kWhere, "vocab_size", d.vocab_size,
               "must equal the target's vocab_size = ", t.vocab_size, pair);
  vocab_ = static_cast<int32_t>(t.vocab_size);
}

void DFlashDraft::loadWeights(const std::filesystem::path& dir, const TargetModel& target) {
  const ModelConfig& c = config_;
  const WeightStore store = WeightStore::openFolder(dir);
  const std::string pair = " (draft " + c.source + ", target " + targetSource_ + ")";
  const int64_t H = c.hidden_size, n = static_cast<int64_t>(taps_.size());
  // fc.weight is the one tensor whose shape ties the draft to its taps: say so before the
  // generic check reports a bare shape mismatch.
  if (store.contains("fc.weight")) {
    const std::vector<int64_t> want{H, n * H};
    const TensorInfo& fc = store.info("fc.weight");
    const std::vector<int64_t> got(fc.shape.begin(), fc.shape.end());
    if (got != want) {
      std::ostringstream g;
      for (size_t i = 0; i < got.size(); ++i) g << (i ? ", " : "") << got[i];
      ES_THROW(FormatError, kWhere, ": the draft's 'fc.weight' has shape [", g.str(),
               "] but must be [hidden, taps × hidden] = [", H, ", ", n * H, "] for ", n,
               " tapped target layers ", listOf(taps_), pair);
    }
  }
  const WeightCheckReport report = checkWeights(store, c, store.quantization());
  hasMaskEmbedding_ = report.has_mask_embedding;
  maskTokenId_ = static_cast<int32_t>(c.dflash->mask_token_id);
  if (!hasMaskEmbedding_ && (c.dflash->mask_token_id < 0 || c.dflash->mask_token_id >= vocab_)) {
    ES_THROW(InvalidArgument, kWhere,
             ": the draft's 'dflash_config.mask_token_id' = ", c.dflash->mask_token_id,
             " is outside the target's embedding table ('vocab_size' = ", vocab_,
             ") and the draft ships no 'mask_embedding'", pair);
  }

  auto one = [&](const std::string& name) {
    return uploadConcatenated(backend_, store, {name}, dtype_);
  };
  auto optional = [&](bool present, const std::string& name) {
    return present ? one(name) : Buffer();
  };
  // The draft's linears: dense unless its checkpoint ships them quantized (linear_weight.h).
  auto matrix = [&](const std::vector<std::string>& names) {
    return loadLinear(backend_, store, names, dtype_);
  };
  fc_ = matrix({"fc.weight"});
  hiddenNorm_ = one("hidden_norm.weight");
  finalNorm_ = one("norm.weight");
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DraftLayerWeights& w = layers_[static_cast<size_t>(l)];
    const std::string p = layerPrefix(c, l);
    w.inputNorm = one(p + "input_layernorm.weight");
    w.postNorm = one(p + "post_attention_layernorm.weight");
    const std::string q = p + "self_attn.q_proj", k = p + "self_attn.k_proj",
                      v = p + "self_attn.v_proj";
    w.qkv = matrix({q + ".weight", k + ".weight", v + ".weight"});
    if (c.qkv_bias)
      w.qkvBias =
          uploadConcatenated(backend_, store, {q + ".bias", k + ".bias", v + ".bias"}, dtype_);
    w.qNorm = one(p + "self_attn.q_norm.weight");
    w.kNorm = one(p + "self_attn.k_norm.weight");
    w.o = matrix({p + "self_attn.o_proj.weight"});
    w.oBias = optional(c.o_bias, p + "self_attn.o_proj.bias");
    const std::string g = p + "mlp.gate_proj", u = p + "mlp.up_proj";
    w.gateUp = matrix({g + ".weight", u + ".weight"});
    if (c.mlp_bias)
      w.gateUpBias = uploadConcatenated(backend_, store, {g + ".bias", u + ".bias"}, dtype_);
    w.down = matrix({p + "mlp.down_proj.weight"});
    w.downBias = optional(c.mlp_bias, p + "mlp.down_proj.bias");
  }
  weightBytes_ = fc_.bytes() + hiddenNorm_.bytes() + finalNorm_.bytes();
  for (const DraftLayerWeights& w : layers_) {
    for (const Buffer* b : {&w.inputNorm, &w.postNorm, &w.qkvBias, &w.qNorm, &w.kNorm, &w.oBias,
                            &w.gateUpBias, &w.downBias}) {
      weightBytes_ += b->bytes();
    }
    for (const LinearWeight* m : {&w.qkv, &w.o, &w.gateUp, &w.down}) weightBytes_ += m->bytes();
  }
  targetEmbed_ = target.embeddingTable();
  targetLmHead_ = &target.lmHead();

  // The draft's own rotary embedding (z-lab builds rotary_emb from the draft config).
  maxPositions_ = static_cast<int32_t>(std::min<int64_t>(c.max_position_embeddings, kMaxPositions));
  const std::vector<float> table =
      buildRopeTable(c.rope, c.head_dim, c.max_position_embeddings, maxPositions_);
  ropeTable_ = backend_.allocate(static_cast<int64_t>(table.size()) * 4);
  backend_.copyFromHost(ropeTable_.data(), table.data(), ropeTable_.bytes());

  // Block embedding source: rows [0, maxBatch) take the anchors' embeddings per call, row
  // maxBatch holds the mask embedding (the draft's mask_embedding, or the target's row
  // mask_token_id, untouched: spec §5 says not to zero it).
  const int64_t es = dtype_size(dtype_);
  blockRows_ = backend_.allocate((int64_t{maxBatch_} + 1) * H * es);
  void* maskRow = blockRows_.as<uint8_t>() + int64_t{maxBatch_} * H * es;
  if (hasMaskEmbedding_) {
    uploadTensor(backend_, store, "mask_embedding", dtype_, maskRow);
  } else {
    backend_.copy(maskRow,
                  static_cast<const uint8_t*>(targetEmbed_) + int64_t{maskTokenId_} * H * es,
                  H * es);
  }
  weightBytes_ += H * es;
}

void DFlashDraft::allocateWorkspace() {
  const ModelConfig& c = config_;
  const int64_t es = dtype_size(dtype_);
  const int64_t Tc = maxContextTokens_, Tb = int64_t{maxBatch_} * blockSize_;
  const int64_t H = c.hidden_size, n = static_cast<int64_t>(taps_.size());
  auto alloc = [&](Buffer& b, int64_t bytes) {
    b = backend_.allocate(bytes);
    workspaceBytes_ += bytes;
  };
  alloc(concat_, Tc * n * H * es);
  alloc(ctx_, Tc * H * es);
  alloc(kDelta_, Tc * c.kvDim() * es);
  alloc(vDelta_, Tc * c.kvDim() * es);
  alloc(cosSin_, Tc * c.head_dim * 4);
  alloc(residual_, Tb * H * es);
  alloc(normed_, Tb * H * es);
  alloc(qkv_, Tb * (c.qDim() + 2 * c.kvDim()) * es);
  alloc(q_, Tb * c.qDim() * es);
  alloc(attn_, Tb * c.qDim() * es);
  alloc(tmp_, Tb * H * es);
  alloc(gateUp_, Tb * 2 * c.intermediate_size * es);
  alloc(act_, Tb * c.intermediate_size * es);
  alloc(logits_, Tb * vocab_ * 4);
  // Split-KV partials of the block attention (BS <= 16 rows per sequence over the context).
  if (backend_.space() == MemorySpace::kDevice && blockSize_ <= kernel::kSplitKvMaxQSeqLen) {
    const int64_t bytes = kernel::pagedAttentionWorkspaceBytes(
        maxBatch_, blockSize_, static_cast<int32_t>(config_.num_attention_heads),
        static_cast<int32_t>(config_.num_key_value_heads), static_cast<int32_t>(config_.head_dim),
        maxPositions_);
    if (bytes > 0) alloc(attnSplit_, bytes);
  }

  // Constant block metadata: owners | cuQ | gather (see the header).
  std::vector<int32_t> k;
  k.reserve(static_cast<size_t>(2 * Tb + maxBatch_ + 1));
  for (int64_t r = 0; r < Tb; ++r) k.push_back(static_cast<int32_t>(r / blockSize_));
  for (int64_t b = 0; b <= maxBatch_; ++b) k.push_back(static_cast<int32_t>(b * blockSize_));
  for (int64_t r = 0; r < Tb; ++r)
    k.push_back(r % blockSize_ == 0 ? static_cast<int32_t>(r / blockSize_) : maxBatch_);
  alloc(blockConst_, static_cast<int64_t>(k.size()) * 4);
  backend_.copyFromHost(blockConst_.data(), k.data(), blockConst_.bytes());
}

std::vector<kv::KvLayerShape> DFlashDraft::kvLayerShapes() const {
  return std::vector<kv::KvLayerShape>(static_cast<size_t>(config_.num_hidden_layers),
                                       {static_cast<int32_t>(config_.num_key_value_heads),
                                        static_cast<int32_t>(config_.head_dim), 0});
}

void DFlashDraft::checkCache(const kv::KvCacheManager& cache, const char* where) const {
  const kv::KvCachePlan& plan = cache.plan();
  ES_CHECK_ARG(plan.draft.size() == layers_.size(), where, "cache draft layers", plan.draft.size(),
               "must equal the draft's num_hidden_layers = ", layers_.size(),
               " (KvCacheConfig::draftLayers = DFlashDraft::kvLayerShapes())");
  for (const kv::KvLayerPlan& l : plan.draft) {
    ES_CHECK_ARG(
        l.numKvHeads == config_.num_key_value_heads && l.headDim == config_.head_dim && !l.reduced,
        where, "cache draft layer shape", l.numKvHeads, "x", l.headDim,
        " must be the draft's full-capacity [", config_.num_key_value_heads, " heads, dim ",
        config_.head_dim, "]");
  }
  ES_CHECK_ARG(plan.dtype == dtype_, where, "cache dtype", dtype_name(plan.dtype),
               "must be the backend's compute dtype ", dtype_name(dtype_));
  ES_CHECK_ARG(cache.space() == backend_.space(), where, "cache memory space",
               static_cast<int>(cache.space()), "must be the backend's");
}

const int32_t* DFlashDraft::syncPageTable(kv::KvCacheManager& cache) {
  checkCache(cache, "DFlashDraft::syncPageTable");
  return pageTable_.sync(backend_, cache.draftPageTable());
}

void DFlashDraft::appendContext(const DraftContextDelta& delta, kv::KvCacheManager& cache) {
  constexpr const char* where = "DFlashDraft::appendContext";
  const ModelConfig& c = config_;
  const int32_t T = delta.numTokens;
  ES_CHECK_ARG(T >= 0 && T <= maxContextTokens_, where, "numTokens", T,
               "must be in [0, maxContextTokens = ", maxContextTokens_, "]");
  if (T == 0) return;
  ES_CHECK_ARG(delta.taps && delta.positions && delta.tokenToSequence, where,
               "taps/positions/tokenToSequence", "null", "must not be null");
  checkCache(cache, where);
  const int32_t* pageTable = pageTable_.sync(backend_, cache.draftPageTable());
  const int32_t H = static_cast<int32_t>(c.hidden_size), D = static_cast<int32_t>(c.head_dim);
  const int32_t Hq = static_cast<int32_t>(c.num_attention_heads),
                Hkv = static_cast<int32_t>(c.num_key_value_heads);
  const int32_t n = static_cast<int32_t>(taps_.size());
  const int64_t es = dtype_size(dtype_);
  const float eps = static_cast<float>(c.rms_norm_eps);

  // concat [T, n·H] <- taps [n, T, H] (tap i into column block i: one strided copy per tap);
  // ctx = hidden_norm(fc(concat)) [T, H] (fp32 accumulation in the linear op, one rounding).
  for (int32_t i = 0; i < n; ++i) {
    backend_.copy2D(concat_.as<uint8_t>() + int64_t{i} * H * es, int64_t{n} * H * es,
                    static_cast<const uint8_t*>(delta.taps) + int64_t{i} * T * H * es,
                    int64_t{H} * es, int64_t{H} * es, T);
  }
  kernel::LinearParams fc{.x = concat_.data(),
                          .y = ctx_.data(),
                          .m = T,
                          .n = H,
                          .k = n * H,
                          .dtype = dtype_,
                          .outDtype = dtype_};
  fc_.fill(fc);
  backend_.linear(fc);
  backend_.rmsNorm({.x = ctx_.data(),
                    .weight = hiddenNorm_.data(),
                    .out = ctx_.data(),
                    .rows = T,
                    .hiddenSize = H,
                    .eps = eps,
                    .dtype = dtype_});
  // Token-aligned cos/sin [T, D]: rows of the RoPE table by position (padding -> zeros).
  backend_.embedding({.tokens = delta.positions,
                      .table = ropeTable_.data(),
                      .out = cosSin_.data(),
                      .numTokens = T,
                      .vocabSize = maxPositions_,
                      .hiddenSize = D,
                      .dtype = DType::kF32});

  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    const DraftLayerWeights& w = layers_[static_cast<size_t>(l)];
    // k_proj / v_proj are row ranges of the fused qkv weight [(Hq + 2 Hkv) D, H].
    auto proj = [&](int32_t firstRow, void* y) {
      kernel::LinearParams p{
          .x = ctx_.data(),
          .bias = w.qkvBias.bytes() ? w.qkvBias.as<uint8_t>() + int64_t{firstRow} * es : nullptr,
          .y = y,
          .m = T,
          .n = Hkv * D,
          .k = H,
          .dtype = dtype_,
          .outDtype = dtype_};
      w.qkv.fill(p, firstRow);
      backend_.linear(p);
    };
    proj(Hq * D, kDelta_.data());
    proj((Hq + Hkv) * D, vDelta_.data());
    // Per-head k_norm: [T·Hkv, D] rows.
    backend_.rmsNorm({.x = kDelta_.data(),
                      .weight = w.kNorm.data(),
                      .out = kDelta_.data(),
                      .rows = T * Hkv,
                      .hiddenSize = D,
                      .eps = eps,
                      .dtype = dtype_});
    const TensorView pool = cache.draftPool(l);
    const int32_t numPages = static_cast<int32_t>(pool.shape[1]);
    const int32_t mpps = cache.draftPageTable().maxPagesPerSeq();
    const int32_t batch = cache.maxBatchSize();
    switch (dtype_) {
      case DType::kF32:
        kvUpdate<float>(backend_, kDelta_.data(), vDelta_.data(), pool.data, cosSin_.as<float>(),
                        delta.positions, delta.tokenToSequence, pageTable, T, batch, Hkv, D,
                        numPages, mpps);
        break;
      case DType::kBF16:
        kvUpdate<bf16>(backend_, kDelta_.data(), vDelta_.data(), pool.data, cosSin_.as<float>(),
                       delta.positions, delta.tokenToSequence, pageTable, T, batch, Hkv, D,
                       numPages, mpps);
        break;
      case DType::kF16:
        kvUpdate<fp16>(backend_, kDelta_.data(), vDelta_.data(), pool.data, cosSin_.as<float>(),
                       delta.positions, delta.tokenToSequence, pageTable, T, batch, Hkv, D,
                       numPages, mpps);
        break;
      default:
        ES_THROW(InvalidArgument, where, ": compute dtype ", dtype_name(dtype_),
                 " is not supported");
    }
  }
}

void DFlashDraft::propose(const DraftProposalInputs& in, kv::KvCacheManager& cache) {
  constexpr const char* where = "DFlashDraft::propose";
  const ModelConfig& c = config_;
  const int32_t B = in.batchSize;
  ES_CHECK_ARG(B >= 0 && B <= maxBatch_ && B <= cache.maxBatchSize(), where, "batchSize", B,
               "must be in [0, min(maxBatch = ", maxBatch_,
               ", cache maxBatchSize = ", cache.maxBatchSize(), ")]");
  if (B == 0) return;
  ES_CHECK_ARG(in.anchors && in.positions && in.kvLengths && in.argmaxOut, where,
               "anchors/positions/kvLengths/argmaxOut", "null", "must not be null");
  const int32_t BS = blockSize_, R = B * BS;
  const int32_t W = in.rowsPerBlock == 0 ? BS : in.rowsPerBlock;
  ES_CHECK_ARG(W >= 1 && W <= BS, where, "rowsPerBlock", in.rowsPerBlock,
               "must be 0 (the block size) or in [1, block size = ", BS, "]");
  checkCache(cache, where);
  const int32_t* pageTable = pageTable_.sync(backend_, cache.draftPageTable());
  const int32_t H = static_cast<int32_t>(c.hidden_size), D = static_cast<int32_t>(c.head_dim);
  const int32_t Hq = static_cast<int32_t>(c.num_attention_heads),
                Hkv = static_cast<int32_t>(c.num_key_value_heads);
  const int32_t I = static_cast<int32_t>(c.intermediate_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int32_t* owners = blockConst_.as<int32_t>();
  const int32_t* cuQ = owners + int64_t{maxBatch_} * BS;
  const int32_t* blockGather = cuQ + maxBatch_ + 1;

  auto linearParams = [&](const void* x, const LinearWeight& w, const Buffer& bias, void* y,
                          int32_t n, int32_t k, DType out) {
    kernel::LinearParams p{.x = x,
                           .bias = bias.bytes() ? bias.data() : nullptr,
                           .y = y,
                           .m = R,
                           .n = n,
                           .k = k,
                           .dtype = dtype_,
                           .outDtype = out};
    w.fill(p);
    return p;
  };
  auto linear = [&](const void* x, const LinearWeight& w, const Buffer& bias, void* y, int32_t n,
                    int32_t k,
                    DType out) { backend_.linear(linearParams(x, w, bias, y, n, k, out)); };
  auto norm = [&](const void* x, void* residual, const Buffer& w, void* out) {
    backend_.rmsNorm({.x = x,
                      .residual = residual,
                      .weight = w.data(),
                      .out = out,
                      .rows = R,
                      .hiddenSize = H,
                      .eps = eps,
                      .dtype = dtype_});
  };

  // h0 = [emb(anchor), mask, …] per sequence: anchors into blockRows_[0, B), then one gather
  // of blockRows_ by the constant index (b for row b·BS, the mask row otherwise).
  backend_.embedding({.tokens = in.anchors,
                      .table = targetEmbed_,
                      .out = blockRows_.data(),
                      .numTokens = B,
                      .vocabSize = vocab_,
                      .hiddenSize = H,
                      .dtype = dtype_});
  backend_.embedding({.tokens = blockGather,
                      .table = blockRows_.data(),
                      .out = residual_.data(),
                      .numTokens = R,
                      .vocabSize = maxBatch_ + 1,
                      .hiddenSize = H,
                      .dtype = dtype_});

  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    const DraftLayerWeights& w = layers_[static_cast<size_t>(l)];
    norm(l == 0 ? residual_.data() : tmp_.data(), l == 0 ? nullptr : residual_.data(), w.inputNorm,
         normed_.data());
    linear(normed_.data(), w.qkv, w.qkvBias, qkv_.data(), (Hq + 2 * Hkv) * D, H, dtype_);

    // The block's own K/V go to T_b … T_b + BS − 1 of the draft cache (scratch beyond the
    // committed length, overwritten by the next context delta).
    const TensorView pool = cache.draftPool(l);
    const kernel::QkvRopeKvWriteParams rope{
        .qkv = qkv_.data(),
        .qNormWeight = w.qNorm.data(),
        .kNormWeight = w.kNorm.data(),
        .normEps = eps,
        .cosSin = ropeTable_.as<float>(),
        .maxPositions = maxPositions_,
        .positions = in.positions,
        .tokenToSequence = owners,
        .pageTable = pageTable,
        .kvPool = pool.data,
        .qOut = q_.data(),
        .numTokens = R,
        .batchSize = cache.maxBatchSize(),
        .numQHeads = Hq,
        .numKVHeads = Hkv,
        .headDim = D,
        .rotaryDim = D,
        .numPages = static_cast<int32_t>(pool.shape[1]),
        .maxPagesPerSeq = cache.draftPageTable().maxPagesPerSeq(),
        .dtype = dtype_};
    backend_.qkvRopeKvWrite(rope);

    kernel::PagedAttentionParams att{.query = {.q = q_.data(),
                                               .out = attn_.data(),
                                               .cuQSeqLens = cuQ,
                                               .qPositions = in.positions,
                                               .totalQ = R,
                                               .maxQSeqLen = BS,
                                               .numQHeads = Hq},
                                     .kv = {.pool = pool.data,
                                            .pageTable = pageTable,
                                            .numPages = rope.numPages,
                                            .maxPagesPerSeq = rope.maxPagesPerSeq,
                                            .numKVHeads = Hkv},
                                     .kvLengths = in.kvLengths,
                                     .mask = kernel::AttentionMask::kBidirectional,
                                     .batchSize = B,
                                     .headDim = D,
                                     .scale = 1.0f / std::sqrt(static_cast<float>(D)),
                                     .dtype = dtype_,
                                     .maxKvLength = std::min(cache.capacity(), maxPositions_),
                                     .workspace = attnSplit_.bytes() ? attnSplit_.data() : nullptr,
                                     .workspaceBytes = attnSplit_.bytes()};
    const kernel::LinearParams o =
        linearParams(attn_.data(), w.o, w.oBias, tmp_.data(), H, Hq * D, dtype_);
    att.nextFillsSms = backend_.linearFillsSms(o);  // the o projection comes right after
    backend_.pagedAttention(att);
    backend_.linear(o);
    norm(tmp_.data(), residual_.data(), w.postNorm, normed_.data());
    linear(normed_.data(), w.gateUp, w.gateUpBias, gateUp_.data(), 2 * I, H, dtype_);
    backend_.swiglu({.gateUp = gateUp_.data(),
                     .out = act_.data(),
                     .rows = R,
                     .intermediateSize = I,
                     .dtype = dtype_});
    linear(act_.data(), w.down, w.downBias, tmp_.data(), H, I, dtype_);
  }
  // The final norm runs over all R rows (R × H, nothing beside the lm_head's R × V × H); the
  // lm_head and argmax only over the W rows per block the caller uses: rows b·BS … b·BS + W − 1
  // of normed_ are gathered into rows b·W … of tmp_ (free once the norm has read it).
  norm(tmp_.data(), residual_.data(), finalNorm_, normed_.data());
  const void* headIn = normed_.data();  // [B·W, H] compute dtype
  if (W < BS) {
    const int64_t rowBytes = int64_t{H} * dtype_size(dtype_);
    backend_.copy2D(tmp_.data(), W * rowBytes, normed_.data(), BS * rowBytes, W * rowBytes, B);
    headIn = tmp_.data();
  }
  const int32_t scored = B * W;
  // The target's lm_head, f32 logits [B·W, V]; their argmax [B, W] i32.
  kernel::LinearParams head{.x = headIn,
                            .y = logits_.data(),
                            .m = scored,
                            .n = vocab_,
                            .k = H,
                            .dtype = dtype_,
                            .outDtype = DType::kF32};
  targetLmHead_->fill(head);
  backend_.linear(head);
  backend_.argmax({.logits = logits_.data(),
                   .dtype = DType::kF32,
                   .rows = scored,
                   .vocab = vocab_,
                   .out = in.argmaxOut});
}

int32_t* DFlashDraft::uploadMeta(const std::vector<int32_t>& host) {
  const int64_t bytes = static_cast<int64_t>(host.size()) * 4;
  if (meta_.bytes() < bytes) meta_ = backend_.allocate(bytes);
  backend_.copyFromHost(meta_.data(), host.data(), bytes);
  return meta_.as<int32_t>();
}

void DFlashDraft::appendContext(const void* taps, const std::vector<int32_t>& positions,
                                const std::vector<int32_t>& tokenToSequence,
                                kv::KvCacheManager& cache) {
  constexpr const char* where = "DFlashDraft::appendContext";
  const int32_t T = static_cast<int32_t>(positions.size());
  ES_CHECK_ARG(tokenToSequence.size() == positions.size(), where, "tokenToSequence.size()",
               tokenToSequence.size(), "must equal positions.size() = ", T);
  ES_CHECK_ARG(T <= maxContextTokens_, where, "positions.size()", T,
               "must be <= maxContextTokens = ", maxContextTokens_);
  for (int32_t r = 0; r < T; ++r) {
    const int32_t p = positions[static_cast<size_t>(r)],
                  o = tokenToSequence[static_cast<size_t>(r)];
    if (p < 0 || o < 0) continue;
    ES_CHECK_ARG(o < cache.maxBatchSize(), where, "tokenToSequence", o,
                 "must be < maxBatchSize = ", cache.maxBatchSize());
    ES_CHECK_ARG(p < maxPositions_ && p < cache.capacity(), where, "position", p,
                 "must be below the draft's RoPE table (", maxPositions_, ") and the KV capacity (",
                 cache.capacity(), ")");
  }
  std::vector<int32_t> meta(positions);
  meta.insert(meta.end(), tokenToSequence.begin(), tokenToSequence.end());
  const int32_t* d = uploadMeta(meta);
  appendContext(DraftContextDelta{taps, d, d + T, T}, cache);
}

void DFlashDraft::appendContext(const TargetModel& target, const std::vector<int32_t>& positions,
                                const std::vector<int32_t>& tokenToSequence,
                                kv::KvCacheManager& cache) {
  ES_CHECK_ARG(target.tapLayers() == taps_, "DFlashDraft::appendContext", "target tapLayers",
               listOf(target.tapLayers()), "must be the draft's taps ", listOf(taps_));
  appendContext(target.tapsDevice(), positions, tokenToSequence, cache);
}

void DFlashDraft::appendContextFromHost(const std::vector<float>& taps,
                                        const std::vector<int32_t>& positions,
                                        const std::vector<int32_t>& tokenToSequence,
                                        kv::KvCacheManager& cache) {
  const int64_t n = static_cast<int64_t>(taps_.size()) * static_cast<int64_t>(positions.size()) *
                    config_.hidden_size;
  ES_CHECK_ARG(static_cast<int64_t>(taps.size()) == n, "DFlashDraft::appendContextFromHost",
               "taps.size()", taps.size(), "must be numTaps × positions.size() × hidden = ", n);
  if (n == 0) return;
  const int64_t bytes = n * dtype_size(dtype_);
  if (hostTaps_.bytes() < bytes) hostTaps_ = backend_.allocate(bytes);
  uploadFloats(backend_, taps.data(), n, dtype_, hostTaps_.data());
  appendContext(hostTaps_.data(), positions, tokenToSequence, cache);
}

DraftProposal DFlashDraft::propose(const std::vector<int32_t>& anchors,
                                   const std::vector<int32_t>& blockStarts,
                                   kv::KvCacheManager& cache, bool wantLogits,
                                   int32_t rowsPerBlock) {
  constexpr const char* where = "DFlashDraft::propose";
  const int32_t B = static_cast<int32_t>(anchors.size());
  ES_CHECK_ARG(blockStarts.size() == anchors.size(), where, "blockStarts.size()",
               blockStarts.size(), "must equal anchors.size() = ", B);
  ES_CHECK_ARG(B >= 1 && B <= maxBatch_ && B <= cache.maxBatchSize(), where, "anchors.size()", B,
               "must be in [1, min(maxBatch = ", maxBatch_,
               ", cache maxBatchSize = ", cache.maxBatchSize(), ")]");
  const int32_t BS = blockSize_;
  ES_CHECK_ARG(rowsPerBlock >= 0 && rowsPerBlock <= BS, where, "rowsPerBlock", rowsPerBlock,
               "must be 0 (the block size) or in [1, block size = ", BS, "]");
  const int32_t W = rowsPerBlock == 0 ? BS : rowsPerBlock;
  // anchors [B] | positions [B·BS] | kvLengths [B] | argmax out [B·W]
  std::vector<int32_t> meta(anchors);
  for (int32_t b = 0; b < B; ++b) {
    const int32_t a = anchors[static_cast<size_t>(b)], s = blockStarts[static_cast<size_t>(b)];
    ES_CHECK_ARG(a >= 0 && a < vocab_, where, "anchor", a, "must be in [0, vocab_size = ", vocab_,
                 ")");
    ES_CHECK_ARG(s >= 0 && int64_t{s} + BS <= std::min(maxPositions_, cache.capacity()), where,
                 "blockStart", s, "must be >= 0 with blockStart + block_size (", BS,
                 ") <= min(RoPE table ", maxPositions_, ", KV capacity ", cache.capacity(), ")");
    for (int32_t i = 0; i < BS; ++i) meta.push_back(s + i);
  }
  for (int32_t b = 0; b < B; ++b) meta.push_back(blockStarts[static_cast<size_t>(b)] + BS);
  const size_t outAt = meta.size();
  meta.resize(outAt + static_cast<size_t>(B) * W, -1);
  int32_t* d = uploadMeta(meta);
  DraftProposalInputs in;
  in.anchors = d;
  in.positions = d + B;
  in.kvLengths = d + B + int64_t{B} * BS;
  in.batchSize = B;
  in.rowsPerBlock = W;
  in.argmaxOut = d + outAt;
  propose(in, cache);
  DraftProposal out;
  out.tokens.resize(static_cast<size_t>(B) * W);
  backend_.copyToHost(out.tokens.data(), in.argmaxOut, static_cast<int64_t>(out.tokens.size()) * 4);
  if (wantLogits) {
    out.logits.resize(static_cast<size_t>(B) * W * vocab_);
    backend_.copyToHost(out.logits.data(), logits_.data(),
                        static_cast<int64_t>(out.logits.size()) * 4);
  }
  return out;
}

}  // namespace es::model
