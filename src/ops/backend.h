#pragma once
// The ops backend the model and the runtime are written against (docs/architecture.md, Layers).
// Each op takes the params struct of its kernel contract (src/kernels/<op>.h): the CPU backend
// runs the reference (src/ref), the CUDA backend launches the kernel on its stream. Pointers in
// the params live in the backend's memory space (host for CPU, device for CUDA).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/buffer.h"
#include "kernels/argmax.h"
#include "kernels/dflash_kv_update.h"
#include "kernels/dflash_metadata.h"
#include "kernels/dflash_verify_inputs.h"
#include "kernels/eagle_accept.h"
#include "kernels/embedding.h"
#include "kernels/gate_up_swiglu.h"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"
#include "kernels/qkv_rope_kv_write.h"
#include "kernels/replay_proposal.h"
#include "kernels/rmsnorm.h"
#include "kernels/sampling.h"
#include "kernels/spec_commit.h"
#include "kernels/spec_verify.h"
#include "kernels/swiglu.h"

namespace es::ops {

// Recorded device work that can be replayed with one launch (a CUDA graph).
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void launch() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual MemorySpace space() const = 0;
  // The element type activations and weights use on this backend (f32 on CPU, bf16 on CUDA).
  virtual DType computeDtype() const = 0;

  Buffer allocate(int64_t bytes) const { return Buffer::allocate(space(), bytes); }
  // Host -> backend, backend -> host (waits for queued work first), backend -> backend.
  virtual void copyFromHost(void* dst, const void* src, int64_t bytes) = 0;
  // Host -> backend queued behind earlier work, without waiting for it: `src` may be reused as
  // soon as this returns (a pageable source is staged by then), `dst` is written in stream order.
  virtual void copyFromHostAsync(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copyToHost(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  // Backend -> backend, `rows` rows of `rowBytes` each, rows `dstPitch` / `srcPitch` bytes apart.
  virtual void copy2D(void* dst, int64_t dstPitch, const void* src, int64_t srcPitch,
                      int64_t rowBytes, int64_t rows) = 0;
  // Waits for all queued work.
  virtual void synchronize() = 0;

  virtual void embedding(const kernel::EmbeddingParams& p) = 0;
  virtual void rmsNorm(const kernel::RmsNormParams& p) = 0;
  virtual void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p) = 0;
  virtual void pagedAttention(const kernel::PagedAttentionParams& p) = 0;
  virtual void swiglu(const kernel::SwigluParams& p) = 0;
  // The gate/up projection and SwiGLU (kernels/gate_up_swiglu.h): one kernel on the GPU at decode
  // rows.
  virtual void gateUpSwiglu(const kernel::GateUpSwigluParams& p) = 0;
  virtual void linear(const kernel::LinearParams& p) = 0;
  // Whether linear() and gateUpSwiglu() take a W held in `format` (LinearParams::quantized). The
  // one place that decides: a model loads a quantized checkpoint matrix kept quantized where this
  // is true, else dequantized to its dense dtype at upload (model/linear_weight.h).
  virtual bool runsQuantized(QuantFormat format) const = 0;
  // Whether linear() fuses LinearParams::normWeight and accumulate at `rows` rows (linear.h):
  // then a model runs its decode layers without RMSNorm kernels. The CPU backend never does.
  virtual bool fusesRowNorms(int32_t rows) const {
    (void)rows;
    return false;
  }
  // Whether linear(p) runs a kernel that needs whole SMs for its CTAs (kernels/linear.h), which
  // the kernel before it should let in only once its own CTAs are done. The CPU backend: never.
  virtual bool linearFillsSms(const kernel::LinearParams& p) {
    (void)p;
    return false;
  }
  virtual void argmax(const ArgmaxParams& p) = 0;
  // DFlash target-context K/V write into the draft cache (spec §2.1), one overload per cache
  // element type. CPU: the reference for all three; CUDA: the kernel for fp16/bf16 and an
  // InvalidArgument for f32 (the f32 cache is the CPU backend's).
  virtual void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF32& p) = 0;
  virtual void dflashKvUpdate(const kernel::DFlashKvUpdateParamsF16& p) = 0;
  virtual void dflashKvUpdate(const kernel::DFlashKvUpdateParamsBF16& p) = 0;

  // The speculative loop's device-side steps (spec §2, §3, §6), so the loop never needs the
  // host between its device-to-host copies.
  virtual void eagleAccept(const kernel::EagleAcceptParams& p) = 0;
  virtual void dflashDeltaMetadata(const kernel::DFlashDeltaMetadataParams& p) = 0;
  virtual void dflashProposalInputs(const kernel::DFlashProposalInputsParams& p) = 0;
  virtual void dflashBaseVerifyInputs(const kernel::DFlashBaseVerifyInputsParams& p) = 0;
  virtual void dflashLinearVerifyInputs(const kernel::DFlashLinearVerifyInputsParams& p) = 0;
  virtual void specCommit(const kernel::SpecCommitParams& p) = 0;
  virtual void replayProposal(const kernel::ReplayProposalParams& p) = 0;
  virtual void sampleRows(const SamplingParams& p) = 0;
  virtual void specVerify(const SpecVerifyParams& p) = 0;

  // Records the device work `work` enqueues so it can be replayed by one launch. `work` must
  // not synchronise or copy from the host (copyFromHost/copyToHost); pointers and sizes are
  // frozen at capture. Returns null on backends without capture (CPU): run `work` instead.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) {
    (void)work;
    return nullptr;
  }
};

std::unique_ptr<Backend> makeCpuBackend();
// CUDA builds with a usable device; throws es::Error otherwise.
std::unique_ptr<Backend> makeCudaBackend();
// "cpu", "cuda", or "auto" (CUDA when a device is usable, else CPU).
std::unique_ptr<Backend> makeBackend(const std::string& which);

}  // namespace es::ops
