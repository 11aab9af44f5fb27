#include "cli/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/numeric_flags.h"
#include "cli/progress_output.h"
#include "common/errors.h"
#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/engine_builder.h"
#include "runtime/replay_proposer.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string draft;           // a DFlash draft folder, or empty
  bool replay = false;         // the replay draft instead (τ = verify width while it matches)
  int32_t blockSize = 16;      // replay draft's block size
  float corrupt = 0.0f;        // replay draft's corruption rate
  int32_t verifyWidth = 0;     // W, rows a speculative step verifies (0 = the runtime's rule)
  bool adaptiveWidth = false;  // W per step by the engine's SpeculationPolicy, up to the rule's W
  int32_t batch = 1;
  int32_t promptLength = 128;
  int32_t genLength = 256;
  int32_t repeats = 20;  // launches per isolated step timing
  std::string backend = "auto";
  bool json = false;
  bool quiet = false;           // no progress lines for the load and the prefills
  bool prefixReuse = false;     // time to first token with and without prefix reuse instead
  int32_t sharedLength = 4096;  // prefix reuse: prompt tokens shared with an earlier request
  int32_t ttftRuns = 5;         // prefix reuse: timed requests per mode (median reported)
  // Rows of one prefill forward: a prompt is prefilled in chunks of this many rows, each reading
  // every weight once.
  int32_t prefillChunk = 256;
};

constexpr const char* kWhere = "bench";
constexpr int32_t kMaxBenchLength = 65536;  // --prompt-len, --gen-len
constexpr int32_t kMaxRepeats = 1000000;
constexpr int32_t kMaxTtftRuns = 1000;

// Seconds per launch of `work` on `backend`: captured once and replayed where the backend can
// (the engine's own way of running a step), else eager.
double timeLaunches(ops::Backend& backend, int32_t repeats, const std::function<void()>& work) {
  work();  // warm-up: library state, page-table uploads
  backend.synchronize();
  std::unique_ptr<ops::CapturedWork> graph = backend.capture(work);
  auto once = [&] { graph ? graph->launch() : work(); };
  once();
  backend.synchronize();
  const Clock::time_point t0 = Clock::now();
  for (int32_t i = 0; i < repeats; ++i) once();
  backend.synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count() / repeats;
}

// Backend copy of a host i32 vector (valid while the returned buffer lives).
Buffer upload(ops::Backend& backend, const std::vector<int32_t>& v) {
  Buffer b = backend.allocate(static_cast<int64_t>(std::max<size_t>(v.size(), 1)) * 4);
  backend.copyFromHost(b.data(), v.data(), static_cast<int64_t>(v.size()) * 4);
  return b;
}

// One target forward of `rows` rows per sequence for `batch` sequences whose caches hold
// `context` tokens (decode: rows 1; verify: rows W), all logits kept, as the engine runs it.
double targetStepSeconds(model::TargetModel& target, kv::KvCacheManager& cache, int32_t batch,
                         int32_t rows, int32_t context, int32_t repeats) {
  ops::Backend& backend = target.backend();
  std::vector<int32_t> tokens, positions, owners, cuQ{0}, kvLengths, logitRows;
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t i = 0; i < rows; ++i) {
      tokens.push_back((b * 31 + i * 7) % static_cast<int32_t>(target.config().vocab_size));
      positions.push_back(context + i);
      owners.push_back(b);
      logitRows.push_back(static_cast<int32_t>(logitRows.size()));
    }
    cuQ.push_back(cuQ.back() + rows);
    kvLengths.push_back(context + rows);
  }
  const Buffer dTokens = upload(backend, tokens), dPositions = upload(backend, positions),
               dOwners = upload(backend, owners), dCuQ = upload(backend, cuQ),
               dKvLengths = upload(backend, kvLengths), dRows = upload(backend, logitRows);
  const model::DeviceForwardBatch f{.tokens = dTokens.as<int32_t>(),
                                    .positions = dPositions.as<int32_t>(),
                                    .tokenToSequence = dOwners.as<int32_t>(),
                                    .cuQSeqLens = dCuQ.as<int32_t>(),
                                    .kvLengths = dKvLengths.as<int32_t>(),
                                    .logitRows = dRows.as<int32_t>(),
                                    .numTokens = batch * rows,
                                    .batchSize = batch,
                                    .maxQSeqLen = rows,
                                    .numLogitRows = batch * rows};
  // One cache step for the timed rows (binds their window pages with sliding-window layers); the
  // repeats rewrite the same rows, nothing is committed.
  std::vector<kv::SwaStepWrite> writes;
  for (int32_t b = 0; b < batch; ++b) writes.push_back({b, rows});
  const int64_t step = cache.beginStep(writes);
  target.syncPageTable(cache);
  const double seconds = timeLaunches(backend, repeats, [&] { target.forwardDevice(f, cache); });
  backend.synchronize();
  cache.completeStep(step);
  return seconds;
}

