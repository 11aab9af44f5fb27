// Requests join and leave the running batch between steps (DecodeEngine::submit / cancel / step):
// a request's tokens equal its solo run whatever the batch around it does (requests submitted
// at other steps, finishing early, cancelled mid-way, queued for lack of a slot), greedy and
// sampled, plain and with the replay draft; cancel frees the slot and pages at once; a full
// admission queue is a clear error. Long prompts prefill in chunks under the step's budget while
// the running requests keep emitting a token every step (plain and replay draft, prefix reuse on
// and off, a sliding-window model), with outputs equal to their solo runs; a request cancelled
// while it prefills frees its slot and pages. With a random DFlash draft, each request's proposals
// (which read its draft context, built chunk by chunk) equal its solo run's too.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/random_draft.h"
#include "model/sliding_window_scenario.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/replay_proposer.h"
#include "support/forwarding_proposer.h"
#include "support/test_util.h"

namespace es::runtime {
namespace {

constexpr int32_t kBatch = 3;  // fewer slots than requests: some wait in the queue
constexpr int32_t kBlock = 4;  // replay draft block size
constexpr int32_t kVocab = 384;

kv::KvCacheConfig cacheFor(const model::TargetModel& m, int32_t batch, int64_t retained = 0) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = 256;
  c.dtype = DType::kF32;
  c.baseLayers = m.kvLayerShapes();
  c.prefixCachePages = retained;
  return c;
}

enum class Mode { kGreedy, kSampled, kMixed };

// Five requests of different prompts, budgets and settings; request 1 ends early (a short
// budget), request 3 is the one cancelled in the scenario.
std::vector<GenerationRequest> requestsFor(Mode mode) {
  std::vector<GenerationRequest> rs = {
      {{5, 17, 99, 42, 7}, 24, {}, {}},
      {{11, 3}, 3, {}, {}},
      {{200, 201, 202, 17, 5, 9, 31}, 16, {}, {}},
      {{77, 78}, 30, {}, {}},
      {{9, 8, 7, 6}, 12, {}, {}},
  };
  for (size_t i = 0; i < rs.size(); ++i) {
    const bool sampled = mode == Mode::kSampled || (mode == Mode::kMixed && i % 2 == 1);
    if (sampled) rs[i].sampling = {1.2f, i == 2 ? 40 : 0, i == 4 ? 0.9f : 1.0f, 1000 + i};
  }
  return rs;
}

// An engine with its own cache (and replay draft when `recordings` is not empty).
struct Rig {
  Rig(model::TargetModel& target, ops::Backend& backend,
      const std::vector<std::vector<int32_t>>& recordings, EngineOptions options = {},
      int64_t retained = 0)
      : Rig(target, backend, recordings, options, cacheFor(target, kBatch, retained)) {}
  Rig(model::TargetModel& target, ops::Backend& backend,
      const std::vector<std::vector<int32_t>>& recordings, EngineOptions options,
      const kv::KvCacheConfig& config)
      : cache(config, MemorySpace::kHost) {
    if (!recordings.empty()) {
      proposer =
          std::make_unique<ReplayProposer>(backend, kBlock, kBatch, recordings, kVocab, 0.3f, 7);
    }
    engine = std::make_unique<DecodeEngine>(target, cache, proposer.get(), options);
  }
  kv::KvCacheManager cache;
  std::unique_ptr<ReplayProposer> proposer;
  std::unique_ptr<DecodeEngine> engine;
};

// Request i alone on a fresh engine (index i: the replay draft proposes its recording).
GenerationResult solo(model::TargetModel& target, ops::Backend& backend,
                      const std::vector<std::vector<int32_t>>& recordings,
                      const GenerationRequest& q, int32_t index, EngineOptions options = {},
                      int64_t retained = 0) {
  Rig rig(target, backend, recordings, options, retained);
  rig.engine->submit(q, {}, index);
  while (rig.engine->step()) {
  }
  std::vector<FinishedRequest> done = rig.engine->takeFinished();
  EXPECT_EQ(done.size(), 1u);
  return done.empty() ? GenerationResult{} : done[0].result;
}

void runScenario(Mode mode, bool withDraft) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const std::vector<GenerationRequest> rs = requestsFor(mode);
  std::vector<std::vector<int32_t>> recordings;
  if (withDraft) {  // the plain runs' tokens: the draft proposes them, some corrupted
    std::vector<GenerationResult> plain;
    for (size_t i = 0; i < rs.size(); ++i) {
      plain.push_back(solo(target, *backend, {}, rs[i], static_cast<int32_t>(i)));
    }
    recordings = ReplayProposer::recordingsOf(rs, plain);
  }
  std::vector<GenerationResult> alone;
  for (size_t i = 0; i < rs.size(); ++i) {
    alone.push_back(solo(target, *backend, recordings, rs[i], static_cast<int32_t>(i)));
  }

