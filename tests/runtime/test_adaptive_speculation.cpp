// An adaptive DecodeEngine (EngineOptions::adaptiveWidth: the SpeculationPolicy picks each
// greedy step's verify width, W = 1 included) gives every request the tokens a fixed-width
// engine gives it, greedy and sampled, in a batch that changes under it, with the replay draft
// and with a random DFlash draft; its steps really switch widths (exploring every second step),
// a sampled batch runs at its fixed width (the largest, or 1: then its tokens are those of
// decoding without a draft), and the draft's context stays that of every
// committed row across plain steps (its proposals equal a fixed-width run's at the same
// positions). The engine builder makes an adaptive decoder when asked, with --verify-width auto.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/random_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/engine_builder.h"
#include "runtime/replay_proposer.h"
#include "support/forwarding_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

constexpr int32_t kBatch = 3;  // fewer slots than requests: some wait in the queue
constexpr int32_t kBlock = 8;  // draft block size = the largest verify width

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch,
                           const model::DFlashDraft* draft = nullptr) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  if (draft) c.draftLayers = draft->kvLayerShapes();
  return c;
}

enum class Mode { kGreedy, kSampled, kMixed };

std::vector<GenerationRequest> requestsFor(Mode mode) {
  std::vector<GenerationRequest> rs = {
      {{5, 17, 99, 42, 7}, 40, {}, {}},
      {{11, 3}, 6, {}, {}},
      {{200, 201, 202, 17, 5, 9, 31}, 30, {}, {}},
      {{77, 78}, 36, {}, {}},
      {{9, 8, 7, 6}, 24, {}, {}},
  };
  for (size_t i = 0; i < rs.size(); ++i) {
    const bool sampled = mode == Mode::kSampled || (mode == Mode::kMixed && i % 2 == 1);
    if (sampled) rs[i].sampling = {1.2f, i == 2 ? 40 : 0, i == 4 ? 0.9f : 1.0f, 1000 + i};
  }
  return rs;
}

// Request i arrives before step 2·i; results by request.
std::vector<GenerationResult> runArrivals(DecodeEngine& engine,
                                          const std::vector<GenerationRequest>& rs) {
  const int32_t n = static_cast<int32_t>(rs.size());
  std::vector<GenerationResult> results(rs.size());
  std::map<RequestId, int32_t> indexOf;
  for (int32_t step = 0;; ++step) {
    if (step % 2 == 0 && step / 2 < n) {
      indexOf[engine.submit(rs[static_cast<size_t>(step / 2)], {}, step / 2)] = step / 2;
    }
    const bool more = engine.step();
    for (FinishedRequest& f : engine.takeFinished()) {
      results[static_cast<size_t>(indexOf.at(f.id))] = std::move(f.result);
    }
    if (!more && step / 2 >= n - 1) break;
  }
  return results;
}

int32_t widthsUsed(const SpeculationStats& s) {
  int32_t used = 0;
  for (int64_t steps : s.widthSteps) used += steps > 0;
  return used;
}

