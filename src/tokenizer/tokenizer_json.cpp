#include "tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.h"
#include "common/input_file.h"
#include "common/json.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pretokenizer.h"

namespace es::tokenizer {
namespace {

using nlohmann::json;

std::string shortText(std::string_view s) {
  return s.size() <= 120 ? std::string(s) : std::string(s.substr(0, 117)) + "...";
}

// Token ids beyond the number of entries a file lists (vocab plus added_tokens) are allowed up
// to this many: real vocabularies are dense, and a bound tied to the file's own size keeps a tiny
// file from sizing the vocabulary table at 2^30 entries.
constexpr int64_t kTokenIdSlack = 1024;

// Field access that names the file and the JSON path in every error.
class Reader {
 public:
  // `idLimit`: token ids must be below it.
  explicit Reader(std::string_view source, int64_t idLimit = int64_t{1} << 30)
      : source_(source), idLimit_(idLimit) {}

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    ES_THROW(FormatError, source_, ": field '", field, "' ", what);
  }
  const json& member(const json& obj, const char* key, std::string_view field) const {
    if (!obj.is_object()) fail(field, "must be inside an object");
    const auto it = obj.find(key);
    if (it == obj.end()) fail(field, "is missing");
    return *it;
  }
  const json* optional(const json& obj, const char* key) const {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const json& v, std::string_view field) const {
    if (!v.is_string()) fail(field, "must be a string, got " + shortText(v.dump()));
    return v.get<std::string>();
  }
  bool boolean(const json& v, std::string_view field) const {
    if (!v.is_boolean()) fail(field, "must be a boolean, got " + shortText(v.dump()));
    return v.get<bool>();
  }
  int32_t id(const json& v, std::string_view field) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= idLimit_)
      fail(field, "must be a token id (an integer in [0, " + std::to_string(idLimit_) +
                      "): the file's vocab and added_tokens entries + " +
                      std::to_string(kTokenIdSlack) + "), got " + shortText(v.dump()));
    return static_cast<int32_t>(v.get<int64_t>());
  }
  bool flag(const json& obj, const char* key, std::string_view field, bool fallback) const {
    const json* v = optional(obj, key);
    return v ? boolean(*v, field) : fallback;
  }

 private:
  std::string source_;
  int64_t idLimit_;
};

void readModel(const Reader& r, const json& model, TokenizerSpec& spec) {
  if (const json* type = r.optional(model, "type"); type && r.string(*type, "model.type") != "BPE")
    r.fail("model.type", "is '" + type->get<std::string>() + "'; only BPE is supported");
  if (r.flag(model, "byte_fallback", "model.byte_fallback", false))
    r.fail("model.byte_fallback",
           "is true (a SentencePiece-style BPE); only byte-level BPE is supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::string field = std::string("model.") + key;
    if (const json* v = r.optional(model, key); v && !r.string(*v, field).empty())
      r.fail(field, "is '" + v->get<std::string>() + "'; not supported by byte-level BPE");
  }
  if (const json* v = r.optional(model, "dropout"); v && !(v->is_number() && v->get<double>() == 0))
    r.fail("model.dropout", "is " + v->dump() + "; BPE dropout is not supported");
  spec.ignoreMerges = r.flag(model, "ignore_merges", "model.ignore_merges", false);

  const json& vocab = r.member(model, "vocab", "model.vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "must be an object of token -> id");
  for (const auto& [token, idValue] : vocab.items()) {
    const std::string field = "model.vocab['" + shortText(token) + "']";
    const int32_t id = r.id(idValue, field);
    if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(id + 1);
    if (!spec.vocab[id].empty())
      r.fail(field, "reuses id " + std::to_string(id) + " of '" + shortText(spec.vocab[id]) + "'");
    if (token.empty()) r.fail(field, "is an empty token");
    spec.vocab[id] = token;
  }

  const json& merges = r.member(model, "merges", "model.merges");
  if (!merges.is_array()) r.fail("model.merges", "must be an array");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {  // "left right" (older files)
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        r.fail(field, "must be two tokens separated by one space, got '" + shortText(s) + "'");
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.fail(field, "must be \"left right\" or [\"left\", \"right\"], got " + shortText(m.dump()));
    }
  }
}