  Rig rig(target, *backend, recordings);
  DecodeEngine& engine = *rig.engine;
  std::map<int32_t, std::vector<int32_t>> streamed;
  auto onToken = [&](int32_t r, int32_t token) { streamed[r].push_back(token); };
  std::map<RequestId, int32_t> indexOf;
  auto submit = [&](int32_t i) {
    indexOf[engine.submit(rs[static_cast<size_t>(i)], onToken, i)] = i;
  };
  // Steps 0, 2, 3, 5: arrivals; request 3 is cancelled at step 6, after it joined the batch.
  const std::map<int32_t, std::vector<int32_t>> arrivals = {{0, {0, 1}}, {2, {2}}, {3, {3, 4}}};
  RequestId cancelled = -1;
  std::map<int32_t, GenerationResult> results;
  bool more = true;
  for (int32_t stepIndex = 0; more || stepIndex <= 6; ++stepIndex) {
    if (auto it = arrivals.find(stepIndex); it != arrivals.end()) {
      for (int32_t i : it->second) submit(i);
    }
    if (stepIndex == 6) {
      for (const auto& [id, i] : indexOf) {
        if (i == 3) cancelled = id;
      }
      const int32_t running = engine.runningCount();
      ASSERT_TRUE(engine.cancel(cancelled));
      EXPECT_EQ(engine.runningCount(), running - 1) << "request 3 runs at step 6";
      EXPECT_EQ(rig.cache.activeCount(), running - 1) << "its slot is free at once";
      EXPECT_FALSE(engine.cancel(cancelled));  // already finished
    }
    more = engine.step();
    EXPECT_LE(engine.runningCount(), kBatch);
    for (FinishedRequest& f : engine.takeFinished()) results[indexOf.at(f.id)] = f.result;
  }
  EXPECT_EQ(rig.cache.activeCount(), 0);
  ASSERT_EQ(results.size(), rs.size());
  for (int32_t i = 0; i < static_cast<int32_t>(rs.size()); ++i) {
    const GenerationResult& got = results[i];
    const GenerationResult& want = alone[static_cast<size_t>(i)];
    EXPECT_EQ(streamed[i], got.tokens) << "request " << i;
    if (i == 3) {
      EXPECT_EQ(got.finish, FinishReason::kCancelled);
      ASSERT_LT(got.tokens.size(), want.tokens.size());
      EXPECT_FALSE(got.tokens.empty());
      EXPECT_EQ(got.tokens, std::vector<int32_t>(
                                want.tokens.begin(),
                                want.tokens.begin() + static_cast<ptrdiff_t>(got.tokens.size())));
      continue;
    }
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
  }
  // The batch really was mixed: request 3 (sampled in both modes) left greedy decoding.
  if (mode != Mode::kGreedy) {
    const GenerationResult greedy =
        solo(target, *backend, recordings, requestsFor(Mode::kGreedy)[3], 3);
    EXPECT_NE(alone[3].tokens, greedy.tokens);
  }
}

TEST(DecodeEngineScheduling, GreedyRequestsInAChangingBatchEqualTheirSoloRuns) {
  runScenario(Mode::kGreedy, false);
}
TEST(DecodeEngineScheduling, SampledRequestsInAChangingBatchEqualTheirSoloRuns) {
  runScenario(Mode::kSampled, false);
}
TEST(DecodeEngineScheduling, GreedyAndSampledRequestsShareSteps) {
  runScenario(Mode::kMixed, false);
}
TEST(DecodeEngineScheduling, GreedyWithTheReplayDraftInAChangingBatch) {
  runScenario(Mode::kGreedy, true);
}
TEST(DecodeEngineScheduling, SampledWithTheReplayDraftInAChangingBatch) {
  runScenario(Mode::kSampled, true);
}
TEST(DecodeEngineScheduling, MixedWithTheReplayDraftInAChangingBatch) {
  runScenario(Mode::kMixed, true);
}

