// The DFlash draft (CPU backend, f32) against the PyTorch oracle's committed fixture
// (tests/data/models/dflash_tiny, made by tools/dflash_reference.py with transformers' Qwen3 as
// the target): a 4-layer target tapped at layers [1, 3] (3 is the last: its tap must be taken
// before the final norm), a 2-layer draft with its own heads and RoPE, block 8, two sequences.
//   round 0  ragged prefill of prompts of 150 and 123 tokens (the first crosses a page), context
//            = the prefill rows, a block per sequence with the fixture's anchors;
//   round 1  a verify-shaped target forward of 8 rows per sequence, of which 3 resp. 8 are
//            committed (the rest are padding rows of the delta; sequence 1's rows cross a page),
//            a second delta and a second block (its scratch K/V overwrite round 0's).
// Checked: the target's taps of every committed row, and per round the draft logits of every
// block row (relative to the row's scale) and their argmax (identical except near-ties of the
// fixture's f32 logits, counted and bounded). A missing fixture is a failure, not a skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/dflash_oracle_scenario.h"
#include "model/safetensors.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/test_util.h"

namespace es::model {
namespace {

using namespace oracle;

// f32 on both sides, different summation orders: logits agree to ~1e-6 of their scale.
constexpr double kLogitTolerance = 2e-4;  // max |got − want| / max(1, max |want|), per row
constexpr double kTapTolerance = 1e-4;    // the same over each tap row
constexpr double kNearTie = 1e-3;         // fixture top-1/top-2 margin (logit units)
constexpr int kMaxNearTies = 2;

// max |got − want| / max(1, max |want|) over n values.
double scaledError(const float* got, const float* want, int64_t n) {
  double worst = 0, scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return worst / scale;
}

TEST(DFlashOracle, FixtureIsConsistent) {
  const Fixture fx = loadFixture();
  ASSERT_EQ(fx.seqs.size(), 2u);
  EXPECT_GT(fx.seqs[0].prompt.size(), static_cast<size_t>(kv::kTokensPerPage));  // crosses a page
  const int64_t rows = static_cast<int64_t>(fx.seqs.size()) * fx.blockSize;
  for (int r = 0; r < 2; ++r) {
    const TensorView v = fx.reference.view("logits_round" + std::to_string(r));
    ASSERT_EQ(v.dtype, DType::kF32);
    ASSERT_EQ(v.numel(), rows * fx.vocab);
    ASSERT_EQ(static_cast<int64_t>(fx.rounds[r].argmax.size()), rows);
    const float* l = v.as<float>();
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = l + i * fx.vocab;
      EXPECT_EQ(std::max_element(row, row + fx.vocab) - row,
                fx.rounds[r].argmax[static_cast<size_t>(i)]);
    }
    // Block rows differ from each other (attention and positions make them so).
    EXPECT_NE(std::vector<float>(l, l + fx.vocab),
              std::vector<float>(l + fx.vocab, l + 2 * fx.vocab));
  }
  for (size_t b = 0; b < fx.seqs.size(); ++b) {
    const TensorView t = fx.reference.view("taps_seq" + std::to_string(b));
    ASSERT_EQ(t.rank, 3);
    EXPECT_EQ(t.dim(0), static_cast<int64_t>(fx.taps.size()));
    EXPECT_EQ(t.dim(1), fx.rounds[1].blockStarts[b]);
    EXPECT_EQ(t.dim(2), fx.hidden);
  }
}

TEST(DFlashOracle, CpuDraftMatchesPyTorch) {
  const Fixture fx = loadFixture();
  auto backend = ops::makeCpuBackend();
  const Outcome out = runScenario(*backend, fx);
  const int32_t B = static_cast<int32_t>(fx.seqs.size()), BS = fx.blockSize, V = fx.vocab,
                H = fx.hidden;

  double worstTap = 0;
  for (int32_t b = 0; b < B; ++b) {
    const TensorView want = fx.reference.view("taps_seq" + std::to_string(b));
    const std::vector<float>& got = out.taps[static_cast<size_t>(b)];
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << "sequence " << b;
    for (int64_t row = 0; row < want.numel() / H; ++row) {
      const double e = scaledError(got.data() + row * H, want.as<float>() + row * H, H);
      worstTap = std::max(worstTap, e);
      EXPECT_LT(e, kTapTolerance) << "sequence " << b << " tap row " << row;
    }
  }

  int nearTies = 0;
  double worstLogit = 0;
  for (int r = 0; r < 2; ++r) {
    const DraftProposal& p = out.proposals[r];
    const float* want = fx.reference.view("logits_round" + std::to_string(r)).as<float>();
    ASSERT_EQ(p.logits.size(), static_cast<size_t>(B) * BS * V);
    ASSERT_EQ(p.tokens.size(), static_cast<size_t>(B) * BS);
    for (int32_t row = 0; row < B * BS; ++row) {
      const int64_t at = static_cast<int64_t>(row) * V;
      const double e = scaledError(p.logits.data() + at, want + at, V);
      worstLogit = std::max(worstLogit, e);
      EXPECT_LT(e, kLogitTolerance)
          << "round " << r << " sequence " << row / BS << " row " << row % BS;
      if (fx.rounds[r].margins[static_cast<size_t>(row)] < kNearTie) {
        ++nearTies;
        continue;
      }
      EXPECT_EQ(p.tokens[static_cast<size_t>(row)], fx.rounds[r].argmax[static_cast<size_t>(row)])
          << "round " << r << " sequence " << row / BS << " row " << row % BS;
    }
  }
  EXPECT_LE(nearTies, kMaxNearTies);
  std::printf(
      "DFlash oracle (CPU): worst tap error %.2e, worst logit error %.2e, %d near-ties of %d "
      "rows\n",
      worstTap, worstLogit, nearTies, 2 * B * BS);
}

}  // namespace
}  // namespace es::model