void readAddedTokens(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json* added = r.optional(root, "added_tokens");
  if (!added) return;
  if (!added->is_array()) r.fail("added_tokens", "must be an array");
  for (size_t i = 0; i < added->size(); ++i) {
    const json& t = (*added)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    AddedToken token;
    token.id = r.id(r.member(t, "id", field + ".id"), field + ".id");
    token.content = r.string(r.member(t, "content", field + ".content"), field + ".content");
    if (token.content.empty()) r.fail(field + ".content", "is empty");
    token.special = r.flag(t, "special", field + ".special", false);
    // lstrip/rstrip/single_word change what the token swallows around it; none of the
    // supported families uses them, and ignoring them would tokenize silently wrong.
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (r.flag(t, key, field + "." + key, false))
        r.fail(field + "." + key, "is true for '" + token.content + "'; not supported");
    }
    if (static_cast<size_t>(token.id) >= spec.vocab.size()) spec.vocab.resize(token.id + 1);
    // An added token may repeat a vocab entry (GPT-2's <|endoftext|>), but only with the same
    // text: one id with two texts would encode one and decode the other.
    const std::string byteLevel = bytesToByteLevel(token.content);
    const std::string& listed = spec.vocab[token.id];
    if (!listed.empty() && listed != byteLevel && listed != token.content)
      r.fail(field + ".id", "is " + std::to_string(token.id) + ", the id of vocab token '" +
                                shortText(listed) + "', but its content is '" +
                                shortText(token.content) + "'");
    if (listed.empty()) spec.vocab[token.id] = byteLevel;
    spec.addedTokens.push_back(std::move(token));
  }
}

void readNormalizer(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json* n = r.optional(root, "normalizer");
  if (!n) return;
  const std::string type = r.string(r.member(*n, "type", "normalizer.type"), "normalizer.type");
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence") {
    const json& list = r.member(*n, "normalizers", "normalizer.normalizers");
    if (!list.is_array()) r.fail("normalizer.normalizers", "must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "normalizer.normalizers[" + std::to_string(i) + "].type";
      const std::string t = r.string(r.member(list[i], "type", field), field);
      if (t != "NFC") r.fail(field, "is '" + t + "'; only NFC normalisation is supported");
      spec.nfc = true;
    }
  } else {
    r.fail("normalizer.type", "is '" + type + "'; only NFC normalisation is supported");
  }
}

void checkByteLevel(const Reader& r, const json& b, const std::string& field, bool useRegex) {
  if (r.flag(b, "add_prefix_space", field + ".add_prefix_space", false))
    r.fail(field + ".add_prefix_space", "is true; not supported");
  if (r.flag(b, "use_regex", field + ".use_regex", true) != useRegex)
    r.fail(field + ".use_regex", useRegex ? "must be true here" : "must be false after a Split");
}