// One DFlash proposal (block of BS rows per sequence over `context` cached tokens, the first
// `rows` of each scored).
double proposalSeconds(model::DFlashDraft& draft, kv::KvCacheManager& cache, int32_t batch,
                       int32_t context, int32_t rows, int32_t repeats) {
  ops::Backend& backend = draft.backend();
  const int32_t BS = draft.blockSize();
  std::vector<int32_t> anchors(static_cast<size_t>(batch), 1), positions, kvLengths;
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t i = 0; i < BS; ++i) positions.push_back(context + i);
    kvLengths.push_back(context + BS);
  }
  const Buffer dAnchors = upload(backend, anchors), dPositions = upload(backend, positions),
               dKv = upload(backend, kvLengths);
  Buffer out = backend.allocate(static_cast<int64_t>(batch) * rows * 4);  // [batch, rows] i32
  const model::DraftProposalInputs in{.anchors = dAnchors.as<int32_t>(),
                                      .positions = dPositions.as<int32_t>(),
                                      .kvLengths = dKv.as<int32_t>(),
                                      .batchSize = batch,
                                      .rowsPerBlock = rows,
                                      .argmaxOut = out.as<int32_t>()};
  draft.syncPageTable(cache);
  return timeLaunches(backend, repeats, [&] { draft.propose(in, cache); });
}

// Bench's own flags (the engine's are checked by runtime::validateEngineConfig).
void validateOptions(const BenchOptions& o) {
  ES_CHECK_ARG(o.promptLength >= 1 && o.promptLength <= kMaxBenchLength, kWhere, "--prompt-len",
               o.promptLength, "must be in [1, ", kMaxBenchLength, "]");
  ES_CHECK_ARG(o.genLength >= 2 && o.genLength <= kMaxBenchLength, kWhere, "--gen-len", o.genLength,
               "must be in [2, ", kMaxBenchLength, "]");
  ES_CHECK_ARG(o.draft.empty() || !o.replay, kWhere, "--replay", "set",
               "cannot be combined with --draft");
  ES_CHECK_ARG(o.corrupt >= 0.0f && o.corrupt <= 1.0f, kWhere, "--corrupt", o.corrupt,
               "must be in [0, 1]");
  ES_CHECK_ARG(o.repeats >= 1, kWhere, "--repeats", o.repeats, "must be >= 1");
  ES_CHECK_ARG(!o.adaptiveWidth || ((o.replay || !o.draft.empty()) && o.verifyWidth == 0), kWhere,
               "--adaptive-width", "set",
               "needs a draft (--draft or --replay) and --verify-width 0 (the rule picks each "
               "step's width)");
  if (!o.prefixReuse) return;
  ES_CHECK_ARG(!o.adaptiveWidth, kWhere, "--adaptive-width", "set",
               "cannot be combined with --prefix-reuse");
  ES_CHECK_ARG(!o.replay, kWhere, "--replay", "set",
               "cannot be combined with --prefix-reuse (use --draft or none)");
  ES_CHECK_ARG(o.batch == 1, kWhere, "--batch", o.batch, "must be 1 with --prefix-reuse");
  ES_CHECK_ARG(o.sharedLength >= kv::kTokensPerPage && o.sharedLength < o.promptLength, kWhere,
               "--shared-len", o.sharedLength, "must be in [", kv::kTokensPerPage,
               ", --prompt-len = ", o.promptLength, ") with --prefix-reuse");
  ES_CHECK_ARG(o.ttftRuns >= 1 && o.ttftRuns <= kMaxTtftRuns, kWhere, "--ttft-runs", o.ttftRuns,
               "must be in [1, ", kMaxTtftRuns, "]");
}

