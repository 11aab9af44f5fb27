// The DFlash draft on the CPU backend: a tiny random draft for the Qwen3 fixture target (hidden
// 128, 2 layers, vocab 384), written to a temp folder in the z-lab format, against an
// independent double-precision reference of spec §5 written here with plain loops; the pair
// checks; and the context delta's independence from how it is split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/random_draft.h"
#include "model/safetensors.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "safetensors_test_writer.h"
#include "support/test_util.h"

namespace es::model {
namespace {

using Vec = std::vector<double>;

std::string targetDir() { return test::test_data_dir() + "/models/qwen3"; }

using test_draft::DraftSpec;
using test_draft::Weights;
using test_draft::writeDraft;

Vec tensorAsDoubles(const SafetensorsFile& f, const std::string& name) {
  const TensorView v = f.view(name);
  Vec out(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) {
    switch (v.dtype) {
      case DType::kF32:
        out[i] = static_cast<const float*>(v.data)[i];
        break;
      case DType::kBF16:
        out[i] = to_float(static_cast<const bf16*>(v.data)[i]);
        break;
      case DType::kF16:
        out[i] = to_float(static_cast<const fp16*>(v.data)[i]);
        break;
      default:
        ADD_FAILURE() << "unexpected dtype of " << name;
    }
  }
  return out;
}

// ---- The reference: spec §5 in doubles, plain loops. ----

// y[M, N] = x[M, K] · W[N, K]^T
Vec matmul(const Vec& x, const Vec& w, int64_t m, int64_t n, int64_t k) {
  Vec y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += x[r * k + i] * w[j * k + i];
      y[r * n + j] = acc;
    }
  return y;
}

// Row-wise RMSNorm over groups of `width` (whole rows, or per head).
Vec rmsnorm(const Vec& x, const Vec& w, int64_t width, double eps = 1e-6) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / width; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += x[r * width + i] * x[r * width + i];
    const double inv = 1 / std::sqrt(ss / width + eps);
    for (int64_t i = 0; i < width; ++i) y[r * width + i] = x[r * width + i] * inv * w[i];
  }
  return y;
}

// NeoX RoPE of every head of one row [heads, D] at `pos`; angles in float as transformers.
void rope(double* row, int64_t heads, int64_t D, int64_t pos, double theta) {
  const int64_t h = D / 2;
  for (int64_t i = 0; i < h; ++i) {
    const float invf = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / D));
    const double a = static_cast<float>(pos) * invf;
    const double c = std::cos(a), s = std::sin(a);
    for (int64_t hd = 0; hd < heads; ++hd) {
      double* x = row + hd * D;
      const double x0 = x[i], x1 = x[i + h];
      x[i] = x0 * c - x1 * s;
      x[i + h] = x1 * c + x0 * s;
    }
  }
}

struct Reference {
  DraftSpec s;
  Weights w;
  Vec embed, lmHead;  // target [V, H]
  int64_t V = 384;

  const Vec& W(const std::string& n) const { return w.at(n); }

  // Context K/V per layer for rows x[T, taps·H] at positions 0..T−1: k[l] [T, Hkv·D], v[l].
  void context(const Vec& concat, int64_t T, std::vector<Vec>& k, std::vector<Vec>& v) const {
    const int64_t H = s.hidden, D = s.headDim, kv = s.kvHeads * D;
    const Vec ctx =
        rmsnorm(matmul(concat, W("fc.weight"), T, H, s.fcTaps * H), W("hidden_norm.weight"), H);
    k.assign(s.layers, {});
    v.assign(s.layers, {});
    for (int64_t l = 0; l < s.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".self_attn.";
      k[l] = rmsnorm(matmul(ctx, W(p + "k_proj.weight"), T, kv, H), W(p + "k_norm.weight"), D);
      for (int64_t t = 0; t < T; ++t) rope(&k[l][t * kv], s.kvHeads, D, t, s.ropeTheta);
      v[l] = matmul(ctx, W(p + "v_proj.weight"), T, kv, H);
    }
  }

