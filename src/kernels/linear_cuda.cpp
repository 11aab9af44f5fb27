// Linear layer launcher (CUDA builds only): the decode gemv (linear_gemv.cu) where linear.h's
// dispatch rule picks it, otherwise cuBLASLt as below.
//
// A quantized W (LinearParams::quantized) takes the quantized gemv (linear_quant_gemv.cu, which
// fuses normWeight, accumulate and, for launchGateUpSwiglu, SwiGLU as the dense gemv does) for
// m <= 16 (kAuto where quantGemvRejection accepts p, kGemv always); otherwise (prefill,
// kCublasLt, ES_LINEAR_ALGO=cublaslt, or parameters the gemv rejects) W is dequantized into a
// dense scratch of the input dtype owned by the context (kernels/quant_dequant.h) and cuBLASLt
// runs on that.
// That is the first prefill path: it rounds each W element to the input dtype and reads W twice;
// a tensor-core GEMM straight from the packed bytes is later work. The scratch grows at eager
// calls only: a larger one needed while the stream is being captured into a CUDA graph is an
// InvalidArgument (run the shape eagerly once first).
//
// Row-major y[M, N] = x[M, K] · W[N, K]^T is, seen column-major, y^T[N, M] = W^T... i.e. with
// A = W as a column-major K x N matrix (lda = K) transposed, B = x as a column-major K x M matrix
// (ldb = K), C = D = y as a column-major N x M matrix (ldc = N): D = op_T(A) · B, the "TN" GEMM.
// Compute type CUBLAS_COMPUTE_32F (true fp32 accumulation, no TF32 for f32 inputs), scale f32.
// Bias: cuBLASLt's BIAS epilogue (bias per row of the column-major D = per output feature) only
// for f32 inputs and output. With a 16-bit output the epilogue rounds the product to 16 bits
// before adding the bias (two roundings: up to 2 bf16 ulps off the once-rounded reference), so
// the product goes to an f32 scratch and a small kernel adds the bias and rounds once; f32 y from
// 16-bit inputs gets the bias added in place.
//
// The context caches one (descriptors, algorithm) bundle per shape / dtype / bias / alignment, so
// repeated calls (every layer, every step, CUDA-graph capture) make no heuristic queries.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <tuple>

#include "common/cuda_check.h"
#include "kernels/debug_switches.h"
#include "kernels/gate_up_swiglu.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"
#include "kernels/linear_quant_gemv.h"
#include "kernels/quant_dequant.h"

namespace es::kernel {

namespace detail {
void launchAddBiasF32(float* y, const void* bias, DType biasDtype, int64_t m, int64_t n,
                      cudaStream_t stream);  // linear.cu
void launchAddBiasRound(void* y, DType yDtype, const float* product, const void* bias,
                        DType biasDtype, int64_t m, int64_t n, cudaStream_t stream);  // linear.cu
}  // namespace detail

namespace {

cudaDataType_t cudaType(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_16BF;
  }
}

// Largest power of two (<= 256) dividing the address: the alignment cuBLASLt may assume.
uint32_t alignmentOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (a % align) != 0) align >>= 1;
  return align;
}

}  // namespace