runtime::EngineConfig engineConfig(const BenchOptions& o) {
  runtime::DraftConfig draft;
  if (!o.draft.empty()) draft = {.kind = runtime::DraftKind::kDFlash, .dir = o.draft};
  if (o.replay) draft = {.kind = runtime::DraftKind::kReplay, .replayBlockSize = o.blockSize};
  // --prefix-reuse times one-token requests; otherwise every request is the same length.
  const int32_t newTokens = o.prefixReuse ? 1 : o.genLength;
  return {.model = o.model,
          .backend = o.backend,
          .draft = std::move(draft),
          .verifyWidth = o.verifyWidth == 0 ? std::nullopt : std::optional<int32_t>(o.verifyWidth),
          .adaptiveWidth = o.adaptiveWidth,
          .prefillChunk = o.prefillChunk,
          .maxBatch = o.batch,
          .longestPrompt = o.promptLength,
          .longestRequest = int64_t{o.promptLength} + newTokens};
}

std::vector<int32_t> randomTokens(std::mt19937& rng, int32_t count, int64_t vocab) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < count; ++i) t.push_back(static_cast<int32_t>(rng() % vocab));
  return t;
}

// Median of `seconds`, in milliseconds.
double medianMs(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return 1e3 * seconds[seconds.size() / 2];
}

// Time to first token of `requests` [1, ...) on a fresh cache, after request 0 ran untimed.
struct TtftMode {
  std::vector<double> ttft;
  std::vector<int32_t> firstTokens;
  int64_t prefillRows = 0, reusedTokens = 0;
};

TtftMode measureTtft(runtime::Engine& engine,
                     const std::vector<runtime::GenerationRequest>& requests,
                     int64_t prefixCachePages) {
  kv::KvCacheConfig config = engine.cacheConfig();
  config.prefixCachePages = prefixCachePages;
  // Prefix reuse shares full-capacity pages only: sliding-window layers are stored at full
  // capacity in both modes, so the two measure the same forward.
  config.slidingWindowStorage = kv::SlidingWindowStorage::kFullCapacity;
  kv::KvCacheManager cache(config, engine.backend().space());
  std::unique_ptr<runtime::DFlashProposer> proposer;
  if (engine.draft()) proposer = std::make_unique<runtime::DFlashProposer>(*engine.draft());
  runtime::DecodeEngine decoder(engine.target(), cache, proposer.get(),
                                {.verifyWidth = proposer ? engine.plan().verifyWidth : 0});
  decoder.generate({requests[0]});
  TtftMode m;
  for (size_t r = 1; r < requests.size(); ++r) {
    engine.backend().synchronize();
    Clock::time_point first;
    const Clock::time_point start = Clock::now();
    const std::vector<runtime::GenerationResult> out =
        decoder.generate({requests[r]}, [&](int32_t, int32_t) { first = Clock::now(); });
    m.ttft.push_back(std::chrono::duration<double>(first - start).count());
    m.firstTokens.push_back(out[0].tokens[0]);
    m.prefillRows += decoder.stats().prefillRows;
    m.reusedTokens += decoder.stats().reusedTokens;
  }
  return m;
}