// The replay draft (30 % of its drafts corrupted) at fixed W = 8 and adaptive (W in 1, 2, 4,
// 8): equal tokens for every request of a changing batch.
void runReplay(Mode mode, int32_t sampledWidth = 0) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const int32_t V = static_cast<int32_t>(target.config().vocab_size);
  const std::vector<GenerationRequest> rs = requestsFor(mode);
  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(cacheFor(target, kBatch), MemorySpace::kHost);
    DecodeEngine engine(target, cache);
    plain = runArrivals(engine, rs);
  }
  const std::vector<std::vector<int32_t>> recordings = ReplayProposer::recordingsOf(rs, plain);
  auto run = [&](EngineOptions options, SpeculationStats* stats) {
    kv::KvCacheManager cache(cacheFor(target, kBatch), MemorySpace::kHost);
    ReplayProposer proposer(*backend, kBlock, kBatch, recordings, V, 0.3f, 7);
    DecodeEngine engine(target, cache, &proposer, options);
    std::vector<GenerationResult> out = runArrivals(engine, rs);
    *stats = engine.stats();
    EXPECT_EQ(cache.activeCount(), 0);
    return out;
  };
  SpeculationStats fixedStats, adaptiveStats;
  const std::vector<GenerationResult> fixed = run({.verifyWidth = kBlock}, &fixedStats);
  const std::vector<GenerationResult> adaptive = run(
      {.adaptiveWidth = true, .explorePeriod = 2, .sampledWidth = sampledWidth}, &adaptiveStats);
  // Sampled requests at sampledWidth 1: plain steps, the tokens of decoding without a draft.
  const std::vector<GenerationResult>& sampledWant = sampledWidth == 1 ? plain : fixed;
  for (size_t i = 0; i < rs.size(); ++i) {
    const bool greedy = isGreedy(rs[i].sampling);
    EXPECT_EQ(adaptive[i].tokens, greedy ? fixed[i].tokens : sampledWant[i].tokens)
        << "request " << i;
    EXPECT_EQ(adaptive[i].finish, greedy ? fixed[i].finish : sampledWant[i].finish)
        << "request " << i;
    if (greedy) EXPECT_EQ(adaptive[i].tokens, plain[i].tokens) << "request " << i;
  }
  if (sampledWidth == 1 && mode != Mode::kGreedy) {  // the fixed width's samples differ
    bool differs = false;
    for (size_t i = 0; i < rs.size(); ++i) differs = differs || fixed[i].tokens != plain[i].tokens;
    EXPECT_TRUE(differs);
  }
  ASSERT_EQ(adaptiveStats.widthSteps.size(), static_cast<size_t>(kBlock) + 1);
  EXPECT_EQ(fixedStats.widthSteps[kBlock], fixedStats.iterations);
  int64_t steps = 0;
  for (int64_t s : adaptiveStats.widthSteps) steps += s;
  EXPECT_EQ(steps, adaptiveStats.iterations);
  if (mode == Mode::kSampled) {
    // Every step holds a sampled request: all run at the sampled width.
    EXPECT_EQ(adaptiveStats.widthSteps[sampledWidth == 0 ? kBlock : sampledWidth],
              adaptiveStats.iterations);
  } else {
    // Greedy steps switch: the cpu prior starts plain, exploration tries W = 2 every 2nd step.
    EXPECT_GT(adaptiveStats.widthSteps[1], 0);
    EXPECT_GE(widthsUsed(adaptiveStats), 2);
  }
}

TEST(AdaptiveSpeculation, GreedyReplayInAChangingBatchEqualsFixedWidth) {
  runReplay(Mode::kGreedy);
}
TEST(AdaptiveSpeculation, SampledReplayInAChangingBatchEqualsFixedWidth) {
  runReplay(Mode::kSampled);
}
TEST(AdaptiveSpeculation, MixedReplayInAChangingBatchEqualsFixedWidth) { runReplay(Mode::kMixed); }
TEST(AdaptiveSpeculation, SampledWidthOneGivesSampledRequestsThePlainTokens) {
  runReplay(Mode::kSampled, 1);
  runReplay(Mode::kMixed, 1);
}

// Logs each proposal block of a batch-1 run by the position of its first row.
class RecordingProposer final : public test::ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  void propose(const model::DraftProposalInputs& inputs, kv::KvCacheManager& cache) override {
    ForwardingProposer::propose(inputs, cache);
    const int32_t rows = inputs.rowsPerBlock == 0 ? blockSize() : inputs.rowsPerBlock;
    EXPECT_EQ(inputs.batchSize, 1);
    blocks[inputs.positions[0]] =
        std::vector<int32_t>(inputs.argmaxOut, inputs.argmaxOut + rows);  // cpu: host memory
  }
  std::map<int32_t, std::vector<int32_t>> blocks;
};

