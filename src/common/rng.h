#pragma once
// Counter-based, request-stable random numbers (spec §3.6).
//
// A uniform is a pure function u = f(request seed, absolute position, purpose, lane), computed by
// Philox4x32-10 (Salmon et al., SC'11) keyed by the 64-bit seed with the counter
// (lane, purpose, position low word, position high word). Nothing is stored between draws, so
// batching, compaction and CUDA graph replay cannot change a request's numbers, and host and
// device share this one definition (ES_HOST_DEVICE) bit for bit.
#include <cstdint>

#include "common/host_device.h"

namespace es {

// What a uniform is used for; part of the counter so the streams never overlap.
enum class RngPurpose : uint32_t {
  kTarget = 0,    // plain (non-speculative) sample of the token after `position`
  kProposal = 1,  // sampled draft proposals
  kAccept = 2,    // accept test of drafted token `lane`
  kResidual = 3,  // residual sample after rejecting drafted token `lane`
  kBonus = 4,     // bonus token after a fully accepted chain (lane 0)
};

struct Philox4x32Block {
  uint32_t v[4];
};

namespace detail {
ES_HOST_DEVICE ES_FORCE_INLINE void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}
}  // namespace detail

// Philox4x32 with 10 rounds; matches the Random123 known-answer vectors.
ES_HOST_DEVICE inline Philox4x32Block philox4x32_10(Philox4x32Block counter, uint32_t key0,
                                                    uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    detail::mul_hi_lo(kMul0, c0, hi0, lo0);
    detail::mul_hi_lo(kMul1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ key0;
    const uint32_t n2 = hi0 ^ c3 ^ key1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return Philox4x32Block{{c0, c1, c2, c3}};
}

// 32 random bits -> float strictly inside (0, 1): the top 23 bits plus one half, times 2^-23.
// Every result is exact in fp32 (24 significant bits); the extremes are 2^-24 and 1 - 2^-24,
// the largest float below 1. (24 bits + 1/2 would need 25 bits and round up to 1.0.)
ES_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) {
  return (static_cast<float>(bits >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

// The request-stable uniform of spec §3.6.
ES_HOST_DEVICE inline float request_uniform(uint64_t seed, int64_t position, RngPurpose purpose,
                                            uint32_t lane) {
  const uint64_t pos = static_cast<uint64_t>(position);
  const Philox4x32Block counter{{lane, static_cast<uint32_t>(purpose), static_cast<uint32_t>(pos),
                                 static_cast<uint32_t>(pos >> 32)}};
  const Philox4x32Block out =
      philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return uniform_from_bits(out.v[0]);
}

}  // namespace es