struct LinearContext::State {
  using Key = std::tuple<int32_t, int32_t, int32_t, int, int, bool, uint32_t, uint32_t, uint32_t>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool biasEpilogue = false;
  };
  cublasLtHandle_t handle = nullptr;
  int32_t numSms = 1;  // the current device's at construction (the gemv's grid sizing)
  void* workspace = nullptr;
  size_t workspaceBytes = 0;
  float* scratch = nullptr;  // f32 product for a bias with a 16-bit output, grown on demand
  size_t scratchBytes = 0;
  void* dequant = nullptr;  // a quantized W dequantized for cuBLASLt, grown at eager calls
  size_t dequantBytes = 0;
  std::map<Key, Plan> plans;

  ~State() {
    for (auto& [key, plan] : plans) {
      if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
      if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
      if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
      if (plan.op) cublasLtMatmulDescDestroy(plan.op);
    }
    if (workspace) cudaFree(workspace);
    if (scratch) cudaFree(scratch);
    if (dequant) cudaFree(dequant);
    if (handle) cublasLtDestroy(handle);
  }

  // The GEMM's own output type: f32 whenever a bias must be added before a 16-bit rounding.
  static DType gemmOut(const LinearParams& p) {
    return p.bias != nullptr && p.outDtype != DType::kF32 ? DType::kF32 : p.outDtype;
  }

  Plan& planFor(const LinearParams& p, const void* y) {
    const DType out = gemmOut(p);
    const bool biasEpilogue = p.bias != nullptr && out == DType::kF32 && p.dtype == DType::kF32;
    const uint32_t alignA = alignmentOf(p.w), alignB = alignmentOf(p.x), alignC = alignmentOf(y);
    const Key key{
        p.m,    p.n,    p.k,   static_cast<int>(p.dtype), static_cast<int>(out), biasEpilogue,
        alignA, alignB, alignC};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;

    Plan plan;
    plan.biasEpilogue = biasEpilogue;
    const cudaDataType_t inT = cudaType(p.dtype), outT = cudaType(out);
    try {
      ES_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
      ES_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &transA,
                                                     sizeof(transA)));
      ES_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &transB,
                                                     sizeof(transB)));
      if (biasEpilogue) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        ES_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                       sizeof(epi)));
        const int32_t biasT = static_cast<int32_t>(inT);
        ES_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                       &biasT, sizeof(biasT)));
        // A placeholder for the heuristic query; the real pointer is set on every call.
        ES_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &p.bias, sizeof(p.bias)));
      }
      ES_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, inT, p.k, p.n, p.k));
      ES_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, inT, p.k, p.m, p.k));
      ES_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, outT, p.n, p.m, p.n));

      cublasLtMatmulPreference_t pref = nullptr;
      ES_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes, sizeof(workspaceBytes));
      const uint32_t aligns[4] = {alignA, alignB, alignC, alignC};
      const cublasLtMatmulPreferenceAttributes_t alignAttrs[4] = {
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
      for (int i = 0; i < 4 && status == CUBLAS_STATUS_SUCCESS; ++i) {
        status = cublasLtMatmulPreferenceSetAttribute(pref, alignAttrs[i], &aligns[i],
                                                      sizeof(aligns[i]));
      }
      if (status == CUBLAS_STATUS_SUCCESS) {
        status = cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.c,
                                                pref, 1, &result, &count);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      ES_CUBLAS_CHECK(status);
      if (count == 0) {
        ES_THROW(CudaError, "launchLinear: cuBLASLt has no algorithm for m=", p.m, " n=", p.n,
                 " k=", p.k, " dtype=", dtype_name(p.dtype), " outDtype=", dtype_name(p.outDtype));
      }
      plan.algo = result.algo;
    } catch (...) {
      if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
      if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
      if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
      if (plan.op) cublasLtMatmulDescDestroy(plan.op);
      throw;
    }
    return plans.emplace(key, plan).first->second;
  }
};

LinearContext::LinearContext(int64_t workspaceBytes) : state_(std::make_unique<State>()) {
  ES_CHECK_ARG(workspaceBytes >= 0, "LinearContext", "workspaceBytes", workspaceBytes,
               "must be >= 0");
  int device = 0;
  ES_CUDA_CHECK(cudaGetDevice(&device));
  ES_CUDA_CHECK(cudaDeviceGetAttribute(&state_->numSms, cudaDevAttrMultiProcessorCount, device));
  ES_CUBLAS_CHECK(cublasLtCreate(&state_->handle));
  if (workspaceBytes > 0) {
    ES_CUDA_CHECK(cudaMalloc(&state_->workspace, static_cast<size_t>(workspaceBytes)));
    state_->workspaceBytes = static_cast<size_t>(workspaceBytes);
  }
}

LinearContext::~LinearContext() = default;