// A random DFlash draft (block 8) accepts almost nothing: the adaptive engine runs mostly plain
// steps (with exploring speculative ones), and its tokens equal plain decoding, alone and in a
// changing batch. Alone, each of its proposals equals the fixed-width run's at that position:
// the plain steps kept the draft's context.
TEST(AdaptiveSpeculation, RandomDFlashDraftAcrossPlainSteps) {
  const std::string targetDir = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path draftDir =
      std::filesystem::temp_directory_path() / "es_adaptive_random_draft";
  model::test_draft::DraftSpec spec;
  spec.blockSize = kBlock;
  model::test_draft::writeDraft(draftDir, spec);
  auto backend = ops::makeCpuBackend();
  const std::vector<int32_t> taps =
      model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(targetDir));
  model::TargetModel target(targetDir, *backend, 64, taps);
  model::DFlashDraft draft(draftDir, *backend, target, 64, kBatch);

  const std::vector<GenerationRequest> rs = requestsFor(Mode::kGreedy);
  std::vector<GenerationResult> plain;
  {
    kv::KvCacheManager cache(cacheFor(target, kBatch, &draft), MemorySpace::kHost);
    DecodeEngine engine(target, cache);
    plain = runArrivals(engine, rs);
  }
  {
    kv::KvCacheManager cache(cacheFor(target, kBatch, &draft), MemorySpace::kHost);
    DFlashProposer proposer(draft);
    DecodeEngine engine(target, cache, &proposer, {.adaptiveWidth = true, .explorePeriod = 2});
    const std::vector<GenerationResult> out = runArrivals(engine, rs);
    for (size_t i = 0; i < rs.size(); ++i) {
      EXPECT_EQ(out[i].tokens, plain[i].tokens) << "request " << i;
    }
    EXPECT_GT(engine.stats().widthSteps[1], 0);
    EXPECT_GE(widthsUsed(engine.stats()), 2);
  }

  // Alone: proposals by position, adaptive against fixed W = 8.
  auto proposals = [&](EngineOptions options, SpeculationStats* stats) {
    kv::KvCacheManager cache(cacheFor(target, 1, &draft), MemorySpace::kHost);
    DFlashProposer dflash(draft);
    RecordingProposer recorder(dflash);
    DecodeEngine engine(target, cache, &recorder, options);
    EXPECT_EQ(engine.generate({rs[0]})[0].tokens, plain[0].tokens);
    *stats = engine.stats();
    return recorder.blocks;
  };
  SpeculationStats fixedStats, adaptiveStats;
  const std::map<int32_t, std::vector<int32_t>> fixed =
      proposals({.verifyWidth = kBlock}, &fixedStats);
  const std::map<int32_t, std::vector<int32_t>> adaptive =
      proposals({.adaptiveWidth = true, .explorePeriod = 2}, &adaptiveStats);
  ASSERT_GT(adaptiveStats.widthSteps[1], 0) << "no plain step";
  int32_t compared = 0;
  for (const auto& [position, tokens] : adaptive) {
    const auto it = fixed.find(position);
    if (it == fixed.end()) continue;  // the fixed run accepted past it
    ASSERT_LE(tokens.size(), it->second.size());
    EXPECT_EQ(tokens,
              std::vector<int32_t>(it->second.begin(),
                                   it->second.begin() + static_cast<ptrdiff_t>(tokens.size())))
        << "position " << position;
    ++compared;
  }
  EXPECT_GE(compared, 5);

  // The builder: adaptive with --verify-width auto (up to its width: min(4, BS) on cpu), fixed
  // with an explicit width or without the switch.
  auto built = [&](bool adaptive, std::optional<int32_t> width) {
    EngineConfig config{.model = targetDir,
                        .backend = "cpu",
                        .draft = {.kind = DraftKind::kDFlash, .dir = draftDir},
                        .verifyWidth = width,
                        .adaptiveWidth = adaptive,
                        .longestPrompt = 8,
                        .longestRequest = 40};
    return buildEngine(config);
  };
  const std::unique_ptr<Engine> adaptiveEngine = built(true, std::nullopt);
  ASSERT_NE(adaptiveEngine->decoder().policy(), nullptr);
  EXPECT_EQ(adaptiveEngine->decoder().stepWidth(), kCpuVerifyWidth);
  EXPECT_EQ(adaptiveEngine->decoder().policy()->widths(), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(built(true, 2)->decoder().policy(), nullptr);
  {
    EngineConfig config{.model = targetDir,
                        .backend = "cpu",
                        .draft = {.kind = DraftKind::kDFlash, .dir = draftDir},
                        .adaptiveWidth = true,
                        .sampledWidth = 3,
                        .longestPrompt = 8,
                        .longestRequest = 40};
    EXPECT_THROW(buildEngine(config), InvalidArgument);  // not one of 1, 2, 4
    config.sampledWidth = 1;
    EXPECT_NO_THROW(buildEngine(config));
  }
  EXPECT_EQ(built(false, std::nullopt)->decoder().policy(), nullptr);
  std::filesystem::remove_all(draftDir);
}

TEST(AdaptiveSpeculation, BadOptionsNameTheOption) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  kv::KvCacheManager cache(cacheFor(target, 1), MemorySpace::kHost);
  ReplayProposer proposer(*backend, kBlock, 1, {{1, 2, 3}}, 384, 0.0f);
  auto expectNamed = [&](DraftProposer* p, EngineOptions o, const std::string& name) {
    try {
      DecodeEngine engine(target, cache, p, o);
      ADD_FAILURE() << "accepted a bad " << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expectNamed(nullptr, {.adaptiveWidth = true}, "EngineOptions::adaptiveWidth");
  expectNamed(&proposer, {.adaptiveWidth = true, .sampledWidth = 3}, "EngineOptions::sampledWidth");
  expectNamed(&proposer, {.adaptiveWidth = true, .sampledWidth = 16},
              "EngineOptions::sampledWidth");
  expectNamed(&proposer, {.sampledWidth = 1}, "EngineOptions::sampledWidth");
  EXPECT_NO_THROW(
      DecodeEngine(target, cache, &proposer, {.adaptiveWidth = true, .sampledWidth = 4}));
}

}  // namespace
}  // namespace es::runtime