// --prefix-reuse: time to first token of a prompt whose first sharedLength tokens an earlier
// request already ran, with prefix reuse off (the whole prompt is prefilled) and on (only the
// blocks after the shared, published ones are). Each mode gets its own cache and decoder; one
// untimed request (the shared prefix and its own suffix) warms up and, with reuse, publishes
// the prefix; then ttftRuns requests with fresh suffixes are timed from generate() to their
// first token (maxNewTokens 1: the prefill's token). With --draft the draft's context of the
// suffix is computed too (and the prefix's reused), as speculative decoding does.
void runPrefixReuseBench(const BenchOptions& o, runtime::Engine& engine, double loadS) {
  std::mt19937 rng(0);
  const int64_t vocab = engine.target().config().vocab_size;
  const std::vector<int32_t> shared = randomTokens(rng, o.sharedLength, vocab);
  std::vector<runtime::GenerationRequest> requests;  // [0]: warm-up, then the timed ones
  for (int32_t r = 0; r <= o.ttftRuns; ++r) {
    runtime::GenerationRequest q{.prompt = shared, .maxNewTokens = 1};
    const std::vector<int32_t> suffix = randomTokens(rng, o.promptLength - o.sharedLength, vocab);
    q.prompt.insert(q.prompt.end(), suffix.begin(), suffix.end());
    requests.push_back(std::move(q));
  }
  // Room to retain the shared prefix and a suffix or two (older suffixes are evicted, LRU).
  const int64_t promptPages = (o.promptLength + kv::kTokensPerPage - 1) / kv::kTokensPerPage;
  const TtftMode off = measureTtft(engine, requests, 0),
                 on = measureTtft(engine, requests, 2 * promptPages);
  int32_t same = 0;
  for (size_t r = 0; r < off.firstTokens.size(); ++r)
    same += off.firstTokens[r] == on.firstTokens[r];
  const std::string backendName = engine.backend().name();
  const bool draft = engine.draft() != nullptr;
  const nlohmann::json out = {{"model", o.model},
                              {"backend", backendName},
                              {"draft", draft ? o.draft : ""},
                              {"load_s", loadS},
                              {"prompt_len", o.promptLength},
                              {"shared_len", o.sharedLength},
                              {"runs", o.ttftRuns},
                              {"ttft_ms_reuse_off", medianMs(off.ttft)},
                              {"ttft_ms_reuse_on", medianMs(on.ttft)},
                              {"speedup", medianMs(off.ttft) / medianMs(on.ttft)},
                              {"prefill_rows_reuse_off", off.prefillRows / o.ttftRuns},
                              {"prefill_rows_reuse_on", on.prefillRows / o.ttftRuns},
                              {"reused_tokens", on.reusedTokens / o.ttftRuns},
                              {"first_token_identical", same}};
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%-28s %s (%s backend)%s%s\n", "model", o.model.c_str(), backendName.c_str(),
              draft ? ", DFlash draft " : "", draft ? o.draft.c_str() : "");
  std::printf("%-28s prompt %d tokens, the first %d shared with an earlier request; median of %d\n",
              "workload", o.promptLength, o.sharedLength, o.ttftRuns);
  std::printf("%-28s %10.2f ms  (%lld prompt rows prefilled)\n", "TTFT, prefix reuse off",
              medianMs(off.ttft), static_cast<long long>(off.prefillRows / o.ttftRuns));
  std::printf("%-28s %10.2f ms  (%lld prompt rows prefilled, %lld reused)\n",
              "TTFT, prefix reuse on", medianMs(on.ttft),
              static_cast<long long>(on.prefillRows / o.ttftRuns),
              static_cast<long long>(on.reusedTokens / o.ttftRuns));
  std::printf("%-28s %10.2fx\n", "speedup", out["speedup"].get<double>());
  std::printf("%-28s %d of %d\n", "first token identical", same, o.ttftRuns);
}

// The fixed workload: `batch` random prompts (seed 0), greedy, no stop tokens.
std::vector<runtime::GenerationRequest> randomWorkload(const BenchOptions& o, int64_t vocab) {
  std::mt19937 rng(0);
  std::vector<runtime::GenerationRequest> requests;
  for (int32_t b = 0; b < o.batch; ++b) {
    requests.push_back(
        {.prompt = randomTokens(rng, o.promptLength, vocab), .maxNewTokens = o.genLength});
  }
  return requests;
}

// A decoder's results of the timed run: each engine runs the workload twice, the first run
// capturing the step graphs.
struct TimedRun {
  std::vector<runtime::GenerationResult> results = {};
  runtime::SpeculationStats stats = {};
};

TimedRun runTwice(runtime::DecodeEngine& decoder,
                  const std::vector<runtime::GenerationRequest>& requests) {
  decoder.generate(requests);
  TimedRun run{.results = decoder.generate(requests)};
  run.stats = decoder.stats();
  return run;
}

