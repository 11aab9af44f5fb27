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

#include "common/errors.h"
#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/plain_decoder.h"
#include "runtime/replay_proposer.h"
#include "runtime/speculative_decoder.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string draft;         // a DFlash draft folder, or empty
  bool replay = false;       // the replay draft instead (τ = block size while it matches)
  int32_t blockSize = 16;    // replay draft's block size
  float corrupt = 0.0f;      // replay draft's corruption rate
  int32_t verifyWidth = 0;   // W, rows a speculative step verifies (0 = the block size)
  int32_t batch = 1;
  int32_t promptLength = 128;
  int32_t genLength = 256;
  int32_t repeats = 20;      // launches per isolated step timing
  std::string backend = "auto";
  bool json = false;
  bool prefixReuse = false;   // time to first token with and without prefix reuse instead
  int32_t sharedLength = 4096;  // prefix reuse: prompt tokens shared with an earlier request
  int32_t ttftRuns = 5;         // prefix reuse: timed requests per mode (median reported)
  // Rows of one target forward (the target's maxTokens, at least batch x verify width): a prompt
  // is prefilled in chunks of this many rows, each reading every weight once.
  int32_t prefillChunk = 256;
};

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
// `context` tokens (decode: rows 1; verify: rows BS), all logits kept, as the engine runs it.
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
  model::DeviceForwardBatch f;
  f.tokens = dTokens.as<int32_t>(); f.positions = dPositions.as<int32_t>();
  f.tokenToSequence = dOwners.as<int32_t>(); f.cuQSeqLens = dCuQ.as<int32_t>();
  f.kvLengths = dKvLengths.as<int32_t>(); f.logitRows = dRows.as<int32_t>();
  f.numTokens = batch * rows; f.batchSize = batch; f.maxQSeqLen = rows; f.numLogitRows = batch * rows;
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
double proposalSeconds(model::DFlashDraft& draft, kv::KvCacheManager& cache, int32_t batch, int32_t context,
                       int32_t rows, int32_t repeats) {
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
  model::DraftProposalInputs in;
  in.anchors = dAnchors.as<int32_t>(); in.positions = dPositions.as<int32_t>(); in.kvLengths = dKv.as<int32_t>();
  in.batchSize = batch; in.rowsPerBlock = rows; in.argmaxOut = out.as<int32_t>();
  draft.syncPageTable(cache);
  return timeLaunches(backend, repeats, [&] { draft.propose(in, cache); });
}