// Cancelling frees the slot and its pages at once (prefix reuse: pages come from a shared pool).
TEST(DecodeEngineScheduling, CancelFreesTheSlotAndPages) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  Rig rig(target, *backend, {}, {}, 4);
  const kv::PrefixCache& pool = *rig.cache.prefixCache();
  const int32_t freeAtStart = pool.freeBasePages();
  DecodeEngine& engine = *rig.engine;
  const RequestId a = engine.submit({{5, 17, 99}, 40, {}, {}});
  const RequestId b = engine.submit({{7, 8}, 40, {}, {0.8f, 0, 1.0f, 3}});
  const RequestId c = engine.submit({{9}, 40, {}, {}});
  const RequestId waiting = engine.submit({{10}, 40, {}, {}});  // no slot: stays queued
  EXPECT_EQ(engine.queuedCount(), 4);
  EXPECT_TRUE(engine.step());
  EXPECT_EQ(engine.runningCount(), kBatch);
  EXPECT_EQ(engine.queuedCount(), 1);
  EXPECT_LT(pool.freeBasePages(), freeAtStart);
  EXPECT_TRUE(engine.step());
  EXPECT_TRUE(engine.cancel(waiting));  // a queued request leaves the queue
  EXPECT_EQ(engine.queuedCount(), 0);
  EXPECT_TRUE(engine.cancel(b));
  EXPECT_EQ(rig.cache.activeCount(), kBatch - 1);
  EXPECT_TRUE(engine.cancel(a));
  EXPECT_TRUE(engine.cancel(c));
  EXPECT_EQ(rig.cache.activeCount(), 0);
  EXPECT_EQ(pool.activeRequests(), 0);
  EXPECT_EQ(pool.freeBasePages(), freeAtStart);
  EXPECT_FALSE(engine.step());
  const std::vector<FinishedRequest> done = engine.takeFinished();
  ASSERT_EQ(done.size(), 4u);
  for (const FinishedRequest& f : done) {
    EXPECT_EQ(f.result.finish, FinishReason::kCancelled);
    // Admitted ones: the prefill's token and one per step.
    EXPECT_EQ(f.result.tokens.size(), f.id == waiting ? 0u : 3u) << "request " << f.id;
  }
  EXPECT_FALSE(engine.cancel(12345));
  // The engine serves the next requests.
  EXPECT_EQ(engine.generate({{{5, 17, 99}, 4, {}, {}}})[0].tokens.size(), 4u);
}

// A token callback may cancel its own request or another one: each stops there (the step's
// remaining tokens for it are dropped) and leaves the batch at the end of that step.
TEST(DecodeEngineScheduling, CancelFromATokenCallback) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const GenerationRequest a{{5, 17, 99}, 40, {}, {}}, b{{7, 8}, 40, {}, {}};
  const GenerationResult soloB = solo(target, *backend, {}, b, 1);
  Rig rig(target, *backend, {});
  DecodeEngine& engine = *rig.engine;
  RequestId idA = -1, idB = -1;
  int32_t seenA = 0, seenB = 0;
  idA = engine.submit(a, [&](int32_t, int32_t) {
    if (++seenA == 5) {
      EXPECT_TRUE(engine.cancel(idA));
      EXPECT_TRUE(engine.cancel(idB));
    }
  });
  idB = engine.submit(b, [&](int32_t, int32_t) { ++seenB; });
  while (engine.step()) {
  }
  EXPECT_EQ(rig.cache.activeCount(), 0);
  std::vector<FinishedRequest> done = engine.takeFinished();
  ASSERT_EQ(done.size(), 2u);
  for (const FinishedRequest& f : done) {
    EXPECT_EQ(f.result.finish, FinishReason::kCancelled);
    if (f.id == idA) {
      EXPECT_EQ(f.result.tokens.size(), 5u);
    }
    if (f.id != idB) continue;
    EXPECT_EQ(static_cast<int32_t>(f.result.tokens.size()), seenB);
    ASSERT_LT(f.result.tokens.size(), soloB.tokens.size());
    EXPECT_EQ(f.result.tokens,
              std::vector<int32_t>(soloB.tokens.begin(),
                                   soloB.tokens.begin() + static_cast<ptrdiff_t>(seenB)));
  }
}