// The replay proposer for the speculative run. The greedy run to replay is recorded from a
// speculative run itself (replaying the plain run): on the GPU at batch > 1, verify rows and
// decode rows round differently in bf16, so on a random-weight model, whose logits are full of
// near-ties, plain's tokens can stop matching the verify's argmax after the first tie; the
// speculative run's own tokens do not (same rows, same kernels, same context). At batch 1 both
// are the same.
std::unique_ptr<runtime::ReplayProposer> replayProposer(
    const BenchOptions& o, runtime::Engine& engine,
    const std::vector<runtime::GenerationRequest>& requests,
    const std::vector<runtime::GenerationResult>& plain) {
  using runtime::ReplayProposer;
  const runtime::EnginePlan& plan = engine.plan();
  const int32_t vocab = static_cast<int32_t>(engine.target().config().vocab_size);
  ReplayProposer first(engine.backend(), plan.blockSize, plan.maxBatch,
                       ReplayProposer::recordingsOf(requests, plain), vocab, 0.0f);
  const std::vector<runtime::GenerationResult> recorded =
      runtime::DecodeEngine(engine.target(), engine.cache(), &first,
                            {.verifyWidth = plan.verifyWidth})
          .generate(requests);
  return std::make_unique<ReplayProposer>(engine.backend(), plan.blockSize, plan.maxBatch,
                                          ReplayProposer::recordingsOf(requests, recorded), vocab,
                                          o.corrupt);
}

// The fraction of plain's tokens before the first difference, per request, averaged: greedy
// speculative output equals plain greedy output (exactly at batch 1; up to near-ties at batch > 1
// on the GPU).
double identicalPrefixFraction(const std::vector<runtime::GenerationResult>& spec,
                               const std::vector<runtime::GenerationResult>& plain) {
  int64_t same = 0, total = 0;
  for (size_t r = 0; r < spec.size(); ++r) {
    const size_t n = std::min(spec[r].tokens.size(), plain[r].tokens.size());
    size_t k = 0;
    while (k < n && spec[r].tokens[k] == plain[r].tokens[k]) ++k;
    same += static_cast<int64_t>(k);
    total += static_cast<int64_t>(plain[r].tokens.size());
  }
  return total ? static_cast<double>(same) / static_cast<double>(total) : 1.0;
}

// Isolated step costs at the prompt's context, captured as the engine runs them, into `out`.
void timeIsolatedSteps(const BenchOptions& o, runtime::Engine& engine, nlohmann::json& out) {
  kv::KvCacheManager& timing = engine.cache();  // empty: every decoder's requests retired
  const int32_t W = engine.plan().verifyWidth;
  for (int32_t b = 0; b < o.batch; ++b) {
    timing.admit();
    // The prompt's rows as cache steps (nothing is computed: only the timing's context length
    // matters), in pieces the slot's window reservation allows.
    for (int32_t length = 0; length < o.promptLength;) {
      const kv::SwaStepWrite w{b, static_cast<int32_t>(std::min<int64_t>(timing.maxStepTokens(b),
                                                                         o.promptLength - length))};
      timing.completeStep(timing.beginStep({&w, 1}));
      timing.commitBase(b, w.count);
      length += w.count;
    }
    if (engine.draft()) timing.commitDraft(b, o.promptLength);
  }
  const double decodeS =
      targetStepSeconds(engine.target(), timing, o.batch, 1, o.promptLength, o.repeats);
  const double verifyS =
      targetStepSeconds(engine.target(), timing, o.batch, W, o.promptLength, o.repeats);
  out["decode_forward_ms"] = 1e3 * decodeS;
  out["verify_forward_ms"] = 1e3 * verifyS;
  out["verify_over_decode"] = verifyS / decodeS;
  if (engine.draft()) {
    const double proposeS =
        proposalSeconds(*engine.draft(), timing, o.batch, o.promptLength, W, o.repeats);
    out["proposal_ms"] = 1e3 * proposeS;
    out["proposal_over_decode"] = proposeS / decodeS;
  }
}