  // Logits [BS, V] of one block at positions T…T+BS−1 over context K/V of T tokens.
  Vec block(int32_t anchor, const std::vector<Vec>& ck, const std::vector<Vec>& cv,
            int64_t T) const {
    const int64_t H = s.hidden, D = s.headDim, BS = s.blockSize, Hq = s.heads, Hkv = s.kvHeads,
                  I = s.inter;
    Vec h(static_cast<size_t>(BS * H));
    for (int64_t i = 0; i < BS; ++i)
      for (int64_t j = 0; j < H; ++j)
        h[i * H + j] =
            i == 0 ? embed[anchor * H + j]
                   : (s.maskEmbedding ? W("mask_embedding")[j] : embed[s.maskTokenId * H + j]);
    for (int64_t l = 0; l < s.layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const Vec x = rmsnorm(h, W(p + "input_layernorm.weight"), H);
      Vec q = rmsnorm(matmul(x, W(p + "self_attn.q_proj.weight"), BS, Hq * D, H),
                      W(p + "self_attn.q_norm.weight"), D);
      Vec k = rmsnorm(matmul(x, W(p + "self_attn.k_proj.weight"), BS, Hkv * D, H),
                      W(p + "self_attn.k_norm.weight"), D);
      const Vec v = matmul(x, W(p + "self_attn.v_proj.weight"), BS, Hkv * D, H);
      for (int64_t i = 0; i < BS; ++i) {
        rope(&q[i * Hq * D], Hq, D, T + i, s.ropeTheta);
        rope(&k[i * Hkv * D], Hkv, D, T + i, s.ropeTheta);
      }
      // Keys: the T context rows then the BS block rows; every query sees all of them.
      Vec attn(static_cast<size_t>(BS * Hq * D), 0.0);
      for (int64_t i = 0; i < BS; ++i)
        for (int64_t hq = 0; hq < Hq; ++hq) {
          const int64_t g = hq / (Hq / Hkv);
          const double* qi = &q[(i * Hq + hq) * D];
          std::vector<double> sc(static_cast<size_t>(T + BS));
          double mx = -1e300;
          for (int64_t j = 0; j < T + BS; ++j) {
            const double* kj = j < T ? &ck[l][(j * Hkv + g) * D] : &k[((j - T) * Hkv + g) * D];
            double d = 0;
            for (int64_t e = 0; e < D; ++e) d += qi[e] * kj[e];
            sc[j] = d / std::sqrt(double(D));
            mx = std::max(mx, sc[j]);
          }
          double sum = 0;
          for (double& e : sc) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j < T + BS; ++j) {
            const double* vj = j < T ? &cv[l][(j * Hkv + g) * D] : &v[((j - T) * Hkv + g) * D];
            for (int64_t e = 0; e < D; ++e) attn[(i * Hq + hq) * D + e] += sc[j] / sum * vj[e];
          }
        }
      const Vec o = matmul(attn, W(p + "self_attn.o_proj.weight"), BS, H, Hq * D);
      for (size_t e = 0; e < h.size(); ++e) h[e] += o[e];
      const Vec y = rmsnorm(h, W(p + "post_attention_layernorm.weight"), H);
      const Vec gt = matmul(y, W(p + "mlp.gate_proj.weight"), BS, I, H);
      const Vec up = matmul(y, W(p + "mlp.up_proj.weight"), BS, I, H);
      Vec act(gt.size());
      for (size_t e = 0; e < act.size(); ++e) act[e] = gt[e] / (1 + std::exp(-gt[e])) * up[e];
      const Vec dn = matmul(act, W(p + "mlp.down_proj.weight"), BS, H, I);
      for (size_t e = 0; e < h.size(); ++e) h[e] += dn[e];
    }
    return matmul(rmsnorm(h, W("norm.weight"), H), lmHead, BS, V, H);
  }
};

Reference makeReference(const DraftSpec& s, Weights w) {
  const SafetensorsFile f = SafetensorsFile::open(targetDir() + "/model.safetensors");
  Reference r{s, std::move(w), tensorAsDoubles(f, "model.embed_tokens.weight"),
              tensorAsDoubles(f, "lm_head.weight")};
  return r;
}

