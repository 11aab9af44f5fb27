#pragma once
// Device helpers of the verification (spec §3.7) shared by the sampling kernels, which verify a
// list row while they hold its kept list (verifyListRowWarp), and by spec_verify.cu's walk
// kernel, which verifies the other rows and walks the chains. One definition of each formula, so
// both give the reference's bits.
#include <cuda_runtime.h>

#include "common/rng.h"
#include "kernels/cp_async.cuh"
#include "kernels/sampling_device.h"
#include "kernels/sampling_math.h"
#include "kernels/spec_verify_chain.h"

namespace es::specVerify::dev {

using namespace es::sampling;
using namespace es::sampling::dev;

// Where uniform `lane` of `purpose` sits in a sequence's row of ChainInputs::uniforms: accept s
// (lane s), residual s (lane s), bonus (lane 0).
__device__ __forceinline__ int uniformSlot(const ChainInputs& c, RngPurpose purpose, int lane) {
  return purpose == RngPurpose::kAccept     ? lane
         : purpose == RngPurpose::kResidual ? c.L + lane
                                            : 2 * c.L;
}

// Uniform `lane` of `purpose` for sequence b.
__device__ __forceinline__ float chainUniform(const ChainInputs& c, int b, RngPurpose purpose,
                                              int lane) {
  if (c.uniforms)
    return c.uniforms[static_cast<size_t>(b) * (2 * c.L + 1) + uniformSlot(c, purpose, lane)];
  return request_uniform(c.seeds[b], c.anchors[b], purpose, static_cast<uint32_t>(lane));
}

__device__ __forceinline__ const int32_t* draftRow(const ChainInputs& c, int b) {  // [L]
  return c.drafts + static_cast<size_t>(b) * c.draftStride;
}

// Q_s of sequence b ([V]), or null for onehot drafts.
__device__ __forceinline__ const float* draftProbRow(const ChainInputs& c, int b, int s) {
  return c.draftProbs ? c.draftProbs + (static_cast<size_t>(b) * c.probsStride + s) * c.V : nullptr;
}

__device__ __forceinline__ float reluSub(float p, float q) {
  const float r = fsubRn(p, q);
  return r < 0.0f ? 0.0f : r;  // std::max(r, 0.0f) of the reference
}

// The accept test of a draft with target probability px, draft probability qx and uniform u:
// u <= min(1, px / qx) (alpha = 1 when qx <= kDraftProbFloor), and never when px = 0.
__device__ __forceinline__ bool acceptTest(float px, float qx, float u) {
  float alpha = 1.0f;
  if (!(qx <= kDraftProbFloor)) {
    const float ratio = fdivRn(px, qx);
    alpha = ratio < 1.0f ? ratio : 1.0f;
  }
  return px > 0.0f && u <= alpha;
}

// What list row `row` = (sequence b, position s) needs from memory besides its list, copied to
// shared memory (cp.async) by the sampling kernel as soon as it knows the row: the copies land
// while the row's top-k is selected, so the list's index sort does not wait for a DRAM round
// trip of warp 0.
struct alignas(16) ChainStage {
  int32_t x;   // draft s (s < L)
  float u[2];  // with ChainInputs::uniforms: accept s, and residual s (s < L) or bonus (s = L)
  int32_t unused;
  uint64_t seed;  // without uniforms: the sequence's seed and anchor
  int64_t anchor;
};

// Issues the copies of row `row`'s ChainStage: lanes 0-2 of the calling warp one each (the caller
// commits them as a group and waits for it before stagedListRowInputs).
__device__ __forceinline__ void stageListRowInputs(const ChainInputs& c, int row, ChainStage& st) {
  const int b = row / (c.L + 1), s = row - b * (c.L + 1);
  const int lane = laneId();
  const size_t ub = static_cast<size_t>(b) * (2 * c.L + 1);
  if (lane == 0 && s < c.L) kernel::cpAsyncSmall<4>(&st.x, draftRow(c, b) + s);
  if (c.uniforms) {
    if (lane == 1 && s < c.L) {
      kernel::cpAsyncSmall<4>(&st.u[0], c.uniforms + ub + uniformSlot(c, RngPurpose::kAccept, s));
    }
    if (lane == 2) {
      const int slot = s < c.L ? uniformSlot(c, RngPurpose::kResidual, s)
                               : uniformSlot(c, RngPurpose::kBonus, 0);
      kernel::cpAsyncSmall<4>(&st.u[1], c.uniforms + ub + slot);
    }
  } else {
    if (lane == 1) kernel::cpAsyncSmall<8>(&st.seed, c.seeds + b);
    if (lane == 2) kernel::cpAsyncSmall<8>(&st.anchor, c.anchors + b);
  }
}

// What verifyListRowWarp needs besides the list.
struct ListRowInputs {
  int x;           // draft s, or -1 for the bonus row (s = L)
  float uAccept;   // s < L
  float uDraw;     // the residual uniform of draft s, or the bonus uniform
  const float* q;  // Q_s ([V]), or null for onehot drafts and the bonus row
};

// Row `row`'s inputs from its landed ChainStage (one whole warp; every lane gets them). Without
// ChainInputs::uniforms lanes 0 and 1 evaluate the two counter-based uniforms side by side.
__device__ __forceinline__ ListRowInputs stagedListRowInputs(const ChainInputs& c, int row,
                                                             const ChainStage& st) {
  const int b = row / (c.L + 1), s = row - b * (c.L + 1);
  ListRowInputs in;
  in.x = s < c.L ? st.x : -1;
  in.q = s < c.L ? draftProbRow(c, b, s) : nullptr;
  if (c.uniforms) {
    in.uAccept = s < c.L ? st.u[0] : 0.0f;
    in.uDraw = st.u[1];
  } else {
    const int lane = laneId();
    float u = 0.0f;
    if (lane < 2) {
      const RngPurpose purpose = s == c.L    ? RngPurpose::kBonus
                                 : lane == 0 ? RngPurpose::kAccept
                                             : RngPurpose::kResidual;
      u = request_uniform(st.seed, st.anchor, purpose, static_cast<uint32_t>(s == c.L ? 0 : s));
    }
    in.uAccept = s < c.L ? __shfl_sync(kFull, u, 0) : 0.0f;
    in.uDraw = __shfl_sync(kFull, u, 1);
  }
  return in;
}

// A row (sequence b, position s) of a verification whose target row's kept list is
// idx/val[0, count) (index-sorted, in shared memory, count >= 1), verified by one warp with its
// inputs `in`: draft s's accept test and, if it fails, the residual sample max(P - Q_s, 0) (the
// target row when the residual's mass is <= kResidualMassFloor; outside the list P = 0, so the
// list holds all of the residual's mass); for s = L the bonus sample. res: [count] floats of
// shared memory this warp may overwrite. Returns (accepted, token) in every lane; token -1 for
// an accepted draft.
__device__ __forceinline__ int2 verifyListRowWarp(const ListRowInputs& in, const int32_t* idx,
                                                  const float* val, int count, float* res) {
  if (in.x < 0) return make_int2(0, sampleSortedListWarp(idx, val, count, in.uDraw));
  const int x = in.x;
  const float* q = in.q;
  const float qx = q ? q[x] : 1.0f;
  // p(x): the prob of the entry whose index is x (indices are unique: one lane at most), else 0.
  float px = 0.0f;
  bool hit = false;
  for (int i = laneId(); i < count; i += 32) {
    if (idx[i] == x) {
      px = val[i];
      hit = true;
    }
  }
  const unsigned lanes = __ballot_sync(kFull, hit);
  px = lanes ? __shfl_sync(kFull, px, __ffs(lanes) - 1) : 0.0f;
  if (acceptTest(px, qx, in.uAccept)) return make_int2(1, -1);

  for (int i = laneId(); i < count; i += 32) {
    res[i] = reluSub(val[i], q ? q[idx[i]] : (idx[i] == x ? 1.0f : 0.0f));
  }
  __syncwarp();
  const float mass = sortedListMassWarp(res, count);
  const int token = mass > kResidualMassFloor
                        ? sortedListSearchWarp(idx, res, count, fmulRn(in.uDraw, mass))
                        : sampleSortedListWarp(idx, val, count, in.uDraw);
  return make_int2(0, token);
}

}  // namespace es::specVerify::dev
