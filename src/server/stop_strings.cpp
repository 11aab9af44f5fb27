#include "server/stop_strings.h"

#include <algorithm>

namespace es::server {
namespace {

// The largest position <= pos that starts a UTF-8 character of `s` (not a continuation byte).
size_t characterStart(const std::string& s, size_t pos) {
  while (pos > 0 && pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

// The longest tail of `text` that is a proper prefix of `stop`: what could still grow into it.
size_t partialMatch(const std::string& text, const std::string& stop) {
  for (size_t k = std::min(text.size(), stop.size() - 1); k > 0; --k) {
    if (text.compare(text.size() - k, k, stop, 0, k) == 0) return k;
  }
  return 0;
}

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    if (!s.empty()) holdBack_ = std::max(holdBack_, s.size() - 1);
  }
}

std::string StopStringMatcher::push(std::string_view piece) {
  if (stopped_ || piece.empty()) return {};
  // Only matches that end in the new piece are new: they start at most longest − 1 bytes back.
  const size_t from = text_.size() > holdBack_ ? text_.size() - holdBack_ : 0;
  text_.append(piece);
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    if (!s.empty()) cut = std::min(cut, text_.find(s, from));
  }
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
    return shownUpTo(text_.size());
  }
  size_t held = 0;
  for (const std::string& s : stops_) {
    if (!s.empty()) held = std::max(held, partialMatch(text_, s));
  }
  return shownUpTo(characterStart(text_, text_.size() - held));
}

std::string StopStringMatcher::finish() { return shownUpTo(text_.size()); }

std::string StopStringMatcher::shownUpTo(size_t end) {
  if (end <= shown_) return {};
  std::string out = text_.substr(shown_, end - shown_);
  shown_ = end;
  return out;
}

}  // namespace es::server
