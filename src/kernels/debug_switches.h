#pragma once
// The two debug switches of the CUDA kernels, the only settings the kernels take from the
// environment. Each is read once per process, here and nowhere else; both exist to take one
// mechanism out of a run when a result or a timing is in doubt, and neither changes any output.
//
//   ES_PDL=0        every kernel launches the ordinary way instead of as a programmatic dependent
//                   of the kernel before it (pdl.cuh), so no kernel starts before its
//                   predecessor has completed. Any other value, or unset: programmatic launches.
//   ES_LINEAR_ALGO  what LinearAlgo::kAuto means (linear.h). "cublaslt" sends every kAuto linear
//                   layer to cuBLASLt: no decode gemv, hence no norm or SwiGLU fused into it.
//                   "auto", "gemv" or unset: linear.h's rule. Any other value is an
//                   InvalidArgument naming the variable.
namespace es::kernel::debug {

// False when the environment sets ES_PDL=0.
bool pdlEnabled();

// True when the environment sets ES_LINEAR_ALGO=cublaslt.
bool linearAutoTakesCublasLt();

}  // namespace es::kernel::debug