// --prefix-reuse: time to first token of a prompt whose first sharedLength tokens an earlier
// request already ran, with prefix reuse off (the whole prompt is prefilled) and on (only the
// blocks after the shared, published ones are). Each mode gets its own cache and engine; one
// untimed request (the shared prefix and its own suffix) warms up and, with reuse, publishes
// the prefix; then ttftRuns requests with fresh suffixes are timed from generate() to their
// first token (maxNewTokens 1: the prefill's token). With --draft the draft's context of the
// suffix is computed too (and the prefix's reused), as the speculative decoder does.
void runPrefixReuseBench(const BenchOptions& o, ops::Backend& backend, const model::ModelConfig& config,
                         model::TargetModel& target, model::DFlashDraft* draft, double loadS) {
  constexpr const char* kWhere = "bench";
  ES_CHECK_ARG(!o.replay, kWhere, "--replay", "set", "cannot be combined with --prefix-reuse (use --draft or none)");
  ES_CHECK_ARG(o.batch == 1, kWhere, "--batch", o.batch, "must be 1 with --prefix-reuse");
  ES_CHECK_ARG(o.sharedLength >= kv::kTokensPerPage && o.sharedLength < o.promptLength, kWhere, "--shared-len",
               o.sharedLength, "must be in [", kv::kTokensPerPage, ", --prompt-len = ", o.promptLength,
               ") with --prefix-reuse");
  ES_CHECK_ARG(o.ttftRuns >= 1 && o.ttftRuns <= 1000, kWhere, "--ttft-runs", o.ttftRuns, "must be in [1, 1000]");
  const int32_t BS = draft ? draft->blockSize() : 1;
  std::mt19937 rng(0);
  auto randomTokens = [&](int32_t n) {
    std::vector<int32_t> t;
    for (int32_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng() % config.vocab_size));
    return t;
  };
  const std::vector<int32_t> shared = randomTokens(o.sharedLength);
  std::vector<runtime::GenerationRequest> requests;  // [0]: warm-up, then the timed ones
  for (int32_t r = 0; r <= o.ttftRuns; ++r) {
    runtime::GenerationRequest q;
    q.prompt = shared;
    const std::vector<int32_t> suffix = randomTokens(o.promptLength - o.sharedLength);
    q.prompt.insert(q.prompt.end(), suffix.begin(), suffix.end());
    q.maxNewTokens = 1;
    requests.push_back(std::move(q));
  }

  kv::KvCacheConfig kvc;
  kvc.maxBatchSize = 1;
  kvc.maxSequenceLength = o.promptLength + 2 + 2 * BS;
  kvc.dtype = backend.computeDtype();
  kvc.baseLayers = target.kvLayerShapes();
  if (draft) kvc.draftLayers = draft->kvLayerShapes();
  const int64_t promptPages = (o.promptLength + kv::kTokensPerPage - 1) / kv::kTokensPerPage;

  struct Mode {
    std::vector<double> ttft;
    std::vector<int32_t> firstTokens;
    int64_t prefillRows = 0, reusedTokens = 0;
  };
  auto measure = [&](bool reuse) {
    // Room to retain the shared prefix and a suffix or two (older suffixes are evicted, LRU).
    kvc.prefixCachePages = reuse ? 2 * promptPages : 0;
    // Prefix reuse shares full-capacity pages only: sliding-window layers are stored at full
    // capacity in both modes, so the two measure the same forward.
    kvc.slidingWindowStorage = kv::SlidingWindowStorage::kFullCapacity;
    kv::KvCacheManager cache(kvc, backend.space());
    std::unique_ptr<runtime::DFlashProposer> proposer;
    if (draft) proposer = std::make_unique<runtime::DFlashProposer>(*draft);
    runtime::DecodeEngine engine(target, cache, proposer.get());
    engine.generate({requests[0]});
    Mode m;
    for (int32_t r = 1; r <= o.ttftRuns; ++r) {
      backend.synchronize();
      Clock::time_point first;
      const Clock::time_point t0 = Clock::now();
      const std::vector<runtime::GenerationResult> out =
          engine.generate({requests[static_cast<size_t>(r)]}, [&](int32_t, int32_t) { first = Clock::now(); });
      m.ttft.push_back(std::chrono::duration<double>(first - t0).count());
      m.firstTokens.push_back(out[0].tokens[0]);
      m.prefillRows += engine.stats().prefillRows;
      m.reusedTokens += engine.stats().reusedTokens;
    }
    return m;
  };
  const Mode off = measure(false), on = measure(true);
  auto medianMs = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return 1e3 * v[v.size() / 2];
  };
  int32_t same = 0;
  for (size_t r = 0; r < off.firstTokens.size(); ++r) same += off.firstTokens[r] == on.firstTokens[r];
  const nlohmann::json out = {
      {"model", o.model}, {"backend", backend.name()}, {"draft", draft ? o.draft : ""}, {"load_s", loadS},
      {"prompt_len", o.promptLength}, {"shared_len", o.sharedLength}, {"runs", o.ttftRuns},
      {"ttft_ms_reuse_off", medianMs(off.ttft)}, {"ttft_ms_reuse_on", medianMs(on.ttft)},
      {"speedup", medianMs(off.ttft) / medianMs(on.ttft)},
      {"prefill_rows_reuse_off", off.prefillRows / o.ttftRuns}, {"prefill_rows_reuse_on", on.prefillRows / o.ttftRuns},
      {"reused_tokens", on.reusedTokens / o.ttftRuns}, {"first_token_identical", same}};
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%-28s %s (%s backend)%s%s\n", "model", o.model.c_str(), backend.name().c_str(),
              draft ? ", DFlash draft " : "", draft ? o.draft.c_str() : "");
  std::printf("%-28s prompt %d tokens, the first %d shared with an earlier request; median of %d\n", "workload",
              o.promptLength, o.sharedLength, o.ttftRuns);
  std::printf("%-28s %10.2f ms  (%lld prompt rows prefilled)\n", "TTFT, prefix reuse off", medianMs(off.ttft),
              static_cast<long long>(off.prefillRows / o.ttftRuns));
  std::printf("%-28s %10.2f ms  (%lld prompt rows prefilled, %lld reused)\n", "TTFT, prefix reuse on",
              medianMs(on.ttft), static_cast<long long>(on.prefillRows / o.ttftRuns),
              static_cast<long long>(on.reusedTokens / o.ttftRuns));
  std::printf("%-28s %10.2fx\n", "speedup", out["speedup"].get<double>());
  std::printf("%-28s %d of %d\n", "first token identical", same, o.ttftRuns);
}

