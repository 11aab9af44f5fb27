#pragma once
// Stop strings on a stream of text: the answer ends before the first occurrence of any stop
// string, which is never shown. Text arrives in pieces (one per token); a piece may complete a
// stop string begun in earlier pieces, so a tail of the text that is the beginning of a stop
// string is held back until it no longer can be. Held-back text never splits a UTF-8 character
// (whole characters go in, and the held tail starts at a character boundary).
#include <string>
#include <string_view>
#include <vector>

namespace es::server {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Adds a piece of text; returns the text that may be shown now. Once a stop string is found,
  // stopped() is true and later pieces are ignored.
  std::string push(std::string_view piece);
  // The end of the answer: returns the held-back rest.
  std::string finish();

  bool stopped() const { return stopped_; }
  // The answer so far (everything pushed, cut before a found stop string).
  const std::string& text() const { return text_; }

 private:
  std::string shownUpTo(size_t end);

  std::vector<std::string> stops_;
  std::string text_;
  size_t holdBack_ = 0;  // longest stop − 1: how far back a new match may start
  size_t shown_ = 0;     // bytes of text_ returned so far
  bool stopped_ = false;
};

}  // namespace es::server
