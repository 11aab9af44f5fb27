#include "runtime/request_settings.h"

#include <cmath>
#include <limits>
#include <optional>

#include "common/errors.h"
#include "common/number_text.h"

namespace es::runtime {
namespace {

// The value as an error shows it: a request file may hold megabytes in one field.
std::string shownValue(std::string_view text) {
  constexpr size_t kMax = 64;
  return text.size() <= kMax ? std::string(text) : std::string(text.substr(0, kMax)) + "...";
}

[[noreturn]] void fail(RequestField field, std::string_view where, FieldNaming naming,
                       std::string_view value) {
  const std::string name = requestFieldName(field, naming);
  throw InvalidArgument(
      detail::concat(where, ": ", naming == FieldNaming::kFlag ? "argument '" : "field '", name,
                     "' = ", shownValue(value), " ", requestFieldRequirement(field)));
}

[[noreturn]] void fail(RequestField field, std::string_view where, FieldNaming naming,
                       int64_t value) {
  fail(field, where, naming, std::string_view(std::to_string(value)));
}

[[noreturn]] void fail(RequestField field, std::string_view where, FieldNaming naming,
                       double value) {
  fail(field, where, naming, std::string_view(formatDouble(value)));
}

}  // namespace

std::string_view requestFieldKey(RequestField field) {
  switch (field) {
    case RequestField::kMaxNewTokens:
      return "max_new_tokens";
    case RequestField::kTemperature:
      return "temperature";
    case RequestField::kTopK:
      return "top_k";
    case RequestField::kTopP:
      return "top_p";
    case RequestField::kSeed:
      return "seed";
  }
  return "?";
}

std::string requestFieldName(RequestField field, FieldNaming naming) {
  std::string name(requestFieldKey(field));
  if (naming == FieldNaming::kKey) return name;
  for (char& c : name) c = c == '_' ? '-' : c;
  return "--" + name;
}

std::string requestFieldRequirement(RequestField field) {
  switch (field) {
    case RequestField::kMaxNewTokens:
      return detail::concat("must be an integer in [1, ", kMaxNewTokensLimit, "]");
    case RequestField::kTemperature:
      return detail::concat("must be a finite number in [0, ", kMaxTemperature, "] (0 = greedy)");
    case RequestField::kTopK:
      return detail::concat("must be an integer in [0, ", kMaxTopK, "] (0 = off)");
    case RequestField::kTopP:
      return "must be a number in (0, 1] (1 = off)";
    case RequestField::kSeed:
      return detail::concat("must be an integer in [0, ", std::numeric_limits<uint64_t>::max(),
                            "]");
  }
  return "";
}

void setRequestField(RequestSettings& s, RequestField field, std::string_view text,
                     std::string_view where, FieldNaming naming) {
  switch (field) {
    case RequestField::kMaxNewTokens:
    case RequestField::kTopK: {
      const std::optional<int64_t> v = parseInt64(text);
      if (!v) fail(field, where, naming, text);
      (field == RequestField::kTopK ? s.topK : s.maxNewTokens) = *v;
      return;
    }
    case RequestField::kTemperature:
    case RequestField::kTopP: {
      const std::optional<double> v = parseDouble(text);
      if (!v) fail(field, where, naming, text);
      (field == RequestField::kTopP ? s.topP : s.temperature) = *v;
      return;
    }
    case RequestField::kSeed: {
      const std::optional<uint64_t> v = parseUint64(text);
      if (!v) fail(field, where, naming, text);
      s.seed = *v;
      return;
    }
  }
}

void validateRequestSettings(const RequestSettings& s, std::string_view where, FieldNaming naming) {
  if (s.maxNewTokens < 1 || s.maxNewTokens > kMaxNewTokensLimit) {
    fail(RequestField::kMaxNewTokens, where, naming, s.maxNewTokens);
  }
  // NaN fails both comparisons' negation: !(t >= 0) catches it.
  if (!(s.temperature >= 0.0 && s.temperature <= kMaxTemperature)) {
    fail(RequestField::kTemperature, where, naming, s.temperature);
  }
  if (s.topK < 0 || s.topK > kMaxTopK) fail(RequestField::kTopK, where, naming, s.topK);
  // The decoder holds top-p as a float: a positive double that rounds to 0 is out of range too.
  if (!(s.topP > 0.0 && s.topP <= 1.0 && static_cast<float>(s.topP) > 0.0f)) {
    fail(RequestField::kTopP, where, naming, s.topP);
  }
}

SamplingConfig toSamplingConfig(const RequestSettings& s) {
  return {.temperature = static_cast<float>(s.temperature),
          .topK = static_cast<int32_t>(s.topK),
          .topP = static_cast<float>(s.topP),
          .seed = s.seed};
}

}  // namespace es::runtime