namespace {

// launchLinear's dispatch: the gemv for kGemv (which throws where unsupported, naming the failed
// condition) and for kAuto inside its domain, else cuBLASLt.
bool takesGemv(const LinearParams& p) {
  if (p.quantized) return false;  // launchQuantizedLinear
  if (p.algo == LinearAlgo::kGemv) return true;
  return p.algo == LinearAlgo::kAuto && !debug::linearAutoTakesCublasLt() &&
         p.m <= kGemvAutoMaxRows && gemvSupported(p);
}

void checkWeightDtype(const LinearParams& p, const char* where) {
  ES_CHECK_ARG(!p.weightDtype || *p.weightDtype == p.dtype, where, "weightDtype",
               dtype_name(*p.weightDtype), "must equal dtype (", dtype_name(p.dtype),
               ") on the GPU: mixed W and x dtypes are the CPU reference's");
}

// launchLinear's dispatch for a quantized W: the quantized gemv for kGemv (which throws where
// unsupported) and for kAuto inside its domain, else the prefill path.
bool takesQuantGemv(const LinearParams& p) {
  if (p.algo == LinearAlgo::kGemv) return true;
  return p.algo == LinearAlgo::kAuto && !debug::linearAutoTakesCublasLt() &&
         p.m <= kGemvAutoMaxRows && detail::quantGemvRejection(p) == nullptr;
}

// launchLinear for a quantized W (see the top): the quantized gemv, or dequantization into the
// context's scratch and cuBLASLt.
void launchQuantizedLinear(const LinearParams& p, LinearContext& context, cudaStream_t stream) {
  constexpr const char* kWhere = "launchLinear";
  const QuantizedWeightView& q = *p.quantized;
  LinearContext::State& s = context.state();
  const char* why = detail::quantGemvRejection(p);
  if (p.algo == LinearAlgo::kGemv) {
    ES_CHECK_ARG(why == nullptr, kWhere, "algo", "kGemv",
                 "needs the quantized gemv, which does not take this call (",
                 quantFormatName(q.format), "): ", why != nullptr ? why : "");
  }
  if (takesQuantGemv(p)) {
    detail::launchLinearQuantGemv(p, detail::chooseQuantGemvConfig(q.format, p.n, p.k, s.numSms),
                                  stream);
    return;
  }
  if (p.normWeight != nullptr || p.accumulate) {  // why the gemv did not take it, for the message
    ES_CHECK_ARG(false, kWhere, p.normWeight != nullptr ? "normWeight" : "accumulate", "set",
                 "is fused only by the quantized gemv, which does not take this call (",
                 quantFormatName(q.format), ": ",
                 why != nullptr ? why : "m > 16, kCublasLt or ES_LINEAR_ALGO=cublaslt",
                 "); run launchRmsNorm instead");
  }
  const size_t bytes = static_cast<size_t>(p.n) * static_cast<size_t>(p.k) *
                       static_cast<size_t>(dtype_size(p.dtype));
  if (bytes > s.dequantBytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    ES_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    ES_CHECK_ARG(capture == cudaStreamCaptureStatusNone, kWhere, "quantized",
                 quantFormatName(q.format),
                 "needs a dequantization scratch of " + std::to_string(bytes) +
                     " bytes (n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                     ") while the stream is captured into a CUDA graph, where it cannot grow "
                     "beyond its " +
                     std::to_string(s.dequantBytes) +
                     " bytes: run this shape eagerly once before capturing");
    if (s.dequant) ES_CUDA_CHECK(cudaFreeAsync(s.dequant, stream));
    s.dequant = nullptr;
    s.dequantBytes = 0;
    ES_CUDA_CHECK(cudaMallocAsync(&s.dequant, bytes, stream));
    s.dequantBytes = bytes;
  }
  launchDequantizeWeight(q, p.n, p.k, p.dtype, s.dequant, stream);
  LinearParams dense = p;
  dense.quantized.reset();
  dense.w = s.dequant;
  dense.algo = LinearAlgo::kCublasLt;
  launchLinear(dense, context, stream);
}

}  // namespace

bool linearFusesRowNorm(int32_t m) {
  return m >= 1 && m <= kGemvAutoMaxRows && !debug::linearAutoTakesCublasLt();
}