TEST(DecodeEngineScheduling, AFullQueueAndRequestsThatCanNeverFitAreClearErrors) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  Rig rig(target, *backend, {}, {.maxQueued = 2});
  DecodeEngine& engine = *rig.engine;
  engine.submit({{1, 2}, 4, {}, {}});
  engine.submit({{3}, 4, {}, {}});
  try {
    engine.submit({{4}, 4, {}, {}});
    ADD_FAILURE() << "expected QueueFull";
  } catch (const QueueFull& e) {
    EXPECT_NE(std::string(e.what()).find("EngineOptions::maxQueued = 2"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(engine.queuedCount(), 2);
  // Prompt + budget beyond the KV capacity: refused at submit, never queued.
  test::expectInvalidArgument(
      [&] {
        engine.submit({{1}, 300, {}, {}});
      },
      "request prompt + maxNewTokens");
  test::expectInvalidArgument([&] { engine.submit({{}, 4, {}, {}}); }, "request.prompt.size()");
  // generate() needs an idle engine.
  test::expectInvalidArgument([&] { engine.generate({{{1}, 1, {}, {}}}); }, "submitted requests");
  EXPECT_TRUE(engine.step());  // both admitted: the queue has room again
  EXPECT_EQ(engine.queuedCount(), 0);
  engine.submit({{4}, 4, {}, {}});
  while (engine.step()) {
  }
  EXPECT_EQ(engine.takeFinished().size(), 3u);
  EXPECT_EQ(rig.cache.activeCount(), 0);
  test::expectInvalidArgument([&] { Rig bad(target, *backend, {}, {.maxQueued = 0}); },
                              "EngineOptions::maxQueued");
}

// A step's stream: at which step each token of each request came, what each step prefilled.
struct Timeline {
  std::map<int32_t, std::vector<int32_t>> tokenSteps;  // request index -> step of each token
  std::map<int32_t, GenerationResult> results;
  std::map<int32_t, int32_t> finishStep;
  int64_t mostPrefillRows = 0;  // prompt rows one step prefilled at most
};

// Runs requests rs[i] for every (i, step) of `arrivals` on `engine` (its cache: `cache`), request
// i submitted (index i) before step `step`, and steps until every request is done.
Timeline runArrivalsOn(DecodeEngine& engine, const kv::KvCacheManager& cache,
                       const std::vector<GenerationRequest>& rs,
                       const std::map<int32_t, int32_t>& arrivals) {
  Timeline t;
  int32_t step = 0;
  std::map<RequestId, int32_t> indexOf;
  auto onToken = [&](int32_t r, int32_t) { t.tokenSteps[r].push_back(step); };
  int32_t lastArrival = 0;
  for (const auto& [i, at] : arrivals) lastArrival = std::max(lastArrival, at);
  for (bool more = true; more || step <= lastArrival; ++step) {
    for (const auto& [i, at] : arrivals) {
      if (at == step) indexOf[engine.submit(rs[static_cast<size_t>(i)], onToken, i)] = i;
    }
    const int64_t rowsBefore = engine.stats().prefillRows;
    more = engine.step();
    t.mostPrefillRows = std::max(t.mostPrefillRows, engine.stats().prefillRows - rowsBefore);
    for (FinishedRequest& f : engine.takeFinished()) {
      const int32_t i = indexOf.at(f.id);
      t.results[i] = std::move(f.result);
      t.finishStep[i] = step;
    }
    EXPECT_LT(step, 2000) << "the engine does not finish";
    if (step >= 2000) break;
  }
  EXPECT_EQ(cache.activeCount(), 0);
  return t;
}
Timeline runArrivals(Rig& rig, const std::vector<GenerationRequest>& rs,
                     const std::map<int32_t, int32_t>& arrivals) {
  return runArrivalsOn(*rig.engine, rig.cache, rs, arrivals);
}

// Every request that has its first token emits at least one token in each later step until it
// ends (exactly one with plain decoding), whatever prefills meanwhile: no stream waits for
// another's prefill longer than one step's budget.
void expectEveryStreamAdvancesEachStep(const Timeline& t, bool plain) {
  for (const auto& [r, steps] : t.tokenSteps) {
    std::map<int32_t, int32_t> perStep;
    for (int32_t s : steps) ++perStep[s];
    for (int32_t s = steps.front() + 1; s <= t.finishStep.at(r); ++s) {
      EXPECT_GE(perStep[s], 1) << "request " << r << " emitted nothing at step " << s;
      if (plain) {
        EXPECT_LE(perStep[s], 1) << "request " << r << " at step " << s;
      }
    }
  }
}

// Token ids in [0, kVocab - 1): the random DFlash draft's mask token (383) stays out.
std::vector<int32_t> randomTokens(uint32_t seed, int32_t n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(kVocab - 1));
  return out;
}

constexpr int32_t kBudget = 16;  // prompt rows a step prefills (the target's forward: 32 rows)

// Two short requests decode while two long prompts arrive: R (140 tokens, two new) with them at
// step 0, L (200 tokens, whose first block is R's) at step 12. With prefix reuse L shares R's
// published first block and prefills 72 rows.
std::vector<GenerationRequest> longPromptRequests(bool sampled) {
  const std::vector<int32_t> shared = randomTokens(3, 140);
  std::vector<int32_t> l(shared.begin(), shared.begin() + 128);
  const std::vector<int32_t> tail = randomTokens(4, 72);
  l.insert(l.end(), tail.begin(), tail.end());
  std::vector<GenerationRequest> rs = {
      {{5, 17, 99, 42, 7}, 200, {}, {}},
      {{11, 3}, 150, {}, {}},
      {shared, 2, {}, {}},
      {l, 20, {}, {}},
  };
  if (sampled) {
    for (size_t i = 0; i < rs.size(); ++i) rs[i].sampling = {1.1f, 0, 0.95f, 500 + i};
  }
  return rs;
}

void runLongPromptScenario(bool sampled, bool withDraft, bool reuse) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const std::vector<GenerationRequest> rs = longPromptRequests(sampled);
  const EngineOptions options{.prefillTokensPerStep = kBudget};
  const int64_t retained = reuse ? 4 : 0;
  std::vector<std::vector<int32_t>> recordings;
  if (withDraft) {
    std::vector<GenerationResult> plain;
    for (size_t i = 0; i < rs.size(); ++i) {
      plain.push_back(solo(target, *backend, {}, rs[i], static_cast<int32_t>(i), options));
    }
    recordings = ReplayProposer::recordingsOf(rs, plain);
  }
  Rig rig(target, *backend, recordings, options, retained);
  const Timeline t = runArrivals(rig, rs, {{0, 0}, {1, 0}, {2, 0}, {3, 12}});
  ASSERT_EQ(t.results.size(), rs.size());
  for (int32_t i = 0; i < static_cast<int32_t>(rs.size()); ++i) {
    const GenerationResult want =
        solo(target, *backend, recordings, rs[static_cast<size_t>(i)], i, options, retained);
    EXPECT_EQ(t.results.at(i).tokens, want.tokens) << "request " << i;
    EXPECT_EQ(t.results.at(i).finish, want.finish) << "request " << i;
  }
  expectEveryStreamAdvancesEachStep(t, !withDraft);
  EXPECT_EQ(t.mostPrefillRows, kBudget);
  // Step 0 prefills the short prompts (7 rows) and admits R, whose first chunk of 16 rows waits
  // for step 1; its 140 rows take steps 1-9. L's 72 rows (reused block) or 200 rows take steps
  // 12-16 or 12-24, while the short requests decode.
  EXPECT_EQ(t.tokenSteps.at(0).front(), 0);
  EXPECT_EQ(t.tokenSteps.at(2).front(), 9);
  EXPECT_EQ(t.tokenSteps.at(3).front(), reuse ? 16 : 24);
  EXPECT_GT(t.finishStep.at(0), t.tokenSteps.at(3).front()) << "request 0 decoded meanwhile";
  const DecodeEngine& engine = *rig.engine;
  EXPECT_EQ(engine.stats().reusedTokens, reuse ? 128 : 0);
  EXPECT_EQ(engine.stats().prefillRows, 5 + 2 + 140 + 200 - (reuse ? 128 : 0));
  const kv::KvCacheManager::PageCounts pages = rig.cache.pageCounts();
  EXPECT_EQ(pages.used, pages.cached) << "idle: only published records hold pages";
  EXPECT_EQ(pages.free, pages.total - pages.used);
  if (reuse) {
    EXPECT_GT(pages.cached, 0);
  }
}

