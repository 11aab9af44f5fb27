#include "model/gguf_tokenizer.h"

#include "common/errors.h"
#include "model/model_config.h"

namespace es::model {

bool preTokenizerFromGgufName(std::string_view pre, tokenizer::PreTokenizer* out) {
  // "smollm" is llama.cpp's StarCoder-style family: every digit split off, then the GPT-2 regex.
  if (pre == "gpt2") {
    *out = tokenizer::PreTokenizer::kGpt2;
  } else if (pre == "smollm") {
    *out = tokenizer::PreTokenizer::kSmolLm;
  } else if (pre == "llama-bpe" || pre == "llama3") {
    *out = tokenizer::PreTokenizer::kLlama3;
  } else if (pre == "qwen2") {
    *out = tokenizer::PreTokenizer::kQwen2;
  } else {
    return false;
  }
  return true;
}

tokenizer::TokenizerSpec tokenizerSpecFromGguf(const GgufHeader& h) {
  const std::string model = h.getString("tokenizer.ggml.model");
  if (model != "gpt2") {
    ES_THROW(FormatError, h.source, ": 'tokenizer.ggml.model' = '", model,
             "' is unsupported (supported: gpt2, byte-level BPE",
             model == "llama" ? "; 'llama' is a SentencePiece vocabulary" : "", ")");
  }
  tokenizer::TokenizerSpec spec;
  const auto pre = h.optString("tokenizer.ggml.pre");
  if (!pre || !preTokenizerFromGgufName(*pre, &spec.preTokenizer)) {
    ES_THROW(FormatError, h.source,
             ": 'tokenizer.ggml.pre' = ", pre ? "'" + *pre + "'" : std::string("(missing)"),
             " is an unsupported pre-tokenizer (supported: gpt2, smollm, llama-bpe, qwen2)");
  }
  spec.nfc = spec.preTokenizer ==
             tokenizer::PreTokenizer::kQwen2;  // Qwen2's tokenizer.json normalises NFC
  // Llama-3's tokenizer.json sets model.ignore_merges (llama.cpp: ignore_merges for llama-bpe).
  spec.ignoreMerges = spec.preTokenizer == tokenizer::PreTokenizer::kLlama3;

  spec.vocab = h.getStringArray("tokenizer.ggml.tokens");
  const auto n = static_cast<int64_t>(spec.vocab.size());
  if (n == 0 || n > kMaxVocab) {
    ES_THROW(FormatError, h.source, ": 'tokenizer.ggml.tokens' has ", n, " tokens (must be in [1, ",
             kMaxVocab, "])");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (spec.vocab[static_cast<size_t>(i)].empty()) {
      ES_THROW(FormatError, h.source, ": 'tokenizer.ggml.tokens' entry ", i, " is empty");
    }
  }

  if (h.has("tokenizer.ggml.merges")) {
    const auto& merges = h.getStringArray("tokenizer.ggml.merges");
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      // As llama.cpp: split at the first space after the first byte.
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size()) {
        ES_THROW(FormatError, h.source, ": 'tokenizer.ggml.merges' entry ", i, " = '",
                 m.substr(0, 80), "' is not \"left right\"");
      }
      spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }

  if (h.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = h.getIntArray("tokenizer.ggml.token_type");
    if (static_cast<int64_t>(types.size()) != n) {
      ES_THROW(FormatError, h.source, ": 'tokenizer.ggml.token_type' has ", types.size(),
               " entries but 'tokenizer.ggml.tokens' has ", n);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = types[static_cast<size_t>(i)];
      if (t < 1 || t > 6) {
        ES_THROW(FormatError, h.source, ": 'tokenizer.ggml.token_type' entry ", i, " = ", t,
                 " must be in [1, 6]");
      }
      if (t == static_cast<int64_t>(GgufTokenType::kControl) ||
          t == static_cast<int64_t>(GgufTokenType::kUserDefined)) {
        spec.addedTokens.push_back({static_cast<int32_t>(i), spec.vocab[static_cast<size_t>(i)],
                                    t == static_cast<int64_t>(GgufTokenType::kControl)});
      }
    }
  }

  auto optId = [&](const char* key) -> std::optional<int32_t> {
    auto v = h.optInt(key, 0, n - 1);
    return v ? std::optional<int32_t>(static_cast<int32_t>(*v)) : std::nullopt;
  };
  spec.bosId = optId("tokenizer.ggml.bos_token_id");
  spec.eosId = optId("tokenizer.ggml.eos_token_id");
  spec.padId = optId("tokenizer.ggml.padding_token_id");
  spec.addBos = h.optBool("tokenizer.ggml.add_bos_token").value_or(false);
  if (spec.addBos && !spec.bosId) {
    ES_THROW(
        FormatError, h.source,
        ": 'tokenizer.ggml.add_bos_token' is true but 'tokenizer.ggml.bos_token_id' is missing");
  }
  spec.chatTemplate = h.optString("tokenizer.chat_template").value_or("");
  return spec;
}

