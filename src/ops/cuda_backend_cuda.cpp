// The CUDA backend: every op launches its kernel on the backend's stream; GEMMs go through
// cuBLASLt (one LinearContext for the backend).
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "ops/backend.h"

namespace es::ops {
namespace {

class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { (void)cudaGraphExecDestroy(exec_); }
  void launch() override { ES_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    if (cuda_device_count() == 0)
      ES_THROW(Error, "the CUDA backend needs a CUDA device; none is usable");
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
      ES_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
      // Pageable sources may be reused by the caller right away: wait for the copy.
      ES_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void copyFromHostAsync(void* dst, const void* src, int64_t bytes) override {
    // A pageable source is staged before cudaMemcpyAsync returns; the device write is queued.
    if (bytes > 0) {
      ES_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
    }
  }
  void copyToHost(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      ES_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
    }
    ES_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      ES_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
    }
  }
  void copy2D(void* dst, int64_t dstPitch, const void* src, int64_t srcPitch, int64_t rowBytes,
              int64_t rows) override {
    if (rowBytes > 0 && rows > 0) {
      ES_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dstPitch), src,
                                      static_cast<size_t>(srcPitch), static_cast<size_t>(rowBytes),
                                      static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                      stream_));
    }
  }
  void synchronize() override { ES_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void embedding(const kernel::EmbeddingParams& p) override { kernel::launchEmbedding(p, stream_); }
  void rmsNorm(const kernel::RmsNormParams& p) override { kernel::launchRmsNorm(p, stream_); }
  void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p) override {
    kernel::launchQkvRopeKvWrite(p, stream_);
  }
  void pagedAttention(const kernel::PagedAttentionParams& p) override {
    kernel::launchPagedAttention(p, stream_);
  }
  void swiglu(const kernel::SwigluParams& p) override { kernel::launchSwiglu(p, stream_); }
  void linear(const kernel::LinearParams& p) override {
    kernel::launchLinear(p, *linear_, stream_);
  }
  // launchLinear takes every format: the quantized gemv up to 16 rows, above that W dequantized
  // into the context's scratch for cuBLASLt (kernels/linear.h).
  bool runsQuantized(QuantFormat) const override { return true; }
  bool fusesRowNorms(int32_t rows) const override { return kernel::linearFusesRowNorm(rows); }
  bool linearFillsSms(const kernel::LinearParams& p) override {
    return kernel::linearFillsSms(p, *linear_);
  }
  void gateUpSwiglu(const kernel::GateUpSwigluParams& p) override {
    kernel::launchGateUpSwiglu(p, *linear_, stream_);
  }
  void argmax(const ArgmaxParams& p) override { kernel::argmaxRows(p, stream_); }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF32&) override {
    ES_THROW(
        InvalidArgument,
        "CudaBackend::dflashKvUpdate: argument 'dtype' = f32 is not supported: "
        "launchDFlashTargetKVCacheUpdate writes fp16/bf16 caches only (f32 is the CPU backend's)");
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF16& p) override {
    kernel::launchDFlashTargetKVCacheUpdate(p, stream_);
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsBF16& p) override {
    kernel::launchDFlashTargetKVCacheUpdate(p, stream_);
  }

  void eagleAccept(const kernel::EagleAcceptParams& p) override {
    kernel::launchEagleAccept(p, stream_);
  }
  void dflashDeltaMetadata(const kernel::DFlashDeltaMetadataParams& p) override {
    kernel::launchDFlashPrepareDeltaMetadata(p, stream_);
  }
  void dflashProposalInputs(const kernel::DFlashProposalInputsParams& p) override {
    kernel::launchDFlashPrepareProposalInputs(p, stream_);
  }
  void dflashBaseVerifyInputs(const kernel::DFlashBaseVerifyInputsParams& p) override {
    kernel::launchDFlashPrepareBaseVerifyInputs(p, stream_);
  }
  void dflashLinearVerifyInputs(const kernel::DFlashLinearVerifyInputsParams& p) override {
    kernel::launchDFlashBuildLinearVerifyInputs(p, stream_);
  }
  void specCommit(const kernel::SpecCommitParams& p) override {
    kernel::launchSpecCommit(p, stream_);
  }
  void replayProposal(const kernel::ReplayProposalParams& p) override {
    kernel::launchReplayProposal(p, stream_);
  }
  void sampleRows(const SamplingParams& p) override { kernel::sampleRows(p, stream_); }
  void specVerify(const SpecVerifyParams& p) override { kernel::specVerify(p, stream_); }

  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) override {
    ES_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream_, &broken);  // leave the stream usable
      if (broken) (void)cudaGraphDestroy(broken);
      throw;
    }
    cudaGraph_t graph = nullptr;
    ES_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    ES_CUDA_CHECK(status);
    return std::make_unique<CudaGraph>(exec, stream_);
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernel::LinearContext> linear_;
};

}  // namespace

std::unique_ptr<Backend> makeCudaBackend() { return std::make_unique<CudaBackend>(); }

}  // namespace es::ops