TEST(DecodeEngineScheduling, LongPromptGreedy) { runLongPromptScenario(false, false, false); }
TEST(DecodeEngineScheduling, LongPromptSampled) { runLongPromptScenario(true, false, false); }
TEST(DecodeEngineScheduling, LongPromptGreedyWithTheReplayDraft) {
  runLongPromptScenario(false, true, false);
}
TEST(DecodeEngineScheduling, LongPromptSampledWithTheReplayDraft) {
  runLongPromptScenario(true, true, false);
}
TEST(DecodeEngineScheduling, LongPromptGreedyWithPrefixReuse) {
  runLongPromptScenario(false, false, true);
}
TEST(DecodeEngineScheduling, LongPromptSampledWithPrefixReuse) {
  runLongPromptScenario(true, false, true);
}
TEST(DecodeEngineScheduling, LongPromptGreedyWithTheReplayDraftAndPrefixReuse) {
  runLongPromptScenario(false, true, true);
}
TEST(DecodeEngineScheduling, LongPromptSampledWithTheReplayDraftAndPrefixReuse) {
  runLongPromptScenario(true, true, true);
}

// Logs each request's proposals by their block's first position (CPU backend: host memory). A
// block proposed again at a position (the decode batch changed) must be the same block.
class ProposalLog final : public test::ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  void onAdmit(int32_t slot, int32_t request) override {
    requestOfSlot.resize(std::max(requestOfSlot.size(), static_cast<size_t>(slot) + 1), -1);
    requestOfSlot[static_cast<size_t>(slot)] = request;
    ForwardingProposer::onAdmit(slot, request);
  }
  void onCompact(const std::vector<int32_t>& oldToNew) override {
    std::vector<int32_t> moved(requestOfSlot.size(), -1);
    for (size_t s = 0; s < oldToNew.size() && s < requestOfSlot.size(); ++s) {
      if (oldToNew[s] >= 0) moved[static_cast<size_t>(oldToNew[s])] = requestOfSlot[s];
    }
    requestOfSlot = std::move(moved);
    ForwardingProposer::onCompact(oldToNew);
  }
  void propose(const model::DraftProposalInputs& in, kv::KvCacheManager& cache) override {
    ForwardingProposer::propose(in, cache);
    const int32_t W = in.rowsPerBlock == 0 ? blockSize() : in.rowsPerBlock;
    for (int32_t b = 0; b < in.batchSize; ++b) {
      const int32_t position = in.positions[static_cast<ptrdiff_t>(b) * blockSize()];
      const int32_t* rows = in.argmaxOut + static_cast<ptrdiff_t>(b) * W;
      const std::vector<int32_t> block(rows, rows + W);
      const auto [it, fresh] =
          blocks[requestOfSlot.at(static_cast<size_t>(b))].emplace(position, block);
      if (!fresh) {
        EXPECT_EQ(it->second, block) << "slot " << b << " position " << position;
      }
    }
  }
  std::vector<int32_t> requestOfSlot;
  std::map<int32_t, std::map<int32_t, std::vector<int32_t>>> blocks;  // request -> position -> W
};