void runBench(const BenchOptions& o) {
  constexpr const char* kWhere = "bench";
  ES_CHECK_ARG(!o.model.empty(), kWhere, "--model", "\"\"", "is required (a model folder)");
  ES_CHECK_ARG(o.batch >= 1 && o.batch <= 256, kWhere, "--batch", o.batch, "must be in [1, 256]");
  ES_CHECK_ARG(o.promptLength >= 1 && o.promptLength <= 65536, kWhere, "--prompt-len", o.promptLength,
               "must be in [1, 65536]");
  ES_CHECK_ARG(o.genLength >= 2 && o.genLength <= 65536, kWhere, "--gen-len", o.genLength, "must be in [2, 65536]");
  ES_CHECK_ARG(o.prefillChunk >= 16 && o.prefillChunk <= 65536, kWhere, "--prefill-chunk", o.prefillChunk,
               "must be in [16, 65536]");
  ES_CHECK_ARG(o.draft.empty() || !o.replay, kWhere, "--replay", "set", "cannot be combined with --draft");
  ES_CHECK_ARG(o.blockSize >= 2 && o.blockSize <= 32, kWhere, "--block-size", o.blockSize, "must be in [2, 32]");
  ES_CHECK_ARG(o.corrupt >= 0.0f && o.corrupt <= 1.0f, kWhere, "--corrupt", o.corrupt, "must be in [0, 1]");
  ES_CHECK_ARG(o.repeats >= 1, kWhere, "--repeats", o.repeats, "must be >= 1");

  auto backend = ops::makeBackend(o.backend);
  const model::ModelConfig config = model::loadModelConfig(o.model);
  const bool speculative = !o.draft.empty() || o.replay;
  const std::vector<int32_t> taps =
      o.draft.empty() ? std::vector<int32_t>{} : model::DFlashDraft::requiredTargetTaps(o.draft, config);
  const int32_t BS0 = o.replay ? o.blockSize : 0;
  // Rows of one forward: a prefill chunk, and a whole batch's verify of W rows per sequence.
  const int32_t blockSize = !o.draft.empty() ? model::DFlashDraft::blockSizeOf(o.draft) : o.replay ? o.blockSize : 1;
  ES_CHECK_ARG(o.verifyWidth == 0 || (speculative && o.verifyWidth >= 2 && o.verifyWidth <= blockSize), kWhere,
               "--verify-width", o.verifyWidth, "must be 0 (the block size) or, with --draft or --replay, in [2, block size = ",
               blockSize, "]");
  ES_CHECK_ARG(o.verifyWidth == 0 || !o.prefixReuse, kWhere, "--verify-width", o.verifyWidth,
               "cannot be combined with --prefix-reuse (its engine verifies whole blocks)");
  const int32_t W = speculative ? (o.verifyWidth == 0 ? blockSize : o.verifyWidth) : 1;
  const int32_t maxTokens = static_cast<int32_t>(std::max<int64_t>(o.prefillChunk, int64_t{o.batch} * W));
  const Clock::time_point l0 = Clock::now();
  model::TargetModel target(o.model, *backend, maxTokens, taps);
  std::unique_ptr<model::DFlashDraft> draft;
  if (!o.draft.empty()) draft = std::make_unique<model::DFlashDraft>(o.draft, *backend, target, maxTokens, o.batch);
  const double loadS = std::chrono::duration<double>(Clock::now() - l0).count();
  if (o.prefixReuse) {
    runPrefixReuseBench(o, *backend, config, target, draft.get(), loadS);
    return;
  }
  const int32_t BS = draft ? draft->blockSize() : BS0;

  kv::KvCacheConfig kvc;
  kvc.maxBatchSize = o.batch;
  kvc.maxSequenceLength = o.promptLength + o.genLength + 2 * std::max(BS, 1);
  kvc.dtype = backend->computeDtype();
  kvc.baseLayers = target.kvLayerShapes();
  if (draft) kvc.draftLayers = draft->kvLayerShapes();

  // The fixed workload: random prompts (seed 0), greedy, no stop tokens.
  std::mt19937 rng(0);
  std::vector<runtime::GenerationRequest> requests(static_cast<size_t>(o.batch));
  for (runtime::GenerationRequest& q : requests) {
    for (int32_t i = 0; i < o.promptLength; ++i) q.prompt.push_back(static_cast<int32_t>(rng() % config.vocab_size));
    q.maxNewTokens = o.genLength;
  }
  const double tokens = static_cast<double>(o.batch) * (o.genLength - 1);  // the first comes from prefill

  // Plain decoding, run twice: the first run captures the step graphs, the second is timed.
  std::vector<runtime::GenerationResult> plain;
  runtime::SpeculationStats plainStats;
  {
    kv::KvCacheManager cache(kvc, backend->space());
    runtime::PlainDecoder decoder(target, cache);
    decoder.generate(requests);
    plain = decoder.generate(requests);
    plainStats = decoder.stats();
  }
  const double plainTokS = tokens / plainStats.decodeSeconds;
  const double stepMs = 1e3 * plainStats.decodeSeconds / static_cast<double>(plainStats.iterations);

  nlohmann::json out = {{"model", o.model}, {"backend", backend->name()}, {"batch", o.batch},
                        {"prompt_len", o.promptLength}, {"gen_len", o.genLength}, {"load_s", loadS},
                        {"prefill_chunk", maxTokens},
                        {"prefill_ms", 1e3 * plainStats.prefillSeconds / o.batch},
                        {"plain_tok_s", plainTokS}, {"plain_step_ms", stepMs}};
  if (speculative) {
    std::unique_ptr<runtime::DraftProposer> proposer;
    if (draft) {
      proposer = std::make_unique<runtime::DFlashProposer>(*draft);
    } else {
      const int32_t V = static_cast<int32_t>(config.vocab_size);
      // The greedy run to replay is recorded from the speculative decoder itself (replaying the
      // plain run): on the GPU at batch > 1, verify rows and decode rows round differently in
      // bf16, so on a random-weight model, whose logits are full of near-ties, plain's tokens
      // can stop matching the verify's argmax after the first tie; the speculative run's own
      // tokens do not (same rows, same kernels, same context). At batch 1 both are the same.
      using runtime::ReplayProposer;
      std::vector<runtime::GenerationResult> recorded;
      {
        kv::KvCacheManager cache(kvc, backend->space());
        ReplayProposer first(*backend, BS, o.batch, ReplayProposer::recordingsOf(requests, plain), V, 0.0f);
        recorded = runtime::SpeculativeDecoder(target, first, cache, runtime::EngineOptions{.verifyWidth = W})
                       .generate(requests);
      }
      proposer = std::make_unique<ReplayProposer>(*backend, BS, o.batch, ReplayProposer::recordingsOf(requests, recorded),
                                                  V, o.corrupt);
    }
    kv::KvCacheManager cache(kvc, backend->space());
    runtime::SpeculativeDecoder decoder(target, *proposer, cache, runtime::EngineOptions{.verifyWidth = W});
    decoder.generate(requests);
    const std::vector<runtime::GenerationResult> spec = decoder.generate(requests);
    const runtime::SpeculationStats& s = decoder.stats();
    int64_t same = 0, total = 0;
    for (size_t r = 0; r < spec.size(); ++r) {
      const size_t n = std::min(spec[r].tokens.size(), plain[r].tokens.size());
      size_t k = 0;
      while (k < n && spec[r].tokens[k] == plain[r].tokens[k]) ++k;
      same += static_cast<int64_t>(k);
      total += static_cast<int64_t>(plain[r].tokens.size());
    }
    const double specTokS = tokens / s.decodeSeconds;
    out["draft"] = draft ? o.draft : "replay";
    out["block_size"] = BS;
    out["verify_width"] = W;
    out["spec_tok_s"] = specTokS;
    out["speedup"] = specTokS / plainTokS;
    out["tau"] = s.meanAcceptLength();
    out["accept_histogram"] = s.acceptHistogram;
    out["spec_step_ms"] = 1e3 * s.decodeSeconds / static_cast<double>(s.iterations);
    // Greedy speculative output equals plain greedy output (exactly at batch 1; up to near-ties
    // at batch > 1 on the GPU): the fraction of plain's tokens before the first difference, per
    // request, averaged.
    out["identical_prefix_fraction"] = total ? static_cast<double>(same) / static_cast<double>(total) : 1.0;

    // Isolated step costs at the prompt's context, captured as the engine runs them.
    kv::KvCacheManager timing(kvc, backend->space());
    for (int32_t b = 0; b < o.batch; ++b) {
      timing.admit();
      // The prompt's rows as cache steps (nothing is computed: only the timing's context length
      // matters), in pieces the slot's window reservation allows.
      for (int32_t length = 0; length < o.promptLength;) {
        const kv::SwaStepWrite w{b, static_cast<int32_t>(std::min<int64_t>(
                                        timing.maxStepTokens(b), o.promptLength - length))};
        timing.completeStep(timing.beginStep({&w, 1}));
        timing.commitBase(b, w.count);
        length += w.count;
      }
      if (draft) timing.commitDraft(b, o.promptLength);
    }
    const double decodeS = targetStepSeconds(target, timing, o.batch, 1, o.promptLength, o.repeats);
    const double verifyS = targetStepSeconds(target, timing, o.batch, W, o.promptLength, o.repeats);
    out["decode_forward_ms"] = 1e3 * decodeS;
    out["verify_forward_ms"] = 1e3 * verifyS;
    out["verify_over_decode"] = verifyS / decodeS;
    if (draft) {
      const double proposeS = proposalSeconds(*draft, timing, o.batch, o.promptLength, W, o.repeats);
      out["proposal_ms"] = 1e3 * proposeS;
      out["proposal_over_decode"] = proposeS / decodeS;
    }
  }

  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%-28s %s (%s backend)\n", "model", o.model.c_str(), backend->name().c_str());
  std::printf("%-28s batch %d, prompt %d, generate %d, greedy\n", "workload", o.batch, o.promptLength, o.genLength);
  std::printf("%-28s %10.2f ms\n", "prefill (per prompt)", out["prefill_ms"].get<double>());
  std::printf("%-28s %10.1f tok/s  (%.3f ms/step)\n", "plain decode", plainTokS, stepMs);
  if (speculative) {
    std::printf("%-28s %10.1f tok/s  (%.3f ms/step, %.2fx)\n", draft ? "DFlash decode" : "replay-draft decode",
                out["spec_tok_s"].get<double>(), out["spec_step_ms"].get<double>(), out["speedup"].get<double>());
    std::printf("%-28s %10.2f  (verify width %d, block %d)\n", "tau (mean accept length)", out["tau"].get<double>(),
                W, BS);
    std::printf("%-28s %10.3f ms\n", "decode forward", out["decode_forward_ms"].get<double>());
    std::printf("%-28s %10.3f ms  (%.2fx decode)\n", "verify forward", out["verify_forward_ms"].get<double>(),
                out["verify_over_decode"].get<double>());
    if (draft) {
      std::printf("%-28s %10.3f ms  (%.2fx decode)\n", "draft proposal", out["proposal_ms"].get<double>(),
                  out["proposal_over_decode"].get<double>());
    }
    std::printf("%-28s %10.4f\n", "output identical to plain", out["identical_prefix_fraction"].get<double>());
  }
}

}  // namespace

