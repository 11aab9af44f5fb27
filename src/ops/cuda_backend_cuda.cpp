// The CUDA backend: every op launches its kernel on the backend's stream; GEMMs go through
// cuBLASLt (one LinearContext for the backend).
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "ops/backend.h"

namespace es::ops {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    if (cuda_device_count() == 0) ES_THROW(Error, "the CUDA backend needs a CUDA device; none is usable");
    ES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    linear_ = std::make_unique<kernel::LinearContext>();
  }
  ~CudaBackend() override {
    linear_.reset();
    (void)cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  MemorySpace space() const override { return MemorySpace::kDevice; }
  DType computeDtype() const override { return DType::kBF16; }

  void copyFromHost(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      ES_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
      // Pageable sources may be reused by the caller right away: wait for the copy.
      ES_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void copyToHost(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      ES_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
    }
    ES_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      ES_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
    }
  }
  void synchronize() override { ES_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void syncPageTable(kv::PageTable& table, int32_t* backendCopy) override {
    table.uploadDirty(backendCopy, stream_);
  }

  void embedding(const kernel::EmbeddingParams& p) override { kernel::launchEmbedding(p, stream_); }
  void rmsNorm(const kernel::RmsNormParams& p) override { kernel::launchRmsNorm(p, stream_); }
  void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p) override {
    kernel::launchQkvRopeKvWrite(p, stream_);
  }
  void pagedAttention(const kernel::PagedAttentionParams& p) override {
    kernel::launchPagedAttention(p, stream_);
  }
  void swiglu(const kernel::SwigluParams& p) override { kernel::launchSwiglu(p, stream_); }
  void linear(const kernel::LinearParams& p) override { kernel::launchLinear(p, *linear_, stream_); }
  void argmax(const ArgmaxParams& p) override { kernel::argmax_rows(p, stream_); }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF32&) override {
    ES_THROW(InvalidArgument, "CudaBackend::dflashKvUpdate: argument 'dtype' = f32 is not supported: "
             "launchDFlashTargetKVCacheUpdate writes fp16/bf16 caches only (f32 is the CPU backend's)");
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF16& p) override {
    kernel::launchDFlashTargetKVCacheUpdate(p, stream_);
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsBF16& p) override {
    kernel::launchDFlashTargetKVCacheUpdate(p, stream_);
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernel::LinearContext> linear_;
};

}  // namespace

std::unique_ptr<Backend> makeCudaBackend() { return std::make_unique<CudaBackend>(); }

}  // namespace es::ops