// With a random DFlash draft the draft keeps context in its own pools: every prefill chunk
// becomes draft context (round 0) while the other slots decode, and with prefix reuse a request
// shares the draft pages of the reused block. Each request's proposals (which read that
// context) and tokens equal its solo run's.
void runDFlashLongPromptScenario(bool sampled, bool reuse) {
  auto backend = ops::makeCpuBackend();
  const std::string targetDir = test::test_data_dir() + "/models/qwen3";
  const std::filesystem::path draftDir =
      std::filesystem::temp_directory_path() /
      ("es_scheduling_draft_" + std::to_string(sampled) + std::to_string(reuse));
  model::test_draft::DraftSpec spec;
  spec.blockSize = kBlock;
  model::test_draft::writeDraft(draftDir, spec);
  const std::vector<int32_t> taps =
      model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(targetDir));
  model::TargetModel target(targetDir, *backend, 32, taps);
  model::DFlashDraft draft(draftDir, *backend, target, 32, kBatch);
  kv::KvCacheConfig config = cacheFor(target, kBatch, reuse ? 6 : 0);
  config.draftLayers = draft.kvLayerShapes();
  const std::vector<GenerationRequest> rs = longPromptRequests(sampled);
  struct Run {
    Timeline timeline;
    std::map<int32_t, std::map<int32_t, std::vector<int32_t>>> blocks;
    int64_t reusedTokens = 0;
  };
  auto run = [&](const std::map<int32_t, int32_t>& arrivals) {
    kv::KvCacheManager cache(config, MemorySpace::kHost);
    DFlashProposer dflash(draft);
    ProposalLog log(dflash);
    DecodeEngine engine(target, cache, &log, {.prefillTokensPerStep = kBudget});
    Run r;
    r.timeline = runArrivalsOn(engine, cache, rs, arrivals);
    r.blocks = log.blocks;
    r.reusedTokens = engine.stats().reusedTokens;
    return r;
  };
  const Run mixed = run({{0, 0}, {1, 0}, {2, 0}, {3, 12}});
  ASSERT_EQ(mixed.timeline.results.size(), rs.size());
  expectEveryStreamAdvancesEachStep(mixed.timeline, false);
  EXPECT_EQ(mixed.timeline.tokenSteps.at(3).front(), reuse ? 16 : 24);
  EXPECT_EQ(mixed.reusedTokens, reuse ? 128 : 0);
  for (int32_t i = 0; i < static_cast<int32_t>(rs.size()); ++i) {
    const Run alone = run({{i, 0}});
    EXPECT_EQ(mixed.timeline.results.at(i).tokens, alone.timeline.results.at(i).tokens)
        << "request " << i;
    ASSERT_TRUE(mixed.blocks.count(i) && alone.blocks.count(i)) << "request " << i;
    EXPECT_EQ(mixed.blocks.at(i), alone.blocks.at(i)) << "request " << i << "'s proposals";
  }
  std::filesystem::remove_all(draftDir);
}

TEST(DecodeEngineScheduling, LongPromptGreedyWithADFlashDraft) {
  runDFlashLongPromptScenario(false, false);
}
TEST(DecodeEngineScheduling, LongPromptSampledWithADFlashDraft) {
  runDFlashLongPromptScenario(true, false);
}
TEST(DecodeEngineScheduling, LongPromptGreedyWithADFlashDraftAndPrefixReuse) {
  runDFlashLongPromptScenario(false, true);
}

// A budget above the target's rows per forward runs several chunks a step (of 32 rows: never
// more than one forward holds); 0 is one forward's rows.
TEST(DecodeEngineScheduling, PrefillBudgetOfSeveralChunks) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const std::vector<GenerationRequest> rs = {{{5, 17, 99}, 40, {}, {}},
                                             {randomTokens(9, 200), 8, {}, {}}};
  for (const auto& [budget, steps] : std::map<int32_t, int32_t>{{0, 7}, {100, 3}, {200, 7}}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    Rig rig(target, *backend, {}, {.prefillTokensPerStep = budget});
    const Timeline t = runArrivals(rig, rs, {{0, 0}, {1, 2}});
    // 200 rows are 7 chunks of up to 32: one a step (0, 32 rows), three (100: 96 rows), or all
    // seven (200 rows).
    EXPECT_EQ(t.tokenSteps.at(1).front() - 2 + 1, budget == 200 ? 1 : steps);
    EXPECT_EQ(t.mostPrefillRows, budget == 0 ? 32 : budget == 100 ? 96 : 200);
    expectEveryStreamAdvancesEachStep(t, true);
    EXPECT_EQ(t.results.at(1).tokens, solo(target, *backend, {}, rs[1], 1).tokens);
  }
}