// Rows [first, first + count) of taps [numTaps, T, H] as the concatenated fc input [count,
// numTaps·H].
Vec concatRows(const std::vector<float>& taps, int64_t numTaps, int64_t T, int64_t H, int64_t first,
               int64_t count) {
  Vec out(static_cast<size_t>(count * numTaps * H));
  for (int64_t r = 0; r < count; ++r)
    for (int64_t i = 0; i < numTaps; ++i)
      for (int64_t j = 0; j < H; ++j)
        out[(r * numTaps + i) * H + j] = taps[(i * T + first + r) * H + j];
  return out;
}

kv::KvCacheConfig cacheFor(const TargetModel& t, const DFlashDraft& d, int32_t batch, int32_t seq) {
  kv::KvCacheConfig c;
  c.maxBatchSize = batch;
  c.maxSequenceLength = seq;
  c.dtype = DType::kF32;
  c.baseLayers = t.kvLayerShapes();
  c.draftLayers = d.kvLayerShapes();
  return c;
}

struct Prefill {
  ForwardBatch batch;
  ForwardResult result;
};

// Ragged prefill of `prompts` (slot i = prompt i), committed to the base cache.
Prefill prefill(TargetModel& target, kv::KvCacheManager& cache,
                const std::vector<std::vector<int32_t>>& prompts) {
  Prefill p;
  p.batch.cuQSeqLens = {0};
  for (size_t s = 0; s < prompts.size(); ++s) {
    const int32_t slot = cache.admit();
    for (size_t i = 0; i < prompts[s].size(); ++i) {
      p.batch.tokens.push_back(prompts[s][i]);
      p.batch.positions.push_back(static_cast<int32_t>(i));
      p.batch.tokenToSequence.push_back(slot);
    }
    p.batch.cuQSeqLens.push_back(static_cast<int32_t>(p.batch.tokens.size()));
    p.batch.kvLengths.push_back(static_cast<int32_t>(prompts[s].size()));
  }
  p.result = target.forward(p.batch, cache);
  for (size_t s = 0; s < prompts.size(); ++s)
    cache.commitBase(static_cast<int32_t>(s), static_cast<int32_t>(prompts[s].size()));
  return p;
}

nlohmann::json fixtureMeta() {
  std::ifstream f(targetDir() + "/reference.json");
  return nlohmann::json::parse(f);
}

double maxError(const float* got, const double* want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i])));
  return worst;
}

class DFlashDraftCpu : public ::testing::TestWithParam<DraftSpec> {};

