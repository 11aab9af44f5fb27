#pragma once
// The target model (Qwen3 / Llama / Qwen2 family, spec §5) on an ops backend, reading and
// writing its KV through the paged cache.
//
// One forward serves every shape: prefill (ragged causal), decode, verify (causal or packed tree
// mask) — the caller describes the rows. It can return the logits of chosen rows and the outputs
// of chosen layers for every row (DFlash taps: after the layer, before the final norm).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/progress.h"
#include "kernels/paged_attention.h"
#include "kv/kv_cache_manager.h"
#include "model/backend_page_table.h"
#include "model/linear_weight.h"
#include "model/model_config.h"
#include "ops/backend.h"

namespace es::model {

struct TargetLayerWeights {
  Buffer inputNorm;     // [H]
  Buffer postNorm;      // [H]
  LinearWeight qkv;     // [(Hq + 2 Hkv) D, H]   q_proj | k_proj | v_proj rows
  Buffer qkvBias;       // [(Hq + 2 Hkv) D] or empty
  Buffer qNorm;         // [D] or empty (Qwen3)
  Buffer kNorm;         // [D] or empty
  LinearWeight o;       // [H, Hq D]
  Buffer oBias;         // [H] or empty
  LinearWeight gateUp;  // [2 I, H]   gate_proj and up_proj rows in TargetModel::gateUpLayout_
  Buffer gateUpBias;    // [2 I] or empty, same order
  LinearWeight down;    // [H, I]
  Buffer downBias;      // [H] or empty
};

// One forward's rows, on the host; the model copies them to the backend.
struct ForwardBatch {
  std::vector<int32_t> tokens;           // [T]
  std::vector<int32_t> positions;        // [T] absolute positions, < 0 = padding row
  std::vector<int32_t> tokenToSequence;  // [T] page-table row of each token, < 0 = padding
  std::vector<int32_t> cuQSeqLens;       // [B + 1] ragged row offsets per sequence
  std::vector<int32_t> kvLengths;        // [B] keys per sequence after this forward's writes
  kernel::AttentionMask mask = kernel::AttentionMask::kCausal;
  std::vector<int32_t> packedMask;  // [T, ceil(maxQ/32)] for kPackedTree
  std::vector<int32_t> logitRows;   // rows whose logits are wanted (may be empty)
};

// The same rows with every array already in backend memory (the device-resident loop: nothing
// is read back, so a forward can be captured in a CUDA graph). Contents are not validated.
struct DeviceForwardBatch {
  const int32_t* tokens = nullptr;           // [numTokens] i32
  const int32_t* positions = nullptr;        // [numTokens] i32, < 0 = padding row
  const int32_t* tokenToSequence = nullptr;  // [numTokens] i32 page-table row, < 0 = padding
  const int32_t* cuQSeqLens = nullptr;       // [batchSize + 1] i32
  const int32_t* kvLengths = nullptr;        // [batchSize] i32
  const int32_t* logitRows = nullptr;        // [numLogitRows] i32 (null when 0)
  const int32_t* packedMask = nullptr;  // [numTokens, ceil(maxQSeqLen/32)] i32, kPackedTree only
  int32_t numTokens = 0;                // T in [1, maxTokens]
  int32_t batchSize = 0;                // B in [1, cache maxBatchSize]
  int32_t maxQSeqLen = 0;               // >= every sequence's rows
  int32_t numLogitRows = 0;             // R in [0, maxTokens]
  kernel::AttentionMask mask = kernel::AttentionMask::kCausal;
};

struct ForwardResult {
  std::vector<float> logits;  // [logitRows.size(), vocab]
  std::vector<float> taps;    // [numTaps, T, H] (layer outputs, host copy; empty if no taps)
};

class TargetModel {
 public:
  // Loads config.json + safetensors from `dir` onto `backend` (weights in its compute dtype).
  // maxTokens bounds the rows of one forward; tapLayers are the layer outputs to keep;
  // maxLogitRows (0: maxTokens) bounds the rows one forward computes logits for. The f32 logits
  // are the workspace's largest part (Qwen3-8B at 4,096 rows: 2.5 GB), and a long prefill chunk
  // needs logits for its last row only, so a caller that prefills in long chunks passes the
  // rows its decode/verify steps need (batch x verify width). onProgress hears the layers loaded.
  TargetModel(const std::filesystem::path& dir, ops::Backend& backend, int32_t maxTokens,
              std::vector<int32_t> tapLayers = {}, int32_t maxLogitRows = 0,
              const ProgressCallback& onProgress = {});