// The same on a sliding-window model (window 160 < the prompts, the bounded window pool): every
// prefill chunk and decode step binds its window pages (beginStep / completeStep) while the
// other slot decodes. Sampled: this random model's greedy output hardly depends on the context.
TEST(DecodeEngineScheduling, LongPromptOnASlidingWindowModel) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(model::swa::fixtureDir(), *backend, 256);
  const nlohmann::json meta = model::swa::Fixture::loadMeta();
  const std::vector<GenerationRequest> rs = {
      {meta["prompts"]["b"].get<std::vector<int32_t>>(), 60, {}, {0.9f, 40, 1.0f, 12}},
      {meta["prompts"]["a"].get<std::vector<int32_t>>(), 30, {}, {1.0f, 0, 0.95f, 11}}};
  const kv::KvCacheConfig config =
      model::swa::cacheFor(target, kv::SlidingWindowStorage::kBounded, DType::kF32);
  const EngineOptions options{.prefillTokensPerStep = 64};
  auto run = [&](const std::map<int32_t, int32_t>& arrivals) {
    Rig rig(target, *backend, {}, options, config);
    EXPECT_NE(rig.cache.swaPages(), nullptr);
    return runArrivals(rig, rs, arrivals);
  };
  const Timeline t = run({{0, 0}, {1, 8}});
  // b's 390 rows take steps 0-6; a's 600 rows (10 chunks of 64) steps 8-17 while b decodes.
  EXPECT_EQ(t.tokenSteps.at(0).front(), 6);
  EXPECT_EQ(t.tokenSteps.at(1).front(), 17);
  EXPECT_GT(t.finishStep.at(0), 17);
  EXPECT_EQ(t.mostPrefillRows, 64);
  expectEveryStreamAdvancesEachStep(t, true);
  for (int32_t i = 0; i < 2; ++i) {
    const Timeline alone = run({{i, 0}});
    EXPECT_EQ(t.results.at(i).tokens, alone.results.at(i).tokens) << "request " << i;
  }
}

// A request cancelled while it prefills (between steps, or from another request's token
// callback inside a step) leaves at once or at the end of that step, with its slot and every
// page; the others go on as if it never came. Prefix reuse off (identity-mapped pages) and on.
TEST(DecodeEngineScheduling, CancelWhilePrefillingFreesTheSlotAndPages) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  const GenerationRequest a{{5, 17, 99}, 60, {}, {0.8f, 0, 1.0f, 3}};
  const GenerationRequest longPrompt{randomTokens(11, 200), 20, {}, {}};
  for (const int64_t retained : {int64_t{0}, int64_t{4}}) {
    SCOPED_TRACE("retained pages " + std::to_string(retained));
    const EngineOptions options{.prefillTokensPerStep = kBudget};
    Rig rig(target, *backend, {}, options, retained);
    DecodeEngine& engine = *rig.engine;
    const kv::KvCacheManager::PageCounts idle = rig.cache.pageCounts();
    EXPECT_EQ(idle.used, 0);
    EXPECT_EQ(idle.free, idle.total);
    bool cancelFromCallback = false;
    RequestId second = -1;
    std::vector<int32_t> tokensA;
    engine.submit(a, [&](int32_t, int32_t token) {
      tokensA.push_back(token);
      if (cancelFromCallback) {
        EXPECT_TRUE(engine.cancel(second));
        cancelFromCallback = false;
      }
    });
    EXPECT_TRUE(engine.step());
    const kv::KvCacheManager::PageCounts withA = rig.cache.pageCounts();
    EXPECT_GT(withA.used, 0);
    const RequestId first = engine.submit(longPrompt);
    EXPECT_TRUE(engine.step());
    EXPECT_TRUE(engine.step());
    // Admitted and prefilling: its pages (the whole request's) are reserved.
    EXPECT_EQ(engine.runningCount(), 2);
    EXPECT_EQ(rig.cache.activeCount(), 2);
    EXPECT_EQ(rig.cache.baseLength(1), 2 * kBudget);
    EXPECT_GE(rig.cache.pageCounts().used - withA.used, 2) << "pages of 220 positions";
    EXPECT_TRUE(engine.cancel(first));
    EXPECT_FALSE(engine.cancel(first));
    EXPECT_EQ(engine.runningCount(), 1);
    EXPECT_EQ(rig.cache.activeCount(), 1);
    EXPECT_EQ(rig.cache.pageCounts().used, withA.used);

    second = engine.submit(longPrompt);
    EXPECT_TRUE(engine.step());
    EXPECT_EQ(rig.cache.activeCount(), 2);
    cancelFromCallback = true;  // a's next token cancels it inside the step
    EXPECT_TRUE(engine.step());
    EXPECT_FALSE(cancelFromCallback);
    EXPECT_EQ(rig.cache.activeCount(), 1);
    EXPECT_EQ(rig.cache.pageCounts().used, withA.used);
    while (engine.step()) {
    }
    std::vector<FinishedRequest> done = engine.takeFinished();
    ASSERT_EQ(done.size(), 3u);
    for (const FinishedRequest& f : done) {
      if (f.id == first || f.id == second) {
        EXPECT_EQ(f.result.finish, FinishReason::kCancelled);
        EXPECT_TRUE(f.result.tokens.empty());
      } else {
        EXPECT_EQ(f.result.tokens, solo(target, *backend, {}, a, 0, options, retained).tokens);
        EXPECT_EQ(f.result.tokens, tokensA);
      }
    }
    const kv::KvCacheManager::PageCounts after = rig.cache.pageCounts();
    EXPECT_EQ(after.used, after.cached);
    if (rig.cache.prefixCache()) {
      EXPECT_EQ(rig.cache.prefixCache()->activeRequests(), 0);
    }
    // 3 + 2 * 16 (first) + 16 + 16 (second: one chunk, then one more in the step it was cancelled)
    EXPECT_EQ(engine.stats().prefillRows, 3 + 4 * kBudget);
  }
}