// Two sequences (a short prompt and one of three pages, slot 1 on pages of its own), context of
// the whole prefill in one delta, then a block per sequence: logits and argmax of every row
// against the reference.
TEST_P(DFlashDraftCpu, ProposalMatchesDoubleReference) {
  const DraftSpec spec = GetParam();
  test::TempDir tmp;
  Weights w = writeDraft(tmp / "draft", spec);
  const Reference ref = makeReference(spec, std::move(w));
  auto backend = ops::makeCpuBackend();
  const std::vector<int32_t> taps =
      DFlashDraft::requiredTargetTaps(tmp / "draft", loadModelConfig(targetDir()));
  ASSERT_EQ(taps, (std::vector<int32_t>{0, 1}));
  TargetModel target(targetDir(), *backend, 400, taps);
  DFlashDraft draft(tmp / "draft", *backend, target, 400, 2);
  EXPECT_EQ(draft.blockSize(), spec.blockSize);
  EXPECT_EQ(draft.hasMaskEmbedding(), spec.maskEmbedding);
  kv::KvCacheManager cache(cacheFor(target, draft, 2, 512), MemorySpace::kHost);

  const nlohmann::json meta = fixtureMeta();
  const std::vector<int32_t> a = meta["prompts"]["a"], lng = meta["prompts"]["long"];
  ASSERT_GT(lng.size(), 2u * kv::kTokensPerPage);
  const Prefill p = prefill(target, cache, {a, lng});
  const int64_t T = static_cast<int64_t>(p.batch.tokens.size()), H = spec.hidden;
  // Delta = the prefill's own rows (row r of the delta reads row r of the taps).
  draft.appendContext(target, p.batch.positions, p.batch.tokenToSequence, cache);
  const std::vector<int32_t> anchors{17, 251};
  const std::vector<int32_t> starts{static_cast<int32_t>(a.size()),
                                    static_cast<int32_t>(lng.size())};
  const DraftProposal out = draft.propose(anchors, starts, cache, /*wantLogits=*/true);
  ASSERT_EQ(out.tokens.size(), static_cast<size_t>(2 * spec.blockSize));

  int64_t first = 0, nearTies = 0;
  for (int b = 0; b < 2; ++b) {
    const int64_t L = starts[b];
    std::vector<Vec> ck, cv;
    ref.context(concatRows(p.result.taps, 2, T, H, first, L), L, ck, cv);
    first += L;
    const Vec want = ref.block(anchors[b], ck, cv, L);
    for (int64_t i = 0; i < spec.blockSize; ++i) {
      const float* got = out.logits.data() + (b * spec.blockSize + i) * ref.V;
      const double* w = want.data() + i * ref.V;
      EXPECT_LT(maxError(got, w, ref.V), 1e-4) << "sequence " << b << " row " << i;
      // argmax of the reference, unless its top-2 margin is a near-tie.
      std::vector<double> sorted(w, w + ref.V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const int32_t top = static_cast<int32_t>(std::max_element(w, w + ref.V) - w);
      if (sorted[0] - sorted[1] < 1e-3) {
        ++nearTies;
        continue;
      }
      EXPECT_EQ(out.tokens[b * spec.blockSize + i], top) << "sequence " << b << " row " << i;
    }
  }
  EXPECT_LE(nearTies, 1);
  // The block rows must differ (the attention and positions make them so), or the test is weak.
  EXPECT_NE(std::vector<float>(out.logits.begin(), out.logits.begin() + ref.V),
            std::vector<float>(out.logits.begin() + ref.V, out.logits.begin() + 2 * ref.V));

  // Scoring only the first W rows of each block (rowsPerBlock, the verify width): the same
  // blocks run, so rows b·W + i are exactly the full proposal's rows b·BS + i (fp32 CPU: a row's
  // lm_head does not depend on the rows beside it), packed [B, W] (not strided by BS).
  const int64_t BS = spec.blockSize;
  for (const int32_t W : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "rowsPerBlock " << W);
    const DraftProposal part = draft.propose(anchors, starts, cache, /*wantLogits=*/true, W);
    ASSERT_EQ(part.tokens.size(), static_cast<size_t>(2 * W));
    ASSERT_EQ(part.logits.size(), static_cast<size_t>(2 * W * ref.V));
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < W; ++i) {
        EXPECT_EQ(part.tokens[static_cast<size_t>(b * W + i)],
                  out.tokens[static_cast<size_t>(b * BS + i)])
            << "sequence " << b << " row " << i;
        const auto got = part.logits.begin() + (b * W + i) * ref.V;
        const auto want = out.logits.begin() + (b * BS + i) * ref.V;
        EXPECT_TRUE(std::equal(got, got + ref.V, want)) << "sequence " << b << " row " << i;
      }
    }
  }
}

DraftSpec withMaskEmbedding() {
  DraftSpec s;
  s.maskEmbedding = true;
  s.maskTokenId = 5000;  // outside the target's vocabulary: only the shipped embedding is used
  s.blockSize = 8;
  s.layers = 1;
  s.seed = 11;
  return s;
}

INSTANTIATE_TEST_SUITE_P(Drafts, DFlashDraftCpu,
                         ::testing::Values(DraftSpec{}, withMaskEmbedding()), [](const auto& info) {
                           return info.param.maskEmbedding ? "MaskEmbedding" : "TargetMaskRow";
                         });