  const ModelConfig& config() const { return config_; }
  ops::Backend& backend() const { return backend_; }
  int32_t maxTokens() const { return maxTokens_; }
  int32_t maxLogitRows() const { return maxLogitRows_; }
  int64_t weightBytes() const { return weightBytes_; }
  int64_t workspaceBytes() const { return workspaceBytes_; }
  const std::vector<int32_t>& tapLayers() const { return tapLayers_; }

  // The KV cache shape this model needs per layer (KvCacheConfig::baseLayers): sliding-window
  // layers carry their window (KvLayerShape::slidingWindow), so the plan stores them in the
  // bounded window pool when the window is below the cache's capacity (and
  // KvCacheConfig::slidingWindowStorage is kBounded); every marker is 0.
  std::vector<kv::KvLayerShape> kvLayerShapes() const;
  // RoPE positions the model can address (the cos/sin table's rows).
  int32_t maxPositions() const { return maxPositions_; }

  // Runs one forward over `batch`, writing K/V into `cache` (whose pools must live in the
  // backend's memory space). Host in, host out: tests and simple callers.
  ForwardResult forward(const ForwardBatch& batch, kv::KvCacheManager& cache);
  // The same forward with its outputs left on the backend (logitsDevice(), tapsDevice()), for
  // callers that read them there (the engine's prefill); returns once the forward has completed.
  void forwardOnBackend(const ForwardBatch& batch, kv::KvCacheManager& cache);

  // The same forward on backend-resident rows; enqueues work only (no host copies or waits once
  // the page tables are in sync), so it can be captured. Logits land in logitsDevice() [R, vocab]
  // f32, taps in tapsDevice(). The page-table upload is host work a replayed graph does not
  // repeat: call syncPageTable before launching a captured forward. With reduced (sliding-window)
  // layers in the cache the caller must have run cache.beginStep() for the rows written (the
  // host forward() checks that the windows are mapped; this one cannot read device rows).
  void forwardDevice(const DeviceForwardBatch& batch, kv::KvCacheManager& cache);
  const float* logitsDevice() const { return logits_.as<float>(); }
  // Uploads the dirty rows of the base page table and of the window table (reduced layers);
  // returns the backend copies {base, window (null without reduced layers)}: a captured forward
  // reads both at these addresses.
  std::pair<const int32_t*, const int32_t*> syncPageTable(kv::KvCacheManager& cache);

  // Backend memory the DFlash draft reads (no copies): the last forward's taps
  // [numTaps, T, H] in the compute dtype (T = that forward's rows; valid until the next
  // forward), the embedding table [V, H] and the lm_head [V, H] (the embedding when tied;
  // quantized where the checkpoint's is and the backend runs it).
  const void* tapsDevice() const { return taps_.data(); }
  const void* embeddingTable() const { return embed_.data(); }
  const LinearWeight& lmHead() const { return lmHead_; }
  // The layers' weights (formats and bytes for `inspect`).
  const std::vector<TargetLayerWeights>& layers() const { return layers_; }

 private:
  void loadWeights(const std::filesystem::path& dir, const ProgressCallback& onProgress);
  void allocateWorkspace();

  ModelConfig config_;
  ops::Backend& backend_;
  DType dtype_;
  DType matrixDtype_;  // the layer matrices' dtype on the backend: dtype_, or bf16 on the CPU
                       // (loadWeights)
  // Row order of the gate/up matrices (kernels/swiglu.h): kInterleaved8 whenever the intermediate
  // size allows (the decode gemv then applies SwiGLU in its epilogue), else the checkpoint's
  // halves.
  kernel::GateUpLayout gateUpLayout_ = kernel::GateUpLayout::kHalves;
  int32_t maxTokens_;
  int32_t maxLogitRows_;  // in [1, maxTokens]
  int32_t maxPositions_ = 0;
  std::vector<int32_t> tapLayers_;
  int64_t weightBytes_ = 0;
  int64_t workspaceBytes_ = 0;

  Buffer embed_;         // [V, H]
  Buffer finalNorm_;     // [H]
  LinearWeight lmHead_;  // [V, H] (sharing embed_ when tied)
  std::vector<TargetLayerWeights> layers_;
  Buffer ropeTable_;  // [maxPositions, D] f32

  // Workspace, sized for maxTokens rows.
  Buffer residual_, normed_, qkv_, q_, attn_, tmp_, gateUp_, act_, rows_, logits_, taps_;
  Buffer attnSplit_;  // split-KV attention partials (CUDA backend; empty when none are needed)
  Buffer splitOut_;   // one part's q|k|v output where a layer's q|k|v is in parts (else empty)
  Buffer meta_;       // i32 metadata, see forward()
  BackendPageTable pageTable_;     // backend copy of the base page table
  BackendPageTable swaPageTable_;  // backend copy of the window table (reduced layers)
};

}  // namespace es::model
