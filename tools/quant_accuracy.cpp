// quant_accuracy: how closely quantized copies of a model follow the model they came from.
//
// For each prompt (a JSONL line: "prompt" gets the reference folder's chat template, as
// `edgespec generate` applies it; "tokens" is a list of token ids used as they are):
//   1. the reference decodes greedily for up to --tokens tokens (it stops after a stop token);
//   2. prompt + that continuation goes through every model (the reference included) in one
//      prefill forward, with logits for the rows that predict the continuation's tokens;
//   3. per row: top-1 agreement (the quantized argmax equals the reference's) and
//      KL(p_ref || p_quant) of the next-token distributions, from f64 log-softmax;
//   4. each quantized model decodes greedily on its own; the length of the prefix it shares with
//      the reference's continuation is recorded (decoding stops at the first difference).
// Prints a table, or with --json one object with the pooled statistics per quantized model.
// All models stay loaded at once, so a prompt's rows are compared without storing logits.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "common/errors.h"
#include "common/input_file.h"
#include "common/json.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace {

namespace fs = std::filesystem;
using es::model::ForwardBatch;
using es::model::TargetModel;

constexpr const char* kWhere = "quant_accuracy";
constexpr int32_t kMaxTokens = 4096;     // --tokens upper bound
constexpr int32_t kMaxPrompts = 100000;  // --num-prompts upper bound

struct Options {
  std::string reference;
  std::vector<std::string> quantized;
  std::string prompts;
  int32_t numPrompts = 50;
  int32_t tokens = 64;
  std::string backend = "cpu";
  bool json = false;
};

// One prompt: its token ids, ready for the models.
using Prompt = std::vector<int32_t>;

// Pooled statistics of one quantized model against the reference.
struct ModelStats {
  int64_t positions = 0;
  int64_t top1Matches = 0;
  std::vector<double> kl;             // one per continuation position, all prompts
  std::vector<int32_t> prefixLength;  // one per prompt: identical greedy prefix
  std::vector<int32_t> continuationLength;
};

void validate(const Options& o) {
  ES_CHECK_ARG(o.numPrompts >= 1 && o.numPrompts <= kMaxPrompts, kWhere, "--num-prompts",
               o.numPrompts, "must be in [1, ", kMaxPrompts, "]");
  ES_CHECK_ARG(o.tokens >= 1 && o.tokens <= kMaxTokens, kWhere, "--tokens", o.tokens,
               "must be in [1, ", kMaxTokens, "]");
  ES_CHECK_ARG(o.backend == "cpu" || o.backend == "cuda", kWhere, "--backend", o.backend,
               "must be cpu or cuda");
  ES_CHECK_ARG(!o.quantized.empty(), kWhere, "--quantized", "(none)",
               "needs at least one quantized model folder");
}

