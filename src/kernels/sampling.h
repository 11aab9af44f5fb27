#pragma once
// Logits -> filtered probabilities (temperature, top-k, top-p nucleus/truncate) and sampling of
// rows from counter-based uniforms (spec §3.1-3.6, §3.8). Plain C++ header: no CUDA includes.
//
// Paths: 0 < V <= 4096 uses the small-vocab path (one CTA per row, row in shared memory, MSB
// radix select + bitonic sort); otherwise the general path (row split across CTAs, per-chunk
// radix select of candidates, then one CTA per row; or a multi-pass radix threshold search when
// top-k is off / k > 512). `path` overrides the choice for tests. Semantics: docs/sampling.md.
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/rng.h"
#include "common/stream.h"
#include "kernels/sampling_non_finite.h"

namespace es {

enum class TopPMode : int32_t {
  kNucleus = 0,   // smallest descending prefix whose mass reaches p, renormalised (default)
  kTruncate = 1,  // budget p*S, boundary token partially kept, renormalised by the budget
};

enum class SamplingPath : int32_t { kAuto = 0, kGeneral = 1, kSmallVocab = 2 };

inline constexpr int32_t kSmallVocabMax = 4096;    // small-vocab path serves 0 < V <= this
inline constexpr int32_t kMaxCandidateTopK = 512;  // candidate (sorted) mode serves k <= this

struct SamplingParams {
  const void* logits = nullptr;     // [batch, vocab] logitsDtype (rows contiguous)
  DType logitsDtype = DType::kF32;  // kF32 or kF16
  int32_t batch = 0;
  int32_t vocab = 0;

  // Scalars used for every row whose per-request array is null (arrays: [batch /
  // rowsPerRequest], see rowsPerRequest).
  float temperature = 1.0f;             // >= 0; < 1e-3 means greedy
  int32_t topK = 0;                     // <= 0 or >= vocab: off
  float topP = 1.0f;                    // (0, 1]; >= 1 - 1e-6: off
  const float* temperatures = nullptr;  // [batch] f32 or null
  const int32_t* topKs = nullptr;       // [batch] i32 or null
  const float* topPs = nullptr;         // [batch] f32 or null
  TopPMode topPMode = TopPMode::kNucleus;

  // Rows per request (>= 1, divides batch): row r takes its per-request entries (temperatures,
  // topKs, topPs, seeds, positions) from index r / rowsPerRequest. A drafted block samples
  // its BS rows as one request's.
  int32_t rowsPerRequest = 1;

  // Uniforms for the inverse CDF: either given, or computed as request_uniform(seeds[q],
  // positions[q], purpose, r % rowsPerRequest) for row r of request q (same bits host and
  // device; spec §3.6: a plain sample is kTarget lane 0, draft proposals kProposal lane = row).
  const float* uniforms = nullptr;     // [batch] f32 in (0, 1), or null
  const uint64_t* seeds = nullptr;     // [batch / rowsPerRequest] u64 (when uniforms is null)
  const int64_t* positions = nullptr;  // [batch / rowsPerRequest] i64 absolute position of the
                                       // last token
  RngPurpose purpose = RngPurpose::kTarget;

  int32_t* tokens = nullptr;  // [batch] i32 out, or null (probabilities only)
  float* probs = nullptr;     // [batch, vocab] f32 out, or null (tokens only)
  // true: a uniform-fallback row (NaN or +inf among its scaled logits, or all -inf: its logits
  // are not finite) gets the token kNonFiniteToken instead of a uniform sample (the target's
  // rows, which the runtime turns into an error); its probs stay uniform either way.
  bool flagNonFinite = false;

  // Device scratch of samplingWorkspaceBytes(*this) bytes (general path); no initialisation
  // needed, nothing kept between calls. May be null when that size is 0.
  void* workspace = nullptr;
  size_t workspaceBytes = 0;

  SamplingPath path = SamplingPath::kAuto;
};

// Throws es::InvalidArgument naming `where`, the argument, its value and the limit.
// `device_pointers` false skips nothing: both host (reference) and device calls use it.
void validateSamplingParams(const SamplingParams& p, const char* where);

// Bytes of device workspace sampleRows() needs for these parameters (depends on batch, vocab,
// path and whether topK is per-row). Host function, every build.
size_t samplingWorkspaceBytes(const SamplingParams& p);

namespace kernel {
// Launch on `stream` (CUDA builds only). Validates first; never synchronises.
void sampleRows(const SamplingParams& p, cudaStream_t stream);
}  // namespace kernel

namespace ref {
// CPU reference with the same parameters on host pointers (workspace and path ignored).
void sampleRows(const SamplingParams& p);

// One row, exposed for the verification reference and the tests.
// Writes probs[vocab]; returns true when the row took the uniform fallback (its logits are not
// finite, kernels/sampling_non_finite.h).
bool rowProbs(const float* logitsF32, int32_t vocab, float temperature, int32_t topK, float topP,
              TopPMode mode, float* probs);
// Inverse CDF of spec §3.5 (fp32 running sum in index order, strict >, skip <= 0, fallback to
// the last positive index). Returns -1 only for a row with no positive entry.
int32_t sampleFromProbs(const float* probs, int32_t vocab, float u);
}  // namespace ref

}  // namespace es
