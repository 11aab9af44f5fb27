#pragma once
// The DFlash oracle scenario shared by test_dflash_oracle (CPU) and test_dflash_oracle_gpu: the
// committed fixture tests/data/models/dflash_tiny (tools/dflash_reference.py) and the runtime's
// replay of it on a backend (see test_dflash_oracle.cpp's header for the scenario).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/safetensors.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "support/test_util.h"

namespace es::model::oracle {

inline std::filesystem::path fixtureDir() {
  return std::filesystem::path(test::test_data_dir()) / "models" / "dflash_tiny";
}

struct Sequence {
  std::vector<int32_t> prompt;
  std::vector<int32_t> verify;  // [BS]: round 0's anchor, then the fixed drafted tokens
  int32_t accepted = 0;         // drafted tokens committed in round 1
};

struct Round {
  std::vector<int32_t> blockStarts, anchors, argmax;  // argmax [B·BS]
  std::vector<double> margins;                        // [B·BS]
};

struct Fixture {
  nlohmann::json meta;
  SafetensorsFile reference;
  std::vector<Sequence> seqs;
  Round rounds[2];
  int32_t blockSize = 0, vocab = 0, hidden = 0;
  std::vector<int32_t> taps;
};

inline Fixture loadFixture() {
  const std::filesystem::path dir = fixtureDir();
  if (!std::filesystem::exists(dir / "reference.json")) {
    throw std::runtime_error(
        "missing DFlash oracle fixture " + dir.string() +
        " (python3 tools/dflash_reference.py make-fixture tests/data/models/dflash_tiny)");
  }
  std::ifstream f(dir / "reference.json");
  Fixture fx{
      nlohmann::json::parse(f), SafetensorsFile::open(dir / "reference.safetensors"), {}, {}};
  const nlohmann::json& m = fx.meta;
  fx.blockSize = m.at("block_size");
  fx.vocab = m.at("vocab_size");
  fx.hidden = m.at("hidden_size");
  fx.taps = m.at("target_layer_ids").get<std::vector<int32_t>>();
  for (const auto& s : m.at("sequences")) {
    fx.seqs.push_back({s.at("prompt").get<std::vector<int32_t>>(),
                       s.at("verify").get<std::vector<int32_t>>(),
                       s.at("accepted").get<int32_t>()});
  }
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& j = m.at("rounds").at(r);
    Round& rd = fx.rounds[r];
    rd.blockStarts = j.at("block_starts").get<std::vector<int32_t>>();
    rd.anchors = j.at("anchors").get<std::vector<int32_t>>();
    for (const auto& row : j.at("argmax"))
      for (int32_t t : row) rd.argmax.push_back(t);
    for (const auto& row : j.at("top2_margin"))
      for (double v : row) rd.margins.push_back(v);
  }
  return fx;
}

// What the runtime computed: host copies of the target's taps per sequence ([n, T_b, H], the
// committed rows in order) and the two proposals.
struct Outcome {
  std::vector<std::vector<float>> taps;
  DraftProposal proposals[2];
};

