#include "common/json.h"

#include <set>
#include <string>
#include <vector>

#include "common/errors.h"

namespace es {

nlohmann::json parseJsonStrict(std::string_view text, std::string_view source) {
  using nlohmann::json;
  // One entry per open container: the keys seen so far (empty for arrays).
  std::vector<std::set<std::string>> open;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (open.size() >= static_cast<size_t>(kMaxJsonDepth)) {
          ES_THROW(FormatError, source, ": JSON nesting deeper than the limit ", kMaxJsonDepth);
        }
        open.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && parsed.is_string() &&
            !open.back().insert(parsed.get<std::string>()).second) {
          ES_THROW(FormatError, source, ": duplicate JSON key ",
                   quoteShort(parsed.get<std::string>()));
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    ES_THROW(FormatError, source, ": invalid JSON: ", e.what());
  }
}

}  // namespace es
