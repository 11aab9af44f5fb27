#pragma once
// cudaStream_t without the CUDA headers, so kernel parameter headers stay includable from
// plain C++ (the CPU-only build and the CPU references). This is the same type the CUDA
// runtime declares (a pointer to the opaque CUstream_st), so both declarations agree.
struct CUstream_st;
using cudaStream_t = CUstream_st*;