inline Outcome runScenario(ops::Backend& backend, const Fixture& fx) {
  const std::filesystem::path dir = fixtureDir();
  const std::vector<int32_t> taps =
      DFlashDraft::requiredTargetTaps(dir / "draft", loadModelConfig(dir / "target"));
  EXPECT_EQ(taps, fx.taps);
  TargetModel target(dir / "target", backend, 320, taps);
  DFlashDraft draft(dir / "draft", backend, target, 320, 2);
  const int32_t B = static_cast<int32_t>(fx.seqs.size()), BS = fx.blockSize, H = fx.hidden;
  const int32_t n = static_cast<int32_t>(taps.size());
  EXPECT_EQ(draft.blockSize(), BS);
  kv::KvCacheConfig c;
  c.maxBatchSize = B;
  c.maxSequenceLength = 512;
  c.dtype = backend.computeDtype();
  c.baseLayers = target.kvLayerShapes();
  c.draftLayers = draft.kvLayerShapes();
  kv::KvCacheManager cache(c, backend.space());

  Outcome out;
  out.taps.resize(static_cast<size_t>(B));
  // Appends rows [first, first + count) of forward taps [n, T, H] to sequence b's taps.
  auto keepTaps = [&](const std::vector<float>& t, int32_t T, int32_t b, int32_t first,
                      int32_t count) {
    std::vector<float>& dst = out.taps[static_cast<size_t>(b)];
    const int32_t have = static_cast<int32_t>(dst.size() / (static_cast<size_t>(n) * H));
    std::vector<float> merged(static_cast<size_t>(n) * (have + count) * H);
    for (int32_t i = 0; i < n; ++i) {
      std::copy_n(dst.begin() + static_cast<int64_t>(i) * have * H, static_cast<int64_t>(have) * H,
                  merged.begin() + static_cast<int64_t>(i) * (have + count) * H);
      std::copy_n(t.begin() + (static_cast<int64_t>(i) * T + first) * H,
                  static_cast<int64_t>(count) * H,
                  merged.begin() + (static_cast<int64_t>(i) * (have + count) + have) * H);
    }
    dst = std::move(merged);
  };

  // Round 0: ragged prefill, the whole prefill as one delta, one block per sequence.
  ForwardBatch pre;
  pre.cuQSeqLens = {0};
  for (int32_t b = 0; b < B; ++b) {
    EXPECT_EQ(cache.admit(), b);
    const std::vector<int32_t>& p = fx.seqs[static_cast<size_t>(b)].prompt;
    for (size_t i = 0; i < p.size(); ++i) {
      pre.tokens.push_back(p[i]);
      pre.positions.push_back(static_cast<int32_t>(i));
      pre.tokenToSequence.push_back(b);
    }
    pre.cuQSeqLens.push_back(static_cast<int32_t>(pre.tokens.size()));
    pre.kvLengths.push_back(static_cast<int32_t>(p.size()));
  }
  const ForwardResult preOut = target.forward(pre, cache);
  const int32_t Tpre = static_cast<int32_t>(pre.tokens.size());
  std::vector<int32_t> lens;
  for (int32_t b = 0; b < B; ++b) {
    lens.push_back(static_cast<int32_t>(fx.seqs[static_cast<size_t>(b)].prompt.size()));
    keepTaps(preOut.taps, Tpre, b, pre.cuQSeqLens[static_cast<size_t>(b)], lens.back());
    cache.commitBase(b, lens.back());
  }
  EXPECT_EQ(lens, fx.rounds[0].blockStarts);
  draft.appendContext(target, pre.positions, pre.tokenToSequence, cache);
  out.proposals[0] = draft.propose(fx.rounds[0].anchors, lens, cache, /*wantLogits=*/true);
  for (int32_t b = 0; b < B; ++b) cache.commitDraft(b, lens[static_cast<size_t>(b)]);

  // Round 1: verify-shaped forward (BS rows per sequence, causal over the committed KV), the
  // accepted rows as the delta (the rest padding), the next block at the new length.
  ForwardBatch ver;
  std::vector<int32_t> dpos, down, starts;
  ver.cuQSeqLens = {0};
  for (int32_t b = 0; b < B; ++b) {
    const Sequence& s = fx.seqs[static_cast<size_t>(b)];
    EXPECT_EQ(static_cast<int32_t>(s.verify.size()), BS);
    EXPECT_EQ(s.verify[0], fx.rounds[0].anchors[static_cast<size_t>(b)]);
    const int32_t L = lens[static_cast<size_t>(b)];
    for (int32_t i = 0; i < BS; ++i) {
      ver.tokens.push_back(s.verify[static_cast<size_t>(i)]);
      ver.positions.push_back(L + i);
      ver.tokenToSequence.push_back(b);
      const bool kept = i <= s.accepted;
      dpos.push_back(kept ? L + i : -1);
      down.push_back(kept ? b : -1);
    }
    ver.cuQSeqLens.push_back((b + 1) * BS);
    ver.kvLengths.push_back(L + BS);
    starts.push_back(L + s.accepted + 1);
  }
  const ForwardResult verOut = target.forward(ver, cache);
  for (int32_t b = 0; b < B; ++b) {
    const int32_t kept = fx.seqs[static_cast<size_t>(b)].accepted + 1;
    keepTaps(verOut.taps, B * BS, b, b * BS, kept);
    cache.commitBase(b, kept);
  }
  EXPECT_EQ(starts, fx.rounds[1].blockStarts);
  draft.appendContext(target, dpos, down, cache);
  out.proposals[1] = draft.propose(fx.rounds[1].anchors, starts, cache, /*wantLogits=*/true);
  for (int32_t b = 0; b < B; ++b) {
    cache.commitDraft(b, fx.seqs[static_cast<size_t>(b)].accepted + 1);
    EXPECT_EQ(cache.draftLength(b), starts[static_cast<size_t>(b)]);
  }
  return out;
}

}  // namespace es::model::oracle