// onProgress may cancel the request it reports on, also when its prompt just completed: it
// leaves at the end of the step without a token.
TEST(DecodeEngineScheduling, CancelFromTheProgressCallback) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  DecodeEngine* engine = nullptr;
  RequestId victim = -1;
  int32_t cancelAt = 0;
  const EngineOptions options{.onProgress =
                                  [&](const ProgressUpdate& u) {
                                    if (u.done == cancelAt) {
                                      EXPECT_TRUE(engine->cancel(victim));
                                    }
                                  },
                              .prefillTokensPerStep = kBudget};
  for (const int32_t at : {kBudget, 40}) {  // after its first chunk; when its prompt is complete
    SCOPED_TRACE("cancelled at " + std::to_string(at));
    Rig rig(target, *backend, {}, options);
    engine = rig.engine.get();
    cancelAt = at;
    victim = engine->submit({randomTokens(31, 40), 5, {}, {}});
    while (engine->step()) {
    }
    const std::vector<FinishedRequest> done = engine->takeFinished();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].result.finish, FinishReason::kCancelled);
    EXPECT_TRUE(done[0].result.tokens.empty());
    EXPECT_EQ(rig.cache.activeCount(), 0);
    EXPECT_EQ(engine->stats().prefillRows, at);
  }
}

// Admission reserves every page a request may touch (prompt + maxNewTokens) before it writes any:
// three requests of 205 positions hold two pages each from the step they are admitted, next to
// the pages published records hold, and a pool of the minimum size plus retained pages serves
// them all at once; once idle only the records hold pages.
TEST(DecodeEngineScheduling, AdmissionReservesEveryPageARequestMayTouch) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  for (const int64_t retained : {int64_t{0}, int64_t{2}}) {
    SCOPED_TRACE("retained pages " + std::to_string(retained));
    Rig rig(target, *backend, {}, {.prefillTokensPerStep = kBudget}, retained);
    DecodeEngine& engine = *rig.engine;
    const kv::KvCacheManager::PageCounts idle = rig.cache.pageCounts();
    EXPECT_EQ(idle.total, 3 * 2 + retained);  // kBatch slots of 256 positions, and the records
    // A 250-token prompt publishes its first block (prefix reuse).
    engine.submit({randomTokens(21, 250), 4, {}, {}});
    while (engine.step()) {
    }
    const int32_t cached = rig.cache.pageCounts().cached;
    EXPECT_EQ(cached, retained > 0 ? 1 : 0);
    for (int32_t i = 0; i < 4; ++i) engine.submit({{5, 17, static_cast<int32_t>(i)}, 202, {}, {}});
    EXPECT_TRUE(engine.step());
    EXPECT_EQ(engine.runningCount(), kBatch);
    EXPECT_EQ(engine.queuedCount(), 1);  // no slot
    const kv::KvCacheManager::PageCounts busy = rig.cache.pageCounts();
    EXPECT_EQ(busy.used, 2 * kBatch + cached);
    EXPECT_EQ(busy.free, busy.total - busy.used);
    while (engine.step()) {
    }
    EXPECT_EQ(engine.takeFinished().size(), 5u);
    const kv::KvCacheManager::PageCounts after = rig.cache.pageCounts();
    EXPECT_EQ(after.used, after.cached);
    EXPECT_EQ(after.free, after.total - after.cached);
  }
}

TEST(DecodeEngineScheduling, PrefillBudgetIsChecked) {
  auto backend = ops::makeCpuBackend();
  model::TargetModel target(test::test_data_dir() + "/models/qwen3", *backend, 32);
  test::expectInvalidArgument([&] { Rig bad(target, *backend, {}, {.prefillTokensPerStep = -1}); },
                              "EngineOptions::prefillTokensPerStep");
}

}  // namespace
}  // namespace es::runtime
