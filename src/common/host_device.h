#pragma once
// ES_HOST_DEVICE marks functions that have one definition for host and device code
// (the RNG, dtype conversions, geometry helpers). Plain g++ sees an empty macro.
#if defined(__CUDACC__)
#define ES_HOST_DEVICE __host__ __device__
#define ES_FORCE_INLINE __forceinline__
#else
#define ES_HOST_DEVICE
#define ES_FORCE_INLINE inline __attribute__((always_inline))
#endif