// The context of one sequence appended in one delta, in two deltas of the same target rows
// (padding the others, crossing a page boundary), with a proposal between them (block scratch
// K/V written past the committed length, then overwritten), and from host taps of a different
// width: the final proposal is the same, bit for bit (CPU: per-row math independent of the call).
TEST(DFlashDraft, ContextInTwoDeltasEqualsOne) {
  const DraftSpec spec;
  test::TempDir tmp;
  writeDraft(tmp / "draft", spec);
  auto backend = ops::makeCpuBackend();
  TargetModel target(targetDir(), *backend, 400, {0, 1});
  DFlashDraft draft(tmp / "draft", *backend, target, 400, 1);
  const std::vector<int32_t> prompt = fixtureMeta()["prompts"]["long"];
  const int32_t L = static_cast<int32_t>(prompt.size()), k = 100,
                H = static_cast<int32_t>(spec.hidden);
  ASSERT_GT(L, 2 * kv::kTokensPerPage);

  auto run = [&](int variant) {
    kv::KvCacheManager cache(cacheFor(target, draft, 1, 512), MemorySpace::kHost);
    const Prefill p = prefill(target, cache, {prompt});
    std::vector<int32_t> pos = p.batch.positions, own = p.batch.tokenToSequence;
    if (variant == 0) {
      draft.appendContext(target.tapsDevice(), pos, own, cache);
      cache.commitDraft(0, L);
    } else {
      std::vector<int32_t> pos1 = pos, pos2 = pos;
      for (int32_t r = 0; r < L; ++r) (r < k ? pos2 : pos1)[r] = -1;
      draft.appendContext(target.tapsDevice(), pos1, own, cache);
      draft.propose({42}, {k}, cache);  // scratch K/V at k … k+BS−1
      cache.commitDraft(0, k);
      if (variant == 1) {
        draft.appendContext(target.tapsDevice(), pos2, own, cache);
      } else {  // host taps of rows k … L−1 only: a delta of another width
        const int32_t n = L - k;
        std::vector<float> slice(static_cast<size_t>(2) * n * H);
        for (int32_t i = 0; i < 2; ++i)
          for (int32_t r = 0; r < n; ++r)
            std::copy_n(p.result.taps.begin() + (static_cast<int64_t>(i) * L + k + r) * H, H,
                        slice.begin() + (static_cast<int64_t>(i) * n + r) * H);
        std::vector<int32_t> posS(pos.begin() + k, pos.end()), ownS(own.begin() + k, own.end());
        draft.appendContextFromHost(slice, posS, ownS, cache);
      }
      cache.commitDraft(0, L - k);
    }
    EXPECT_EQ(cache.draftLength(0), L);
    return draft.propose({42}, {L}, cache, true);
  };
  const DraftProposal one = run(0), two = run(1), host = run(2);
  EXPECT_EQ(one.tokens, two.tokens);
  EXPECT_EQ(one.logits, two.logits);
  EXPECT_EQ(one.tokens, host.tokens);
  EXPECT_EQ(one.logits, host.logits);
}

