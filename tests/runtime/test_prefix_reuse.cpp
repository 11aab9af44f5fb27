// Prefix reuse end to end on the CPU backend: a sequence of generate() calls whose prompts share
// prefixes (two blocks then diverging; a page-aligned prompt fully matched; a prompt extending
// an earlier request's prompt and generated tokens, so blocks written by decode steps are
// reused; two requests of one batch sharing a block; prompts that force evictions) gives
// exactly the greedy tokens of the same calls without reuse, for plain decoding and with a
// DFlash draft (whose proposals must be identical too: they depend on the reused draft
// context), while the reused prompt rows are really not computed again. Freshly allocated pages
// are poisoned with NaN, so a page-table row pointing at a page nobody wrote shows.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/random_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/prefill.h"
#include "support/forwarding_proposer.h"
#include "support/prefill_logits.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

constexpr int32_t kMaxTokens = 96;  // prefill chunks of 96 rows: chunk boundaries move with reuse

kv::KvCacheConfig cacheConfig(const model::TargetModel& target, const model::DFlashDraft* draft,
                              int64_t retained) {
  kv::KvCacheConfig c;
  c.maxBatchSize = 2;
  c.maxSequenceLength = 512;
  c.dtype = DType::kF32;
  c.baseLayers = target.kvLayerShapes();
  if (draft) c.draftLayers = draft->kvLayerShapes();
  c.prefixCachePages = retained;
  return c;
}

// Without reuse every page is fresh: all of them hold NaN until written.
void poisonAllPools(kv::KvCacheManager& cache) {
  for (size_t l = 0; l < cache.plan().base.size(); ++l) {
    std::memset(cache.basePool(static_cast<int32_t>(l)).data, 0xFF,
                static_cast<size_t>(cache.plan().base[l].bytes));
  }
  for (size_t l = 0; l < cache.plan().draft.size(); ++l) {
    std::memset(cache.draftPool(static_cast<int32_t>(l)).data, 0xFF,
                static_cast<size_t>(cache.plan().draft[l].bytes));
  }
}

std::vector<int32_t> randomTokens(std::mt19937& rng, int32_t n) {
  return test::randomInts(rng, static_cast<size_t>(n), 0, 382);  // 383: the draft's mask token
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Logs every proposal of the wrapped proposer (CPU backend: its output is host memory).
class RecordingProposer final : public test::ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  void propose(const model::DraftProposalInputs& inputs, kv::KvCacheManager& cache) override {
    ForwardingProposer::propose(inputs, cache);
    const int32_t* out = inputs.argmaxOut;
    const int32_t rows =
        inputs.rowsPerBlock == 0 ? blockSize() : inputs.rowsPerBlock;  // [B, W] written
    log.emplace_back(out, out + static_cast<ptrdiff_t>(inputs.batchSize) * rows);
  }
  std::vector<std::vector<int32_t>> log;
};

struct Scenario {
  std::vector<std::vector<GenerationResult>> outputs;  // per call
  std::vector<int64_t> prefillRows, reusedTokens;      // per call
  std::vector<std::vector<int64_t>> histograms;        // per call
  std::vector<std::vector<int32_t>> proposals;
  int64_t evictions = 0;
};

// The prompts of the calls (one seed); D extends A's prompt and answer, so it is built late.
struct Prompts {
  std::vector<int32_t> a, bTail, dTail, e, fTail, g, h;
  Prompts() {
    std::mt19937 rng(11);
    a = randomTokens(rng, 300);
    bTail = randomTokens(rng, 100);
    dTail = randomTokens(rng, 50);
    e = randomTokens(rng, 200);
    fTail = randomTokens(rng, 30);
    g = randomTokens(rng, 400);
    h = randomTokens(rng, 400);
  }
};

constexpr int32_t kCalls = 6;

std::vector<GenerationRequest> callRequests(
    int32_t index, const Prompts& p, const std::vector<std::vector<GenerationResult>>& done) {
  auto req = [](std::vector<int32_t> prompt, int32_t maxNew) {
    GenerationRequest q;
    q.prompt = std::move(prompt);
    q.maxNewTokens = maxNew;
    return q;
  };
  const std::vector<int32_t> a256(p.a.begin(), p.a.begin() + 256);
  switch (index) {
    case 0:
      return {req(p.a, 100)};  // 300 + 100: block 2 partly decoded
    case 1:
      return {req(cat(a256, p.bTail), 20), req(a256, 20)};  // 2 blocks then diverges; aligned
    case 2:
      return {req(cat(cat(p.a, done[0][0].tokens), p.dTail), 20)};  // reuses decode-written K/V
    case 3:
      return {req(p.e, 20), req(cat({p.e.begin(), p.e.begin() + 128}, p.fTail), 20)};  // one batch
    case 4:
      return {req(p.g, 20), req(p.h, 20)};  // fresh: pages run out in a tight pool
    default:
      return {req(a256, 20)};
  }
}

Scenario runScenario(model::TargetModel& target, model::DFlashDraft* draft, int64_t retained) {
  kv::KvCacheManager cache(cacheConfig(target, draft, retained), MemorySpace::kHost);
  if (retained > 0) {
    cache.setPoisonFreshPages(true);
  } else {
    poisonAllPools(cache);
  }
  std::unique_ptr<DFlashProposer> dflash;
  std::unique_ptr<RecordingProposer> recorder;
  if (draft) {
    dflash = std::make_unique<DFlashProposer>(*draft);
    recorder = std::make_unique<RecordingProposer>(*dflash);
  }
  DecodeEngine engine(target, cache, recorder.get());
  const Prompts prompts;
  Scenario s;
  for (int32_t i = 0; i < kCalls; ++i) {
    s.outputs.push_back(engine.generate(callRequests(i, prompts, s.outputs)));
    s.prefillRows.push_back(engine.stats().prefillRows);
    s.reusedTokens.push_back(engine.stats().reusedTokens);
    s.histograms.push_back(engine.stats().acceptHistogram);
  }
  if (recorder) s.proposals = recorder->log;
  if (cache.prefixCache()) s.evictions = cache.prefixCache()->evictions();
  return s;
}

