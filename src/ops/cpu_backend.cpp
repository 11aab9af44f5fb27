// The CPU backend: every op is the CPU reference on host memory, in fp32.
#include <cstring>

#include "common/errors.h"
#include "ops/backend.h"

namespace es::ops {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  MemorySpace space() const override { return MemorySpace::kHost; }
  DType computeDtype() const override { return DType::kF32; }

  void copyFromHost(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void copyFromHostAsync(void* dst, const void* src, int64_t bytes) override {
    copy(dst, src, bytes);
  }
  void copyToHost(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void copy2D(void* dst, int64_t dstPitch, const void* src, int64_t srcPitch, int64_t rowBytes,
              int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r) {
      copy(static_cast<uint8_t*>(dst) + r * dstPitch,
           static_cast<const uint8_t*>(src) + r * srcPitch, rowBytes);
    }
  }
  void synchronize() override {}

  void embedding(const kernel::EmbeddingParams& p) override { ref::embedding(p); }
  void rmsNorm(const kernel::RmsNormParams& p) override { ref::rmsNorm(p); }
  void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p) override { ref::qkvRopeKvWrite(p); }
  void pagedAttention(const kernel::PagedAttentionParams& p) override { ref::pagedAttention(p); }
  void swiglu(const kernel::SwigluParams& p) override { ref::swiglu(p); }
  void linear(const kernel::LinearParams& p) override { ref::linear(p); }
  // The reference decodes every format (common/quant_dequant.h).
  bool runsQuantized(QuantFormat) const override { return true; }
  void gateUpSwiglu(const kernel::GateUpSwigluParams& p) override { ref::gateUpSwiglu(p); }
  void argmax(const ArgmaxParams& p) override { ref::argmaxRows(p); }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF32& p) override {
    ref::dflashTargetKVCacheUpdate(p);
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF16& p) override {
    ref::dflashTargetKVCacheUpdate(p);
  }
  void dflashKvUpdate(const kernel::DFlashKvUpdateParamsBF16& p) override {
    ref::dflashTargetKVCacheUpdate(p);
  }

  void eagleAccept(const kernel::EagleAcceptParams& p) override { ref::eagleAccept(p); }
  void dflashDeltaMetadata(const kernel::DFlashDeltaMetadataParams& p) override {
    ref::dflashPrepareDeltaMetadata(p);
  }
  void dflashProposalInputs(const kernel::DFlashProposalInputsParams& p) override {
    ref::dflashPrepareProposalInputs(p);
  }
  void dflashBaseVerifyInputs(const kernel::DFlashBaseVerifyInputsParams& p) override {
    ref::dflashPrepareBaseVerifyInputs(p);
  }
  void dflashLinearVerifyInputs(const kernel::DFlashLinearVerifyInputsParams& p) override {
    ref::dflashBuildLinearVerifyInputs(p);
  }
  void specCommit(const kernel::SpecCommitParams& p) override { ref::specCommit(p); }
  void replayProposal(const kernel::ReplayProposalParams& p) override { ref::replayProposal(p); }
  void sampleRows(const SamplingParams& p) override { ref::sampleRows(p); }
  void specVerify(const SpecVerifyParams& p) override { ref::specVerify(p); }
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend() { return std::make_unique<CpuBackend>(); }

std::unique_ptr<Backend> makeBackend(const std::string& which) {
  if (which == "cpu") return makeCpuBackend();
  if (which == "cuda") return makeCudaBackend();
  if (which == "auto") return cuda_device_count() > 0 ? makeCudaBackend() : makeCpuBackend();
  ES_THROW(InvalidArgument, "makeBackend: argument 'backend' = ", which,
           " must be cpu, cuda or auto");
}

#ifndef ES_HAVE_CUDA
std::unique_ptr<Backend> makeCudaBackend() {
  ES_THROW(Error, "the CUDA backend is not available: this is a CPU-only build");
}
#endif

}  // namespace es::ops