// The first `limit` entries of the JSONL file, each a prompt's token ids. The tokenizer (the
// reference folder's) is loaded only when an entry carries text.
std::vector<Prompt> readPrompts(const Options& o) {
  const std::string text =
      es::readInputFile(o.prompts, es::kMaxRequestFileBytes, kWhere, "--prompts");
  std::optional<es::tokenizer::BpeTokenizer> tok;
  std::vector<Prompt> prompts;
  std::istringstream lines(text);
  std::string line;
  int64_t lineNo = 0;
  while (static_cast<int32_t>(prompts.size()) < o.numPrompts && std::getline(lines, line)) {
    ++lineNo;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string source = o.prompts + ": line " + std::to_string(lineNo);
    const nlohmann::json entry = es::parseJsonStrict(line, source);
    Prompt ids;
    if (entry.is_object() && entry.contains("tokens") && entry["tokens"].is_array()) {
      for (const auto& id : entry["tokens"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          ES_THROW(es::FormatError, source, ": 'tokens' must hold token ids in [0, 2^31)");
        }
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    } else if (entry.is_object() && entry.contains("prompt") && entry["prompt"].is_string()) {
      if (!tok) tok.emplace(es::cli::loadTokenizer(o.reference, kWhere));
      std::vector<es::tokenizer::ChatMessage> messages;
      if (entry.contains("system") && entry["system"].is_string()) {
        messages.push_back({"system", entry["system"].get<std::string>()});
      }
      messages.push_back({"user", entry["prompt"].get<std::string>()});
      // As `edgespec generate` encodes a chat prompt: the rendered template carries its own
      // begin-of-text marker, so the text is encoded without a second bos.
      if (tok->spec().chatTemplate.empty()) {
        ids = tok->encodePrompt(messages.back().content, /*parseSpecial=*/false);
      } else {
        const std::string rendered =
            es::tokenizer::ChatTemplate::fromTemplateText(tok->spec().chatTemplate)
                .render(messages, true, true);
        ids = tok->encode(rendered, /*parseSpecial=*/true);
      }
    } else {
      ES_THROW(es::FormatError, source,
               ": expected an object with a string 'prompt' or an array 'tokens'");
    }
    if (ids.empty()) ES_THROW(es::FormatError, source, ": the prompt encodes to no tokens");
    prompts.push_back(std::move(ids));
  }
  ES_CHECK_ARG(!prompts.empty(), kWhere, "--prompts", o.prompts, "holds no prompt");
  return prompts;
}

// The tokens that end the reference's continuation: the reference's eos and, when it has a
// tokenizer, its chat format's end-of-turn marker.
std::vector<int32_t> stopTokens(const fs::path& reference, const es::model::ModelConfig& c) {
  if (fs::exists(reference / "tokenizer.json")) {
    const es::tokenizer::BpeTokenizer tok(es::cli::loadTokenizer(reference, kWhere));
    return es::cli::stopTokens(tok, c);
  }
  std::vector<int32_t> stops;
  for (int64_t id : c.eos_token_ids) stops.push_back(static_cast<int32_t>(id));
  return stops;
}

// One model on the backend, with a fresh single-slot KV cache per sequence.
class Runner {
 public:
  Runner(const fs::path& dir, es::ops::Backend& backend, int32_t maxTokens, int32_t maxLogitRows)
      : backend_(backend), model_(dir, backend, maxTokens, {}, maxLogitRows) {}

  const TargetModel& model() const { return model_; }
  int32_t vocab() const { return static_cast<int32_t>(model_.config().vocab_size); }

  // Logits [rows, V] of prompt + continuation[0, n - 1) in one forward, for the n rows that
  // predict continuation[0, n).
  std::vector<float> teacherForced(const Prompt& prompt, const std::vector<int32_t>& cont) {
    startSequence(static_cast<int32_t>(prompt.size() + cont.size()));
    std::vector<int32_t> tokens = prompt;
    tokens.insert(tokens.end(), cont.begin(), cont.end() - 1);
    const auto first = static_cast<int32_t>(prompt.size()) - 1;
    std::vector<int32_t> rows;
    for (int32_t i = 0; i < static_cast<int32_t>(cont.size()); ++i) rows.push_back(first + i);
    return forward(tokens, rows);
  }

  // Greedy decoding from `prompt`: at most maxNew tokens; stops after a token in `stops` and,
  // when `follow` is given, at the first token that differs from it (that token included).
  std::vector<int32_t> greedy(const Prompt& prompt, int32_t maxNew,
                              const std::vector<int32_t>& stops,
                              const std::vector<int32_t>* follow = nullptr) {
    startSequence(static_cast<int32_t>(prompt.size()) + maxNew);
    const int32_t V = vocab();
    std::vector<int32_t> out;
    std::vector<float> logits = forward(prompt, {static_cast<int32_t>(prompt.size()) - 1});
    while (true) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) -
                                             logits.begin());
      out.push_back(next);
      const auto i = out.size() - 1;
      if (static_cast<int32_t>(out.size()) == maxNew) break;
      if (std::find(stops.begin(), stops.end(), next) != stops.end()) break;
      if (follow != nullptr && (i >= follow->size() || (*follow)[i] != next)) break;
      logits = forward({next}, {0});
    }
    return out;
  }

 private:
  void startSequence(int32_t length) {
    cache_.reset();
    es::kv::KvCacheConfig kc;
    kc.maxBatchSize = 1;
    kc.maxSequenceLength = length;
    kc.dtype = backend_.computeDtype();
    kc.baseLayers = model_.kvLayerShapes();
    cache_ = std::make_unique<es::kv::KvCacheManager>(kc, backend_.space());
    slot_ = cache_->admit();
    length_ = 0;
  }

  // Appends `tokens` to the sequence; returns the logits [rows.size(), V] of `rows` (indices
  // into `tokens`).
  std::vector<float> forward(const std::vector<int32_t>& tokens, std::vector<int32_t> rows) {
    const auto n = static_cast<int32_t>(tokens.size());
    ForwardBatch b;
    b.tokens = tokens;
    for (int32_t i = 0; i < n; ++i) {
      b.positions.push_back(length_ + i);
      b.tokenToSequence.push_back(slot_);
    }
    b.cuQSeqLens = {0, n};
    b.kvLengths = {length_ + n};
    b.logitRows = std::move(rows);
    es::model::ForwardResult r = model_.forward(b, *cache_);
    cache_->commitBase(slot_, n);
    length_ += n;
    return std::move(r.logits);
  }

  es::ops::Backend& backend_;
  TargetModel model_;
  std::unique_ptr<es::kv::KvCacheManager> cache_;
  int32_t slot_ = 0;
  int32_t length_ = 0;
};

