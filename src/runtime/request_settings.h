#pragma once
// The settings a user gives each request (its length and how tokens are sampled), their bounds,
// and the one parser and validation every front end uses: the CLI's flags, --input-file's
// entries and any server's request body. A value gets the same answer and the same message
// wherever it comes from; only the name differs (the flag "--top-k", the field "top_k").
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/generation.h"

namespace es::runtime {

// Above 100 the softmax is uniform to float precision: the text is noise, not a choice.
inline constexpr double kMaxTemperature = 100.0;
// Far above any vocabulary a released model has; a top-k of the vocabulary or more keeps every
// token, as 0 does.
inline constexpr int64_t kMaxTopK = int64_t{1} << 20;
inline constexpr int64_t kMaxNewTokensLimit = int64_t{1} << 20;

enum class RequestField { kMaxNewTokens, kTemperature, kTopK, kTopP, kSeed };

// How an error names a field: a command-line flag ("--max-new-tokens") or a request's key
// ("max_new_tokens").
enum class FieldNaming { kFlag, kKey };

std::string_view requestFieldKey(RequestField field);  // "max_new_tokens", "top_k", ...
std::string requestFieldName(RequestField field, FieldNaming naming);
// The field's bound as an error states it, e.g. "must be an integer in [0, 1048576] (0 = off)".
std::string requestFieldRequirement(RequestField field);

// A request's settings in types wide enough that no value wraps or rounds into range on the way
// in: validateRequestSettings checks them, toSamplingConfig narrows them for the decoder.
struct RequestSettings {
  int64_t maxNewTokens = 128;  // [1, kMaxNewTokensLimit]
  double temperature = 0.0;    // finite, [0, kMaxTemperature]; below 1e-3 greedy
  int64_t topK = 0;            // [0, kMaxTopK]; 0 = off
  double topP = 1.0;           // (0, 1]; 1 = off
  uint64_t seed = 0;           // any 64-bit value
};

// Reads `text` (decimal, strictly: common/number_text.h) as `field`'s value into `settings`;
// text that is not such a number (a negative or too large seed, "5abc", "1.5" for an integer
// field) is an InvalidArgument "<where>: <name> = <text> <requirement>", the same message as a
// value outside the bounds.
void setRequestField(RequestSettings& settings, RequestField field, std::string_view text,
                     std::string_view where, FieldNaming naming);

// Every bound above; the first broken one is an InvalidArgument
// "<where>: argument '--top-k' = -3 must be an integer in [0, 1048576] (0 = off)" (a flag) or
// "<where>: field 'top_k' = -3 must be ..." (a key).
void validateRequestSettings(const RequestSettings& settings, std::string_view where,
                             FieldNaming naming);

// The decoder's form of validated settings.
SamplingConfig toSamplingConfig(const RequestSettings& settings);

}  // namespace es::runtime