void readPreTokenizer(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json& p = r.member(root, "pre_tokenizer", "pre_tokenizer");
  const auto typeOf = [&](const json& v, const std::string& field) {
    return r.string(r.member(v, "type", field + ".type"), field + ".type");
  };
  const std::string type = typeOf(p, "pre_tokenizer");
  if (type == "ByteLevel") {  // GPT-2: the regex is implied by use_regex
    checkByteLevel(r, p, "pre_tokenizer", true);
    spec.preTokenizer = PreTokenizer::kGpt2;
    return;
  }
  if (type != "Sequence")
    r.fail("pre_tokenizer.type", "is '" + type + "'; not a byte-level BPE pre-tokenizer");
  const json& list = r.member(p, "pretokenizers", "pre_tokenizer.pretokenizers");
  if (!list.is_array() || list.size() != 2)
    r.fail("pre_tokenizer.pretokenizers",
           "must be [Split or Digits, ByteLevel], got " + shortText(list.dump()));
  const std::string first = typeOf(list[0], "pre_tokenizer.pretokenizers[0]");
  const std::string second = typeOf(list[1], "pre_tokenizer.pretokenizers[1]");
  if (second != "ByteLevel")
    r.fail("pre_tokenizer.pretokenizers[1].type", "is '" + second + "', not ByteLevel");
  if (first == "Digits") {  // SmolLM/SmolLM2
    if (!r.flag(list[0], "individual_digits", "pre_tokenizer.pretokenizers[0].individual_digits",
                false))
      r.fail("pre_tokenizer.pretokenizers[0].individual_digits", "must be true");
    checkByteLevel(r, list[1], "pre_tokenizer.pretokenizers[1]", true);
    spec.preTokenizer = PreTokenizer::kSmolLm;
    return;
  }
  if (first != "Split")
    r.fail("pre_tokenizer.pretokenizers[0].type", "is '" + first + "'; expected Split or Digits");
  checkByteLevel(r, list[1], "pre_tokenizer.pretokenizers[1]", false);
  const std::string field = "pre_tokenizer.pretokenizers[0]";
  const json& pattern = r.member(list[0], "pattern", field + ".pattern");
  const std::string regex =
      r.string(r.member(pattern, "Regex", field + ".pattern.Regex"), field + ".pattern.Regex");
  const std::string behavior =
      r.string(r.member(list[0], "behavior", field + ".behavior"), field + ".behavior");
  if (behavior != "Isolated")
    r.fail(field + ".behavior", "is '" + behavior + "'; only Isolated is supported");
  if (r.flag(list[0], "invert", field + ".invert", false))
    r.fail(field + ".invert", "is true; not supported");
  for (PreTokenizer kind : {PreTokenizer::kQwen2, PreTokenizer::kLlama3, PreTokenizer::kGpt2}) {
    if (regex == preTokenizerRegex(kind)) {
      spec.preTokenizer = kind;
      return;
    }
  }
  r.fail(field + ".pattern.Regex", "is '" + regex +
                                       "', which is not one of the implemented "
                                       "pre-tokenizers (GPT-2, Llama-3, Qwen2)");
}

// Llama-3 adds <|begin_of_text|> through a TemplateProcessing post-processor, not through
// tokenizer_config.json: a template whose single-sequence form starts with a special token
// means "prepend bos".
void readPostProcessor(const Reader& r, const json& root, TokenizerSpec& spec) {
  const json* p = r.optional(root, "post_processor");
  if (!p) return;
  std::vector<const json*> processors{p};
  if (const json* list = r.optional(*p, "processors"); list && list->is_array()) {
    processors.clear();
    for (const json& q : *list) processors.push_back(&q);
  }
  for (const json* q : processors) {
    const json* type = r.optional(*q, "type");
    if (!type || *type != "TemplateProcessing") continue;
    const json* single = r.optional(*q, "single");
    if (!single || !single->is_array() || single->empty()) continue;
    const json* first = r.optional((*single)[0], "SpecialToken");
    if (!first) continue;
    const std::string content =
        r.string(r.member(*first, "id", "post_processor.single[0].SpecialToken.id"),
                 "post_processor.single[0].SpecialToken.id");
    for (const AddedToken& t : spec.addedTokens) {
      if (t.content == content) {
        spec.bosId = t.id;
        spec.addBos = true;
      }
    }
  }
}

}  // namespace