// Mismatched pairs are refused with messages naming the field and both folders.
TEST(DFlashDraft, MismatchedPairsAreRefused) {
  auto backend = ops::makeCpuBackend();
  TargetModel target(targetDir(), *backend, 64, {0, 1});
  auto expectError = [&](const DraftSpec& s, bool formatError,
                         const std::vector<std::string>& needles, const TargetModel& t) {
    test::TempDir tmp;
    writeDraft(tmp / "draft", s);
    try {
      DFlashDraft d(tmp / "draft", *backend, t, 64, 1);
      ADD_FAILURE() << "expected the pair to be refused";
    } catch (const InvalidArgument& e) {
      EXPECT_FALSE(formatError) << e.what();
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " in " << e.what();
    } catch (const FormatError& e) {
      EXPECT_TRUE(formatError) << e.what();
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " in " << e.what();
    }
  };
  const std::string targetCfg = "models/qwen3/config.json";
  {
    DraftSpec s;
    s.hidden = 64;  // consistent with itself, not with the target
    expectError(s, false,
                {"'hidden_size' = 64", "'hidden_size' = 128", targetCfg, "draft/config.json"},
                target);
  }
  {
    DraftSpec s;
    s.tapIds = "[0, 2]";
    s.numTargetLayers = false;
    expectError(s, false, {"target_layer_ids", "layer 2", "[0, 2)", targetCfg}, target);
  }
  {
    DraftSpec s;
    s.maskTokenId = 384;
    expectError(
        s, false,
        {"'dflash_config.mask_token_id' = 384", "'vocab_size' = 384", "mask_embedding", targetCfg},
        target);
  }
  {
    DraftSpec s;
    s.fcTaps = 3;
    expectError(s, true, {"'fc.weight'", "[128, 384]", "[128, 256]", "[0,1]", targetCfg}, target);
  }
  {
    TargetModel noTaps(targetDir(), *backend, 64, {1, 0});
    expectError(DraftSpec{}, false, {"'tapLayers' = [1,0]", "[0,1]", "requiredTargetTaps"}, noTaps);
  }
  {
    DraftSpec s;  // a draft written for a 3-layer target
    s.numTargetLayers = false;
    test::TempDir tmp;
    writeDraft(tmp / "draft", s);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(tmp / "draft" / "config.json"));
    cfg["num_target_layers"] = 3;
    test::writeText(tmp / "draft" / "config.json", cfg.dump());
    try {
      DFlashDraft d(tmp / "draft", *backend, target, 64, 1);
      ADD_FAILURE() << "expected a refusal";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'num_target_layers' = 3"), std::string::npos)
          << e.what();
    }
  }
  // A target folder is not a draft.
  test::expectInvalidArgument([&] { DFlashDraft d(targetDir(), *backend, target, 64, 1); },
                              "architecture");
  // The mask token may lie outside the vocabulary when the draft ships mask_embedding.
  {
    DraftSpec s;
    s.maskTokenId = 100000;
    s.maskEmbedding = true;
    test::TempDir tmp;
    writeDraft(tmp / "draft", s);
    DFlashDraft d(tmp / "draft", *backend, target, 64, 1);
    EXPECT_TRUE(d.hasMaskEmbedding());
  }
}

// Host API misuse is a clear error, and a cache without draft layers is refused.
TEST(DFlashDraft, BadCallsAreClearErrors) {
  test::TempDir tmp;
  writeDraft(tmp / "draft", DraftSpec{});
  auto backend = ops::makeCpuBackend();
  TargetModel target(targetDir(), *backend, 64, {0, 1});
  DFlashDraft draft(tmp / "draft", *backend, target, 64, 2);
  kv::KvCacheManager cache(cacheFor(target, draft, 2, 256), MemorySpace::kHost);
  cache.admit();
  test::expectInvalidArgument([&] { draft.propose({400}, {0}, cache); }, "anchor");
  test::expectInvalidArgument([&] { draft.propose({1}, {254}, cache); }, "blockStart");
  test::expectInvalidArgument(
      [&] {
        draft.propose({1, 2, 3}, {0, 0, 0}, cache);
      },
      "anchors.size()");
  test::expectInvalidArgument([&] { draft.propose({1}, {0}, cache, false, draft.blockSize() + 1); },
                              "rowsPerBlock");
  test::expectInvalidArgument([&] { draft.propose({1}, {0}, cache, false, -1); }, "rowsPerBlock");
  std::vector<int32_t> many(65, 0);
  test::expectInvalidArgument([&] { draft.appendContext(target.tapsDevice(), many, many, cache); },
                              "positions.size()");
  kv::KvCacheConfig noDraft = cacheFor(target, draft, 1, 128);
  noDraft.draftLayers.clear();
  kv::KvCacheManager baseOnly(noDraft, MemorySpace::kHost);
  baseOnly.admit();
  test::expectInvalidArgument([&] { draft.propose({1}, {0}, baseOnly); }, "cache draft layers");
}

}  // namespace
}  // namespace es::model