// log-softmax of one row of logits, in f64.
void logSoftmax(const float* logits, int32_t V, std::vector<double>& out) {
  out.resize(static_cast<size_t>(V));
  double mx = -INFINITY;
  for (int32_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
  double sum = 0;
  for (int32_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  const double lse = mx + std::log(sum);
  for (int32_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = logits[v] - lse;
}

// KL(p || q) from log-probabilities.
double klDivergence(const std::vector<double>& lp, const std::vector<double>& lq) {
  double kl = 0;
  for (size_t v = 0; v < lp.size(); ++v) {
    if (std::isinf(lp[v]) && lp[v] < 0) continue;  // p = 0 contributes nothing
    kl += std::exp(lp[v]) * (lp[v] - lq[v]);
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative value for equal rows
}

int32_t argmax(const float* row, int32_t V) {
  return static_cast<int32_t>(std::max_element(row, row + V) - row);
}

// The value at the nearest rank `q` (0..1) of `values`.
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

nlohmann::json summary(const std::string& path, const TargetModel& model, const ModelStats& s) {
  double klSum = 0;
  for (double k : s.kl) klSum += k;
  double prefixSum = 0;
  int64_t full = 0;
  for (size_t p = 0; p < s.prefixLength.size(); ++p) {
    prefixSum += s.prefixLength[p];
    full += s.prefixLength[p] == s.continuationLength[p] ? 1 : 0;
  }
  const auto prompts = static_cast<double>(s.prefixLength.size());
  const auto positions = static_cast<double>(s.positions);
  return {{"model", path},
          {"weight_bytes", model.weightBytes()},
          {"positions", s.positions},
          {"top1_agreement", static_cast<double>(s.top1Matches) / positions},
          {"kl_mean", klSum / positions},
          {"kl_p99", quantile(s.kl, 0.99)},
          {"kl_max", s.kl.empty() ? 0.0 : *std::max_element(s.kl.begin(), s.kl.end())},
          {"greedy_prefix_mean", prefixSum / prompts},
          {"greedy_full_match_fraction", static_cast<double>(full) / prompts}};
}

int run(const Options& o) {
  validate(o);
  const std::vector<Prompt> prompts = readPrompts(o);
  size_t longest = 0;
  for (const Prompt& p : prompts) longest = std::max(longest, p.size());
  const auto maxTokens = static_cast<int32_t>(longest) + o.tokens;

  std::unique_ptr<es::ops::Backend> backend = es::ops::makeBackend(o.backend);
  Runner reference(o.reference, *backend, maxTokens, o.tokens);
  const int32_t V = reference.vocab();
  std::vector<std::unique_ptr<Runner>> quantized;
  for (const std::string& dir : o.quantized) {
    quantized.push_back(std::make_unique<Runner>(dir, *backend, maxTokens, o.tokens));
    ES_CHECK_ARG(quantized.back()->vocab() == V, kWhere, "--quantized", dir, "has vocab_size ",
                 quantized.back()->vocab(), ", the reference ", V);
  }
  for (const Prompt& p : prompts) {
    for (int32_t id : p) {
      ES_CHECK_ARG(id < V, kWhere, "--prompts", o.prompts, "holds token id ", id,
                   ", not below the reference's vocab_size ", V);
    }
  }
  const std::vector<int32_t> stops = stopTokens(o.reference, reference.model().config());

  std::vector<ModelStats> stats(quantized.size());
  std::vector<double> lp, lq;
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    const Prompt& prompt = prompts[pi];
    const std::vector<int32_t> cont = reference.greedy(prompt, o.tokens, stops);
    const std::vector<float> refLogits = reference.teacherForced(prompt, cont);
    const auto n = static_cast<int32_t>(cont.size());
    for (size_t m = 0; m < quantized.size(); ++m) {
      ModelStats& s = stats[m];
      const std::vector<float> qLogits = quantized[m]->teacherForced(prompt, cont);
      for (int32_t r = 0; r < n; ++r) {
        const float* ref = refLogits.data() + static_cast<int64_t>(r) * V;
        const float* q = qLogits.data() + static_cast<int64_t>(r) * V;
        logSoftmax(ref, V, lp);
        logSoftmax(q, V, lq);
        s.kl.push_back(klDivergence(lp, lq));
        s.top1Matches += argmax(ref, V) == argmax(q, V) ? 1 : 0;
        ++s.positions;
      }
      const std::vector<int32_t> own = quantized[m]->greedy(prompt, n, stops, &cont);
      int32_t same = 0;
      while (same < n && same < static_cast<int32_t>(own.size()) && own[same] == cont[same]) {
        ++same;
      }
      s.prefixLength.push_back(same);
      s.continuationLength.push_back(n);
    }
    std::fprintf(stderr, "\rprompt %zu/%zu", pi + 1, prompts.size());
  }
  std::fprintf(stderr, "\n");

  nlohmann::json out{{"reference", o.reference},
                     {"backend", backend->name()},
                     {"prompts", prompts.size()},
                     {"max_tokens", o.tokens},
                     {"models", nlohmann::json::array()}};
  for (size_t m = 0; m < quantized.size(); ++m) {
    out["models"].push_back(summary(o.quantized[m], quantized[m]->model(), stats[m]));
  }
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("reference %s, backend %s, %zu prompts, up to %d tokens each\n", o.reference.c_str(),
              backend->name().c_str(), prompts.size(), o.tokens);
  std::printf("%-40s %10s %9s %10s %10s %12s\n", "model", "positions", "top-1", "KL mean", "KL p99",
              "greedy pref");
  for (const nlohmann::json& m : out["models"]) {
    std::printf("%-40s %10lld %9.4f %10.5f %10.5f %12.2f\n", m["model"].get<std::string>().c_str(),
                static_cast<long long>(m["positions"].get<int64_t>()),
                m["top1_agreement"].get<double>(), m["kl_mean"].get<double>(),
                m["kl_p99"].get<double>(), m["greedy_prefix_mean"].get<double>());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"quant_accuracy: quantized models against their reference (top-1, KL, greedy)"};
  app.add_option("--reference", o.reference, "Reference model folder")->required();
  app.add_option("--quantized", o.quantized, "Quantized model folder (repeatable)")->required();
  app.add_option("--prompts", o.prompts,
                 "JSONL: {\"prompt\": text[, \"system\": text]} or {\"tokens\": [ids]} per line")
      ->required();
  app.add_option("--num-prompts", o.numPrompts, "Prompts used (the file's first N)");
  app.add_option("--tokens", o.tokens, "Reference continuation length (greedy, at most)");
  app.add_option("--backend", o.backend, "cpu or cuda");
  app.add_flag("--json", o.json, "Print one JSON object instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_accuracy: error: %s\n", e.what());
    return 1;
  }
}