// The speculative run against `plain` (the draft's or the replay draft's), its statistics and the
// isolated step costs, into `out`.
void runSpeculative(const BenchOptions& o, runtime::Engine& engine,
                    const std::vector<runtime::GenerationRequest>& requests, const TimedRun& plain,
                    double tokens, nlohmann::json& out) {
  std::unique_ptr<runtime::ReplayProposer> replay;
  std::unique_ptr<runtime::DecodeEngine> replayDecoder;
  if (o.replay) {
    replay = replayProposer(o, engine, requests, plain.results);
    replayDecoder = std::make_unique<runtime::DecodeEngine>(
        engine.target(), engine.cache(), replay.get(),
        runtime::EngineOptions{.verifyWidth = engine.plan().verifyWidth,
                               .adaptiveWidth = o.adaptiveWidth});
  }
  const TimedRun spec = runTwice(replay ? *replayDecoder : engine.decoder(), requests);
  const double specTokS = tokens / spec.stats.decodeSeconds;
  out["draft"] = engine.draft() ? o.draft : "replay";
  out["block_size"] = engine.plan().blockSize;
  out["verify_width"] = engine.plan().verifyWidth;
  out["spec_tok_s"] = specTokS;
  out["speedup"] = specTokS / out["plain_tok_s"].get<double>();
  out["tau"] = spec.stats.meanAcceptLength();
  out["accept_histogram"] = spec.stats.acceptHistogram;
  out["adaptive_width"] = o.adaptiveWidth;
  out["width_steps"] = spec.stats.widthSteps;  // device steps at each W (index W)
  out["spec_step_ms"] = 1e3 * spec.stats.decodeSeconds / static_cast<double>(spec.stats.iterations);
  out["identical_prefix_fraction"] = identicalPrefixFraction(spec.results, plain.results);
  timeIsolatedSteps(o, engine, out);
}

void printTable(const BenchOptions& o, const runtime::Engine& engine, const nlohmann::json& out) {
  const bool speculative = engine.plan().speculative;
  std::printf("%-28s %s (%s backend)\n", "model", o.model.c_str(), engine.backend().name().c_str());
  std::printf("%-28s batch %d, prompt %d, generate %d, greedy\n", "workload", o.batch,
              o.promptLength, o.genLength);
  std::printf("%-28s %10.2f ms\n", "prefill (per prompt)", out["prefill_ms"].get<double>());
  std::printf("%-28s %10.1f tok/s  (%.3f ms/step)\n", "plain decode",
              out["plain_tok_s"].get<double>(), out["plain_step_ms"].get<double>());
  if (!speculative) return;
  std::printf("%-28s %10.1f tok/s  (%.3f ms/step, %.2fx)\n",
              engine.draft() ? "DFlash decode" : "replay-draft decode",
              out["spec_tok_s"].get<double>(), out["spec_step_ms"].get<double>(),
              out["speedup"].get<double>());
  std::printf("%-28s %10.2f  (verify width %s%d, block %d)\n", "tau (mean accept length)",
              out["tau"].get<double>(), o.adaptiveWidth ? "adaptive up to " : "",
              engine.plan().verifyWidth, engine.plan().blockSize);
  if (o.adaptiveWidth) {
    std::string steps;
    const std::vector<int64_t> widthSteps = out["width_steps"].get<std::vector<int64_t>>();
    for (size_t w = 1; w < widthSteps.size(); ++w) {
      if (widthSteps[w] > 0)
        steps += " W" + std::to_string(w) + ": " + std::to_string(widthSteps[w]);
    }
    std::printf("%-28s %s\n", "steps per verify width", steps.c_str());
  }
  std::printf("%-28s %10.3f ms\n", "decode forward", out["decode_forward_ms"].get<double>());
  std::printf("%-28s %10.3f ms  (%.2fx decode)\n", "verify forward",
              out["verify_forward_ms"].get<double>(), out["verify_over_decode"].get<double>());
  if (engine.draft()) {
    std::printf("%-28s %10.3f ms  (%.2fx decode)\n", "draft proposal",
                out["proposal_ms"].get<double>(), out["proposal_over_decode"].get<double>());
  }
  std::printf("%-28s %10.4f\n", "output identical to plain",
              out["identical_prefix_fraction"].get<double>());
}