void addBenchCommand(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Fixed workload: prefill, plain decode, speculative decode (a DFlash draft or the replay draft)");
  cmd->add_option("--model", options->model, "Target model folder")->required();
  cmd->add_option("--draft", options->draft, "DFlash draft folder (z-lab format)");
  cmd->add_flag("--replay", options->replay,
                "Use the replay draft: it proposes the plain run's own tokens (tau = block size)");
  cmd->add_option("--block-size", options->blockSize, "Replay draft block size")->capture_default_str();
  cmd->add_option("--verify-width", options->verifyWidth,
                  "Rows a speculative step verifies per sequence, 2 to the block size (0 = the block size)")
      ->capture_default_str();
  cmd->add_option("--corrupt", options->corrupt, "Replay draft: fraction of proposals corrupted")
      ->capture_default_str();
  cmd->add_option("-b,--batch", options->batch, "Sequences decoded together")->capture_default_str();
  cmd->add_option("--prompt-len", options->promptLength, "Prompt tokens (random ids)")->capture_default_str();
  cmd->add_option("--gen-len", options->genLength, "Tokens generated per sequence")->capture_default_str();
  cmd->add_option("--prefill-chunk", options->prefillChunk,
                  "Rows of one target forward: prompts prefill in chunks this long (each chunk reads every weight)")
      ->capture_default_str();
  cmd->add_option("--repeats", options->repeats, "Launches per isolated step timing")->capture_default_str();
  cmd->add_option("--backend", options->backend, "auto (GPU if present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--prefix-reuse", options->prefixReuse,
                "Instead: time to first token of a --prompt-len prompt whose first --shared-len tokens an "
                "earlier request ran, prefix reuse off vs on (batch 1; --draft adds the draft's context)");
  cmd->add_option("--shared-len", options->sharedLength, "--prefix-reuse: tokens shared with the earlier request")
      ->capture_default_str();
  cmd->add_option("--ttft-runs", options->ttftRuns, "--prefix-reuse: timed requests per mode (median)")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of the table");
  cmd->callback([options] { runBench(*options); });
}

}  // namespace es::cli