tokenizer::TokenizerSpec tokenizerSpecFromGguf(const GgufFile& file) {
  return tokenizerSpecFromGguf(file.header());
}

}  // namespace es::model

namespace es::model {

const char* const kLlama3SplitRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2SplitRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

using nlohmann::json;

json byteLevel(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

json splitThenByteLevel(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers", json::array({{{"type", "Split"},
                                          {"pattern", {{"Regex", regex}}},
                                          {"behavior", "Isolated"},
                                          {"invert", false}},
                                         byteLevel(false, true, false)})}};
}

std::optional<std::string> tokenText(const tokenizer::TokenizerSpec& spec,
                                     std::optional<int32_t> id) {
  if (!id) return std::nullopt;
  return spec.vocab[static_cast<size_t>(*id)];
}

}  // namespace

json hfTokenizerJson(const GgufHeader& header) {
  const tokenizer::TokenizerSpec spec = tokenizerSpecFromGguf(header);

  json vocab = json::object();
  size_t duplicates = 0;
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    // A token string listed twice keeps its first id (a JSON object cannot hold both).
    if (!vocab.emplace(spec.vocab[i], static_cast<int64_t>(i)).second) ++duplicates;
  }
  if (duplicates > 0) {
    ES_THROW(FormatError, header.source, ": 'tokenizer.ggml.tokens' lists ", duplicates,
             " token strings more than once; a Hugging Face vocabulary cannot hold them");
  }
  json merges = json::array();
  for (const auto& [a, b] : spec.merges) merges.push_back(a + " " + b);

  json added = json::array();
  for (const tokenizer::AddedToken& t : spec.addedTokens) {
    added.push_back({{"id", t.id},
                     {"content", t.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", !t.special},
                     {"special", t.special}});
  }

  json pre_tokenizer;
  if (spec.preTokenizer == tokenizer::PreTokenizer::kSmolLm) {
    pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                       byteLevel(false, true, true)})}};
  } else if (spec.preTokenizer == tokenizer::PreTokenizer::kGpt2) {
    pre_tokenizer = byteLevel(false, true, true);
  } else if (spec.preTokenizer == tokenizer::PreTokenizer::kLlama3) {
    pre_tokenizer = splitThenByteLevel(kLlama3SplitRegex);
  } else {
    pre_tokenizer = splitThenByteLevel(kQwen2SplitRegex);
  }

  json post_processor = byteLevel(true, false, true);
  if (spec.addBos) {
    const std::string bos = *tokenText(spec, spec.bosId);
    auto special = [&](int type_id) {
      return json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
    };
    auto seq = [](const char* id, int type_id) {
      return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
    };
    post_processor = {
        {"type", "TemplateProcessing"},
        {"single", json::array({special(0), seq("A", 0)})},
        {"pair", json::array({special(0), seq("A", 0), special(1), seq("B", 1)})},
        {"special_tokens",
         {{bos,
           {{"id", bos}, {"ids", json::array({*spec.bosId})}, {"tokens", json::array({bos})}}}}}};
  }

  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", spec.ignoreMerges},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", std::move(added)},
          {"normalizer", spec.nfc ? json{{"type", "NFC"}} : json(nullptr)},
          {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", std::move(post_processor)},
          {"decoder", byteLevel(true, true, true)},
          {"model", std::move(model)}};
}

json hfTokenizerConfigJson(const GgufHeader& header, int64_t model_max_length) {
  const tokenizer::TokenizerSpec spec = tokenizerSpecFromGguf(header);
  const auto n = static_cast<int64_t>(spec.vocab.size());
  auto text = [&](std::optional<int32_t> id) {
    return id ? json(spec.vocab[static_cast<size_t>(*id)]) : json(nullptr);
  };
  const auto unk = header.optInt("tokenizer.ggml.unknown_token_id", 0, n - 1);
  json decoder = json::object();
  for (const tokenizer::AddedToken& t : spec.addedTokens) {
    decoder[std::to_string(t.id)] = {{"content", t.content},     {"lstrip", false},
                                     {"normalized", !t.special}, {"rstrip", false},
                                     {"single_word", false},     {"special", t.special}};
  }
  json config = {{"add_bos_token", spec.addBos},
                 {"add_eos_token", false},
                 {"added_tokens_decoder", std::move(decoder)},
                 {"bos_token", text(spec.bosId)},
                 {"eos_token", text(spec.eosId)},
                 {"pad_token", text(spec.padId)},
                 {"unk_token", unk ? text(static_cast<int32_t>(*unk)) : json(nullptr)},
                 {"clean_up_tokenization_spaces", false},
                 {"model_max_length", model_max_length},
                 {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (!spec.chatTemplate.empty()) config["chat_template"] = spec.chatTemplate;
  return config;
}

}  // namespace es::model