void expectIdenticalRuns(const Scenario& off, const Scenario& on, const char* what) {
  SCOPED_TRACE(what);
  for (int32_t i = 0; i < kCalls; ++i) {
    const auto& a = off.outputs[static_cast<size_t>(i)];
    const auto& b = on.outputs[static_cast<size_t>(i)];
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
      EXPECT_EQ(b[r].tokens, a[r].tokens) << "call " << i << " request " << r;
      EXPECT_EQ(b[r].finish, a[r].finish);
    }
    EXPECT_EQ(on.histograms[static_cast<size_t>(i)], off.histograms[static_cast<size_t>(i)])
        << "call " << i;
    // Reused rows are not computed again: the rest of each prompt is.
    EXPECT_EQ(on.prefillRows[static_cast<size_t>(i)] + on.reusedTokens[static_cast<size_t>(i)],
              off.prefillRows[static_cast<size_t>(i)])
        << "call " << i;
    EXPECT_EQ(off.reusedTokens[static_cast<size_t>(i)], 0);
  }
  // The draft's proposals read its context K/V, reused pages included: the same proposals show
  // that the reused draft context is the one the request would have computed.
  EXPECT_EQ(on.proposals.size(), off.proposals.size());
  EXPECT_TRUE(on.proposals == off.proposals);
}

class PrefixReuseEngine : public ::testing::TestWithParam<bool> {};

TEST_P(PrefixReuseEngine, GreedyOutputsAreIdenticalWithAndWithoutReuse) {
  const bool withDraft = GetParam();
  const std::string targetDir = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path draftDir =
      std::filesystem::temp_directory_path() / "es_prefix_reuse_draft";
  auto backend = ops::makeCpuBackend();
  std::vector<int32_t> taps;
  if (withDraft) {
    model::test_draft::DraftSpec spec;
    spec.blockSize = 4;
    model::test_draft::writeDraft(draftDir, spec);
    taps = model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(targetDir));
  }
  model::TargetModel target(targetDir, *backend, kMaxTokens, taps);
  std::unique_ptr<model::DFlashDraft> draft;
  if (withDraft)
    draft = std::make_unique<model::DFlashDraft>(draftDir, *backend, target, kMaxTokens, 2);

  const Scenario off = runScenario(target, draft.get(), 0);
  const Scenario on = runScenario(target, draft.get(), 16);    // room for every record
  const Scenario tight = runScenario(target, draft.get(), 1);  // records get evicted
  expectIdenticalRuns(off, on, "16 retained pages");
  expectIdenticalRuns(off, tight, "1 retained page");
  if (withDraft) {
    EXPECT_GT(off.proposals.size(), 100u);
    std::filesystem::remove_all(draftDir);
  }
  // What each call reuses: nothing; A's 2 blocks for B and 1 for the aligned copy (its last
  // block is recomputed); A's 3 blocks (prompt and answer) for D; E's first block for F.
  EXPECT_EQ(on.reusedTokens[0], 0);
  EXPECT_EQ(on.reusedTokens[1], 256 + 128);
  EXPECT_EQ(on.reusedTokens[2], 384);
  EXPECT_EQ(on.reusedTokens[3], 128);
  EXPECT_EQ(on.evictions, 0);
  EXPECT_GT(tight.evictions, 0);
}

INSTANTIATE_TEST_SUITE_P(PlainAndDFlash, PrefixReuseEngine, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "DFlash" : "Plain"; });

// The reused prefix's K/V is the data the request would compute: the suffix's prefill, which
// starts at another chunk boundary (256 vs 0, 96, 192, 288), gives bit-identical logits.
TEST(PrefixReuse, SuffixPrefillLogitsAreBitIdentical) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, kMaxTokens);
  std::mt19937 rng(5);
  const std::vector<int32_t> first = randomTokens(rng, 300);
  const std::vector<int32_t> second =
      cat({first.begin(), first.begin() + 256}, randomTokens(rng, 80));

  kv::KvCacheManager reuse(cacheConfig(target, nullptr, 4), MemorySpace::kHost);
  reuse.setPoisonFreshPages(true);
  const int32_t s0 = reuse.admit(first, 300, false).slot;
  prefillSequence(target, reuse, s0, first);
  EXPECT_EQ(reuse.publish(s0, first), 2);
  reuse.retireAndCompact(std::vector<uint8_t>{0});
  const kv::KvCacheManager::Admission a = reuse.admit(second, 336, false);
  ASSERT_EQ(a.reusedTokens, 256);
  // The reused rows are refused as a prefill start: writing them would change shared pages.
  test::expectInvalidArgument([&] { prefillSequence(target, reuse, a.slot, second, {}, 0); },
                              "firstPosition");
  const std::vector<float> reused =
      test::prefillLogits(target, reuse, a.slot, second, a.reusedTokens);

  kv::KvCacheManager fresh(cacheConfig(target, nullptr, 0), MemorySpace::kHost);
  poisonAllPools(fresh);
  const std::vector<float> full = test::prefillLogits(target, fresh, fresh.admit(), second);
  ASSERT_EQ(reused.size(), full.size());
  EXPECT_EQ(std::memcmp(reused.data(), full.data(), full.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace es::runtime
