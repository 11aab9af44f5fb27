// Stop strings on streamed text: text that could begin a stop string is held back, a stop string
// split over pieces is found, the answer ends before it, nothing after it is shown, and held
// bytes never split a UTF-8 character.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/stop_strings.h"

namespace es::server {
namespace {

// Pushes `pieces`, then finishes; returns what was shown, piece by piece joined.
std::string run(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::string shown;
  for (const std::string& p : pieces) shown += m.push(p);
  return shown + m.finish();
}

TEST(StopStrings, NoStopsPassesEverythingAtOnce) {
  StopStringMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.push("def"), "def");
  EXPECT_EQ(m.finish(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, HoldsBackAPossibleStart) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.push("abcE"), "abc");  // "E" could begin "END"
  EXPECT_EQ(m.push("N"), "");        // "EN" too
  EXPECT_EQ(m.push("x"), "ENx");     // "ENx" cannot
  EXPECT_EQ(m.push("EE"), "E");      // the second E could
  EXPECT_EQ(m.finish(), "E");
}

TEST(StopStrings, FindsAStopSplitAcrossPieces) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(run(m, {"hello E", "N", "D tail", "more"}), "hello ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "hello ");
}

TEST(StopStrings, TheEarliestOfSeveralStopsWins) {
  StopStringMatcher m({"zz", "b"});
  EXPECT_EQ(run(m, {"aazz", "b"}), "aa");
  StopStringMatcher n({"long stop", "s"});
  EXPECT_EQ(run(n, {"a long s"}), "a long ");
}

TEST(StopStrings, PiecesAfterTheStopAreIgnored) {
  StopStringMatcher m({"."});
  EXPECT_EQ(m.push("One. Two"), "One");
  EXPECT_EQ(m.push("three"), "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopStrings, HeldBytesDoNotSplitACharacter) {
  // The stop begins with é's last byte: a tail of one byte would cut é in two.
  StopStringMatcher m(
      {"\xA9"
       "z"});
  const std::string shown = m.push("a\xC3\xA9");
  EXPECT_EQ(shown, "a");
  EXPECT_EQ(shown + m.finish(), "a\xC3\xA9");
}

TEST(StopStrings, AStopAtTheVeryStartGivesNothing) {
  StopStringMatcher m({"<|"});
  EXPECT_EQ(run(m, {"<", "|x"}), "");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace es::server
