// The progress printer (common/progress.h) on an injected clock: the text of a line, nothing for
// work that ends within the delay, a line per interval otherwise, the in-place rewrite on a
// terminal (padding over a longer line, the newline at the end or when the printer goes away),
// and rates counted from where a task started.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/progress.h"

namespace es {
namespace {

ProgressUpdate prefill(int64_t done, int64_t total) {
  return {.task = "prefill", .unit = "tokens", .done = done, .total = total};
}

// A printer whose clock the test sets and whose output it reads.
struct Harness {
  explicit Harness(ProgressOptions options)
      : printer(
            options, [this](std::string_view text) { out.emplace_back(text); },
            [this] { return now; }) {}
  std::vector<std::string> out;
  double now = 0.0;
  ProgressPrinter printer;
};

TEST(Progress, LineText) {
  EXPECT_EQ(formatProgress(prefill(1024, 2048), 85.25, 12.0),
            "prefill: 1024/2048 tokens (50%), 85.2 tokens/s, 12.0 s left");
  EXPECT_EQ(formatProgress(prefill(0, 2048), 0.0, 0.5), "prefill: 0/2048 tokens (0%)");
  EXPECT_EQ(formatProgress(prefill(2048, 2048), 16.0, 128.4),
            "prefill: 2048/2048 tokens, 16.0 tokens/s, 2m08s");
  EXPECT_EQ(formatProgress(prefill(10, 1000), 2.5, 4.0),
            "prefill: 10/1000 tokens (1%), 2.50 tokens/s, 6m36s left");
  EXPECT_EQ(
      formatProgress({.task = "loading m", .unit = "layers", .done = 3, .total = 30}, 250.0, 0.012),
      "loading m: 3/30 layers (10%), 250 layers/s, 0.1 s left");
}

TEST(Progress, ShortWorkPrintsNothing) {
  Harness h({.delay = 1.0});
  for (int64_t done = 0; done <= 4; ++done) {
    h.now = 0.2 * static_cast<double>(done);  // ends at 0.8 s
    h.printer.report(prefill(done * 256, 1024));
  }
  EXPECT_TRUE(h.out.empty());
}

TEST(Progress, LinesEveryIntervalAfterTheDelayAndALastOne) {
  Harness h({.prefix = "[p] ", .delay = 1.0, .lineInterval = 5.0});
  h.printer.report(prefill(0, 1000));
  h.now = 0.9;
  h.printer.report(prefill(90, 1000));  // within the delay
  EXPECT_TRUE(h.out.empty());
  h.now = 2.0;
  h.printer.report(prefill(200, 1000));
  ASSERT_EQ(h.out.size(), 1u);
  EXPECT_EQ(h.out[0], "[p] prefill: 200/1000 tokens (20%), 100 tokens/s, 8.0 s left\n");
  h.now = 6.9;
  h.printer.report(prefill(690, 1000));  // 4.9 s after the last line
  EXPECT_EQ(h.out.size(), 1u);
  h.now = 7.0;
  h.printer.report(prefill(700, 1000));
  ASSERT_EQ(h.out.size(), 2u);
  EXPECT_EQ(h.out[1], "[p] prefill: 700/1000 tokens (70%), 100 tokens/s, 3.0 s left\n");
  h.now = 7.5;
  h.printer.report(prefill(1000, 1000));  // the end prints at once
  ASSERT_EQ(h.out.size(), 3u);
  EXPECT_EQ(h.out[2], "[p] prefill: 1000/1000 tokens, 133 tokens/s, 7.5 s\n");
}

TEST(Progress, WorkLongerThanTheDelayPrintsItsEndEvenWithNoLineBefore) {
  Harness h({.delay = 1.0});
  h.printer.report(prefill(0, 256));
  h.now = 3.0;  // one chunk of 3 s
  h.printer.report(prefill(256, 256));
  ASSERT_EQ(h.out.size(), 1u);
  EXPECT_EQ(h.out[0], "prefill: 256/256 tokens, 85.3 tokens/s, 3.0 s\n");
}

TEST(Progress, TerminalRewritesOneLine) {
  Harness h({.terminal = true, .delay = 1.0, .terminalInterval = 0.2});
  h.printer.report(prefill(0, 100));
  h.now = 1.0;
  h.printer.report(prefill(10, 100));
  h.now = 1.1;
  h.printer.report(prefill(11, 100));  // within the interval: no rewrite
  h.now = 2.0;
  h.printer.report(prefill(100, 100));
  ASSERT_EQ(h.out.size(), 2u);
  const std::string first = "prefill: 10/100 tokens (10%), 10.0 tokens/s, 9.0 s left";
  EXPECT_EQ(h.out[0], "\r" + first);
  const std::string last = "prefill: 100/100 tokens, 50.0 tokens/s, 2.0 s";
  ASSERT_LT(last.size(), first.size());
  EXPECT_EQ(h.out[1], "\r" + last + std::string(first.size() - last.size(), ' ') + "\n");
}

TEST(Progress, AnOpenTerminalLineEndsWithTheNextTaskOrThePrinter) {
  std::vector<std::string> out;
  double now = 0.0;
  {
    ProgressPrinter printer(
        {.terminal = true, .delay = 0.0}, [&](std::string_view t) { out.emplace_back(t); },
        [&] { return now; });
    now = 1.0;
    printer.report(prefill(5, 10));  // a task that stops short (an error)
    ASSERT_EQ(out.size(), 1u);
    now = 2.0;
    printer.report({.task = "loading m", .unit = "layers", .done = 1, .total = 2});
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[1], "\n");                             // the short task's line stays as it was
    EXPECT_EQ(out[2], "\rloading m: 1/2 layers (50%)");  // no rate at its first update
    now = 3.0;
    printer.report({.task = "loading m", .unit = "layers", .done = 2, .total = 2});
    now = 4.0;
    printer.report(prefill(1, 10));  // a new task, then the printer goes away mid-task
    ASSERT_EQ(out.back(), "\rprefill: 1/10 tokens (10%)");
  }
  EXPECT_EQ(out.back(), "\n");
}

TEST(Progress, RateCountsFromWhereTheTaskStarted) {
  Harness h({.delay = 0.0, .lineInterval = 0.0});
  h.printer.report(prefill(512, 1024));  // a reused prefix: 512 positions already there
  h.now = 2.0;
  h.printer.report(prefill(768, 1024));
  ASSERT_EQ(h.out.size(), 2u);
  EXPECT_EQ(h.out[1], "prefill: 768/1024 tokens (75%), 128 tokens/s, 2.0 s left\n");
  // done going back starts a new task (the next request's prefill) with its own clock.
  h.now = 10.0;
  h.printer.report(prefill(0, 1024));
  h.now = 11.0;
  h.printer.report(prefill(256, 1024));
  EXPECT_EQ(h.out.back(), "prefill: 256/1024 tokens (25%), 256 tokens/s, 3.0 s left\n");
}

}  // namespace
}  // namespace es