TokenizerSpec parseTokenizerJson(std::string_view text, std::string_view source) {
  const json root = parseJsonStrict(text, source);
  if (!root.is_object()) ES_THROW(FormatError, source, ": a tokenizer.json must be a JSON object");
  const auto entriesOf = [](const json& parent, const char* key) -> int64_t {
    const auto it = parent.find(key);
    return it != parent.end() && (it->is_object() || it->is_array())
               ? static_cast<int64_t>(it->size())
               : 0;
  };
  const auto model = root.find("model");
  const int64_t entries =
      entriesOf(root, "added_tokens") +
      (model != root.end() && model->is_object() ? entriesOf(*model, "vocab") : 0);
  const Reader r(source, entries + kTokenIdSlack);
  TokenizerSpec spec;
  readModel(r, r.member(root, "model", "model"), spec);
  readAddedTokens(r, root, spec);
  readNormalizer(r, root, spec);
  readPreTokenizer(r, root, spec);
  if (const json* d = r.optional(root, "decoder")) {
    const std::string type = r.string(r.member(*d, "type", "decoder.type"), "decoder.type");
    if (type != "ByteLevel") r.fail("decoder.type", "is '" + type + "'; expected ByteLevel");
  }
  readPostProcessor(r, root, spec);
  return spec;
}

void applyTokenizerConfig(TokenizerSpec& spec, std::string_view text, std::string_view source) {
  const json root = parseJsonStrict(text, source);
  const Reader r(source);
  if (!root.is_object())
    ES_THROW(FormatError, source, ": tokenizer_config.json must be a JSON object");
  const auto tokenId = [&](const char* key) -> std::optional<int32_t> {
    const json* v = r.optional(root, key);
    if (!v) return std::nullopt;
    const std::string content =
        v->is_object() ? r.string(r.member(*v, "content", std::string(key) + ".content"),
                                  std::string(key) + ".content")
                       : r.string(*v, key);
    for (const AddedToken& t : spec.addedTokens)
      if (t.content == content) return t.id;
    const std::string byteLevel = bytesToByteLevel(content);
    for (size_t id = 0; id < spec.vocab.size(); ++id)
      if (spec.vocab[id] == byteLevel) return static_cast<int32_t>(id);
    r.fail(key, "names '" + content + "', which is not a token of the tokenizer");
  };
  if (auto id = tokenId("bos_token")) spec.bosId = id;
  if (auto id = tokenId("eos_token")) spec.eosId = id;
  if (auto id = tokenId("pad_token")) spec.padId = id;
  if (const json* v = r.optional(root, "add_bos_token"))
    spec.addBos = r.boolean(*v, "add_bos_token");
  if (spec.addBos && !spec.bosId) r.fail("add_bos_token", "is true but there is no bos_token");
  if (const json* v = r.optional(root, "chat_template")) {
    if (v->is_string()) {
      spec.chatTemplate = v->get<std::string>();
    } else if (v->is_array()) {
      for (size_t i = 0; i < v->size(); ++i) {
        const std::string field = "chat_template[" + std::to_string(i) + "]";
        if (r.string(r.member((*v)[i], "name", field + ".name"), field + ".name") == "default")
          spec.chatTemplate =
              r.string(r.member((*v)[i], "template", field + ".template"), field + ".template");
      }
    } else {
      r.fail("chat_template", "must be a string or a list of {name, template}");
    }
  }
}

TokenizerSpec loadTokenizerJson(const std::filesystem::path& path) {
  TokenizerSpec spec = parseTokenizerJson(
      readInputFile(path, kMaxTokenizerJsonBytes, "loadTokenizerJson"), path.string());
  const std::filesystem::path config = path.parent_path() / "tokenizer_config.json";
  // Optional, but when present (a dangling link counts) it is read through the same checks: a
  // FIFO or an oversized file there is an error, not silently skipped.
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(config, ec))) {
    applyTokenizerConfig(spec,
                         readInputFile(config, kMaxTokenizerConfigJsonBytes, "loadTokenizerJson"),
                         config.string());
  }
  return spec;
}

}  // namespace es::tokenizer
