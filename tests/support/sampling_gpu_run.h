#pragma once
// What the sampling GPU tests share (CUDA builds only): scalar SamplingParams; kernel::sampleRows
// run on device rows with poisoned outputs; ref::sampleRows run on the same host rows with
// poisoned outputs; and the bit-exact comparison of the two (tokens exactly, probabilities by
// memcmp).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "kernels/sampling.h"
#include "support/gpu_test_util.h"

namespace es::test {

// Parameters with scalars for every row (no per-row arrays) and no buffers yet.
inline SamplingParams sampling_params(int32_t batch, int32_t vocab, DType logitsDtype,
                                      float temperature, int32_t topK, float topP,
                                      TopPMode topPMode, SamplingPath path = SamplingPath::kAuto) {
  SamplingParams p;
  p.batch = batch;
  p.vocab = vocab;
  p.logitsDtype = logitsDtype;
  p.temperature = temperature;
  p.topK = topK;
  p.topP = topP;
  p.topPMode = topPMode;
  p.path = path;
  return p;
}

// Logit rows on the device (poisoned, then uploaded).
class DeviceLogits {
 public:
  // Rows as `dtype`: kF32 as given; otherwise kF16, each value rounded by to_fp16 (exact for rows
  // already rounded to f16 values).
  DeviceLogits(DType dtype, const std::vector<float>& x)
      : dtype_(dtype),
        f32_(dtype == DType::kF32 ? x.size() : 0),
        f16_(dtype == DType::kF16 ? x.size() : 0) {
    if (dtype == DType::kF32) {
      f32_.upload(x);
    } else {
      std::vector<fp16> h(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = to_fp16(x[i]);
      f16_.upload(h);
    }
  }
  // f16 rows, bits as given.
  explicit DeviceLogits(const std::vector<fp16>& x) : dtype_(DType::kF16), f32_(0), f16_(x.size()) {
    f16_.upload(x);
  }

  const void* get() const {
    return dtype_ == DType::kF32 ? static_cast<const void*>(f32_.get())
                                 : static_cast<const void*>(f16_.get());
  }

 private:
  DType dtype_;
  DeviceArray<float> f32_;
  DeviceArray<fp16> f16_;
};

// One sampling run's outputs, from either side.
struct SampleOutputs {
  std::vector<int32_t> tokens;      // [batch]
  std::vector<float> probs;         // [batch, vocab]; empty when not asked for
  std::vector<uint64_t> workspace;  // the device workspace as 64-bit words; empty unless asked for
};

struct GpuSampleOptions {
  bool probs = true;  // false: p.probs null (tokens only)
  // false: the workspace is exactly samplingWorkspaceBytes(p) poisoned bytes (memcheck flags any
  // access past them), not read back. true: ceil(bytes / 8) poisoned 64-bit words, read back into
  // SampleOutputs::workspace (records nobody wrote keep the poison).
  bool download_workspace = false;
};

// kernel::sampleRows on `logits` (p.logitsDtype must match) with uniforms u: tokens and, with
// opts.probs, probabilities written over poisoned device buffers, then read back.
inline SampleOutputs run_sample_rows_gpu(SamplingParams p, const DeviceLogits& logits,
                                         const std::vector<float>& u, GpuSampleOptions opts = {}) {
  p.logits = logits.get();
  DeviceArray<float> d_u(u);
  DeviceArray<int32_t> d_tokens(p.batch);                                               // poisoned
  DeviceArray<float> d_probs(opts.probs ? static_cast<size_t>(p.batch) * p.vocab : 0);  // poisoned
  p.uniforms = d_u.get();
  p.tokens = d_tokens.get();
  p.probs = opts.probs ? d_probs.get() : nullptr;
  const size_t ws = samplingWorkspaceBytes(p);
  DeviceArray<uint64_t> d_ws_words(opts.download_workspace ? (ws + 7) / 8 : 0);  // poisoned
  DeviceArray<uint8_t> d_ws_bytes(opts.download_workspace ? 0 : ws);             // poisoned
  void* workspace =
      opts.download_workspace ? static_cast<void*>(d_ws_words.get()) : d_ws_bytes.get();
  p.workspace = ws ? workspace : nullptr;
  p.workspaceBytes = ws;
  kernel::sampleRows(p, nullptr);
  ES_CUDA_CHECK(cudaDeviceSynchronize());
  SampleOutputs o;
  o.tokens = d_tokens.download();
  if (opts.probs) o.probs = d_probs.download();
  if (opts.download_workspace) o.workspace = d_ws_words.download();
  return o;
}

// The same on host rows x uploaded as p.logitsDtype (DeviceLogits(dtype, x)).
inline SampleOutputs run_sample_rows_gpu(const SamplingParams& p, const std::vector<float>& x,
                                         const std::vector<float>& u, GpuSampleOptions opts = {}) {
  const DeviceLogits logits(p.logitsDtype, x);
  return run_sample_rows_gpu(p, logits, u, opts);
}

// ref::sampleRows on host f32 rows x (f16 cases pass their rows already rounded to f16 values)
// with uniforms u: tokens poisoned -77 and, with_probs, probabilities poisoned -7 before it runs.
inline SampleOutputs run_sample_rows_ref(SamplingParams p, const std::vector<float>& x,
                                         const std::vector<float>& u, bool with_probs = true) {
  p.logitsDtype = DType::kF32;
  p.logits = x.data();
  p.uniforms = u.data();
  SampleOutputs o;
  o.tokens.assign(p.batch, -77);
  if (with_probs) o.probs.assign(static_cast<size_t>(p.batch) * p.vocab, -7.0f);
  p.tokens = o.tokens.data();
  p.probs = with_probs ? o.probs.data() : nullptr;
  ref::sampleRows(p);
  return o;
}

// Tokens exactly, and when `got` has probabilities, every probability bit for bit (memcmp).
inline void expect_same_samples(const SampleOutputs& got, const SampleOutputs& want, int32_t batch,
                                int32_t vocab, const std::string& what) {
  for (int32_t b = 0; b < batch; ++b)
    EXPECT_EQ(got.tokens[b], want.tokens[b]) << what << " row " << b;
  if (got.probs.empty()) return;
  for (int32_t b = 0; b < batch; ++b) {
    int bad = 0, first = -1;
    for (int32_t i = 0; i < vocab; ++i) {
      const size_t k = static_cast<size_t>(b) * vocab + i;
      if (std::memcmp(&got.probs[k], &want.probs[k], sizeof(float)) != 0 && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0) << what << " row " << b << ": " << bad << " probabilities differ, first at "
                      << first << " (gpu "
                      << (first >= 0 ? got.probs[static_cast<size_t>(b) * vocab + first] : 0.0f)
                      << ", ref "
                      << (first >= 0 ? want.probs[static_cast<size_t>(b) * vocab + first] : 0.0f)
                      << ")";
  }
}

}  // namespace es::test