bool linearFillsSms(const LinearParams& p, LinearContext& context) {
  if (!takesGemv(p)) return false;
  const int32_t sms = context.state().numSms;
  return detail::gemvFillsSms(detail::chooseGemvConfig(p.n, p.k, sms), p.m, p.n,
                              p.normWeight != nullptr, sms);
}

void launchLinear(const LinearParams& p, LinearContext& context, cudaStream_t stream) {
  if (!validate(p)) return;
  checkWeightDtype(p, "launchLinear");
  if (p.quantized) {
    launchQuantizedLinear(p, context, stream);
    return;
  }
  LinearContext::State& s = context.state();
  if (takesGemv(p)) {
    detail::launchLinearGemv(p, detail::chooseGemvConfig(p.n, p.k, s.numSms), stream);
    return;
  }
  if (p.normWeight != nullptr || p.accumulate) {  // why the gemv did not take it, for the message
    const char* why = gemvRejection(p);
    ES_CHECK_ARG(false, "launchLinear", p.normWeight != nullptr ? "normWeight" : "accumulate",
                 "set", "is fused only by the gemv, which does not take this call (",
                 why != nullptr ? why : "m > 16 or ES_LINEAR_ALGO=cublaslt",
                 "); run launchRmsNorm instead");
  }
  const bool viaScratch = LinearContext::State::gemmOut(p) != p.outDtype;
  void* y = p.y;
  if (viaScratch) {
    const size_t bytes = static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * sizeof(float);
    if (bytes > s.scratchBytes) {
      if (s.scratch) ES_CUDA_CHECK(cudaFreeAsync(s.scratch, stream));
      s.scratch = nullptr;
      ES_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&s.scratch), bytes, stream));
      s.scratchBytes = bytes;
    }
    y = s.scratch;
  }
  LinearContext::State::Plan& plan = s.planFor(p, y);
  if (plan.biasEpilogue) {
    ES_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &p.bias, sizeof(p.bias)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  ES_CUBLAS_CHECK(cublasLtMatmul(s.handle, plan.op, &alpha, p.w, plan.a, p.x, plan.b, &beta, y,
                                 plan.c, y, plan.c, &plan.algo, s.workspace, s.workspaceBytes,
                                 stream));
  if (viaScratch) {
    detail::launchAddBiasRound(p.y, p.outDtype, s.scratch, p.bias, p.dtype, p.m, p.n, stream);
  } else if (p.bias != nullptr && !plan.biasEpilogue) {
    detail::launchAddBiasF32(static_cast<float*>(p.y), p.bias, p.dtype, p.m, p.n, stream);
  }
}

void launchGateUpSwiglu(const GateUpSwigluParams& p, LinearContext& context, cudaStream_t stream) {
  if (!validate(p)) return;
  const LinearParams& l = p.linear;
  if (p.layout == GateUpLayout::kInterleaved8 && takesGemv(l)) {
    checkWeightDtype(l, "launchGateUpSwiglu");
    LinearParams fused = l;
    fused.y = p.out;  // [m, n / 2]: the epilogue's output
    // The configuration of the plain [m, n] gemv: every gate and up output is summed as there.
    const detail::GemvConfig cfg = detail::chooseGemvConfig(l.n, l.k, context.state().numSms);
    detail::launchLinearGemv(fused, cfg, stream, detail::GemvEpilogue::kSwiglu);
    return;
  }
  if (p.layout == GateUpLayout::kInterleaved8 && l.quantized && takesQuantGemv(l)) {
    LinearParams fused = l;
    fused.y = p.out;  // [m, n / 2]: the epilogue's output
    // The configuration of the plain [m, n] call: every gate and up output is summed as there.
    const detail::QuantGemvConfig cfg =
        detail::chooseQuantGemvConfig(l.quantized->format, l.n, l.k, context.state().numSms);
    detail::launchLinearQuantGemv(fused, cfg, stream, detail::GemvEpilogue::kSwiglu);
    return;
  }
  launchLinear(l, context, stream);
  launchSwiglu(swigluStep(p), stream);
}

}  // namespace es::kernel
