#pragma once
// The token the choosing kernels (argmax, sampleRows, specVerify) write for a row whose logits
// are not finite, when their params ask for it (flagNonFinite). Plain C++ header.
//
// A row is not finite when some logit is NaN or +inf, or every logit is -inf: exactly the rows
// the sampling math cannot turn into a distribution (spec §3.3's uniform fallback; for sampled
// rows this includes +inf produced by dividing a huge finite logit by the temperature). A -inf
// logit beside finite ones is legal: it is a masked token, probability 0, never the argmax.
// The kernels detect it from what they already compute (the row maximum with NaN largest, the
// fallback test), so the flag costs no extra pass; the token reaches the host in the step's one
// device-to-host copy, where the runtime ends that request with an error.
#include <cstdint>

namespace es {

// Never a vocabulary id: the runtime maps it to an error, the embedding kernels read it as a
// zero row, and a greedy accept never matches it against a drafted token.
inline constexpr int32_t kNonFiniteToken = -1;

}  // namespace es