void runBench(const BenchOptions& o) {
  validateOptions(o);
  const Clock::time_point loadStart = Clock::now();
  const std::unique_ptr<ProgressPrinter> progress = o.quiet ? nullptr : stderrProgress();
  runtime::EngineConfig config = engineConfig(o);
  if (progress) config.onProgress = progress->callback();
  const std::unique_ptr<runtime::Engine> engine = runtime::buildEngine(config);
  const double loadS = std::chrono::duration<double>(Clock::now() - loadStart).count();
  if (o.prefixReuse) {
    runPrefixReuseBench(o, *engine, loadS);
    return;
  }
  const std::vector<runtime::GenerationRequest> requests =
      randomWorkload(o, engine->target().config().vocab_size);
  const double tokens =
      static_cast<double>(o.batch) * (o.genLength - 1);  // the first comes from prefill

  // Plain decoding on the engine's cache (empty between runs), then speculative on the same one.
  runtime::DecodeEngine plainDecoder(engine->target(), engine->cache());
  const TimedRun plain = runTwice(plainDecoder, requests);
  const double plainTokS = tokens / plain.stats.decodeSeconds;
  nlohmann::json out = {{"model", o.model},
                        {"backend", engine->backend().name()},
                        {"batch", o.batch},
                        {"prompt_len", o.promptLength},
                        {"gen_len", o.genLength},
                        {"load_s", loadS},
                        {"prefill_chunk", engine->plan().maxTokens},
                        {"prefill_ms", 1e3 * plain.stats.prefillSeconds / o.batch},
                        {"plain_tok_s", plainTokS},
                        {"plain_step_ms", 1e3 * plain.stats.decodeSeconds /
                                              static_cast<double>(plain.stats.iterations)}};
  if (engine->plan().speculative) runSpeculative(o, *engine, requests, plain, tokens, out);
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  printTable(o, *engine, out);
}

}  // namespace

void addBenchCommand(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench",
                                     "Fixed workload: prefill, plain decode, speculative decode (a "
                                     "DFlash draft or the replay draft)");
  cmd->add_option("--model", options->model, "Target model folder")->required();
  cmd->add_option("--draft", options->draft, "DFlash draft folder (z-lab format)");
  cmd->add_flag(
      "--replay", options->replay,
      "Use the replay draft: it proposes the plain run's own tokens (tau = verify width)");
  addIntegerFlag(cmd, "--block-size", options->blockSize, 2, runtime::kMaxReplayBlockSize,
                 "Replay draft block size");
  addIntegerFlag(cmd, "--verify-width", options->verifyWidth, 0, model::kMaxDraftBlockSize,
                 "Rows a speculative step verifies per sequence, 2 to the block size (0 = auto: "
                 "the block size on cuda, " +
                     std::to_string(runtime::kCpuVerifyWidth) + " on cpu)");
  cmd->add_flag("--adaptive-width", options->adaptiveWidth,
                "Speculative run: the engine picks each step's verify width (1 = plain step) from "
                "the batch, measured acceptance and step times, up to --verify-width auto's");
  addRealFlag(cmd, "--corrupt", options->corrupt, 0.0, 1.0,
              "Replay draft: fraction of proposals corrupted");
  addIntegerFlag(cmd, "-b,--batch", options->batch, 1, runtime::kMaxEngineBatch,
                 "Sequences decoded together");
  addIntegerFlag(cmd, "--prompt-len", options->promptLength, 1, kMaxBenchLength,
                 "Prompt tokens (random ids)");
  addIntegerFlag(cmd, "--gen-len", options->genLength, 2, kMaxBenchLength,
                 "Tokens generated per sequence");
  addIntegerFlag(cmd, "--prefill-chunk", options->prefillChunk, runtime::kMinPrefillChunk,
                 runtime::kMaxPrefillChunk,
                 "Rows of one target forward: prompts prefill in chunks this long (each chunk "
                 "reads every weight)");
  addIntegerFlag(cmd, "--repeats", options->repeats, 1, kMaxRepeats,
                 "Launches per isolated step timing");
  cmd->add_option("--backend", options->backend, "auto (GPU if present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag(
      "--prefix-reuse", options->prefixReuse,
      "Instead: time to first token of a --prompt-len prompt whose first --shared-len tokens an "
      "earlier request ran, prefix reuse off vs on (batch 1; --draft adds the draft's context)");
  addIntegerFlag(cmd, "--shared-len", options->sharedLength, kv::kTokensPerPage,
                 kMaxBenchLength - 1, "--prefix-reuse: tokens shared with the earlier request");
  addIntegerFlag(cmd, "--ttft-runs", options->ttftRuns, 1, kMaxTtftRuns,
                 "--prefix-reuse: timed requests per mode (median)");
  cmd->add_flag("--json", options->json, "Print one JSON object instead of the table");
  cmd->add_flag("-q,--quiet", options->quiet,
                "No progress lines on stderr for a model load or prefill that takes over a second");
  cmd->callback([options] { runBench(*options); });
}

}  // namespace es::cli
