#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "common/errors.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace es::tokenizer {
namespace {

struct ByteLevelTables {
  std::array<char32_t, 256> toUnicode{};
  std::array<int16_t, 512> fromUnicode{};  // every code point of the alphabet is < 512
};

const ByteLevelTables& byteLevelTables() {
  static const ByteLevelTables t = [] {
    ByteLevelTables t;
    t.fromUnicode.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes stand for themselves; the rest are shifted past U+00FF in order.
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t.toUnicode[b] = printable ? static_cast<char32_t>(b) : next++;
      t.fromUnicode[t.toUnicode[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return t;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id), open addressing: the merge loop's only hot lookup.
class MergeTable {
 public:
  struct Entry {
    int32_t rank;
    int32_t result;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Entry{INT_MAX, -1});
    mask_ = cap - 1;
  }
  // Keeps the first (lowest-rank) entry of a duplicated pair.
  void insert(int32_t left, int32_t right, Entry e) {
    const uint64_t key = makeKey(left, right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return;
      if (keys_[i] == kEmpty) {
        keys_[i] = key, values_[i] = e;
        return;
      }
    }
  }
  const Entry* find(int32_t left, int32_t right) const {
    if (left < 0 || right < 0 || keys_.empty()) return nullptr;
    const uint64_t key = makeKey(left, right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t makeKey(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  size_t hash(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull >> 29) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<Entry> values_;
  size_t mask_ = 0;
};

// Words longer than this (in bytes) use the heap-based merge loop and are not cached.
constexpr size_t kSimpleMergeMaxBytes = 48;
constexpr size_t kCacheMaxWordBytes = 64;
constexpr size_t kCacheMaxEntries = 1 << 17;

}  // namespace

char32_t byteToUnicode(uint8_t byte) { return byteLevelTables().toUnicode[byte]; }

int byteFromUnicode(char32_t cp) { return cp < 512 ? byteLevelTables().fromUnicode[cp] : -1; }

std::string bytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) appendUtf8(out, byteToUnicode(static_cast<uint8_t>(c)));
  return out;
}

bool byteLevelToBytes(std::string_view byteLevel, std::string& out) {
  out.clear();
  for (size_t pos = 0; pos < byteLevel.size();) {
    const DecodedCodepoint d = decodeUtf8(byteLevel, pos);
    const int b = d.valid ? byteFromUnicode(d.cp) : -1;
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    pos += d.length;
  }
  return true;
}

struct BpeTokenizer::Impl {
  TokenizerSpec spec;
  std::vector<std::string> bytes;  // id -> raw bytes
  std::vector<uint8_t> special;    // id -> special added token
  StringMap<int32_t> idByBytes;    // vocabulary (first id wins for duplicated strings)
  StringMap<int32_t> addedIdByContent;
  std::array<int32_t, 256> byteId{};
  MergeTable merges;
  // Added tokens starting with each byte, longest first (index into spec.addedTokens).
  std::array<std::vector<uint32_t>, 256> addedByFirstByte;

  mutable std::mutex cacheMutex;
  mutable StringMap<std::vector<int32_t>> cache;

  void build();
  void mergeSimple(std::string_view word, std::vector<int32_t>& out) const;
  void mergeHeap(std::string_view word, std::vector<int32_t>& out) const;
  void encodeWord(std::string_view word, std::vector<int32_t>& out) const;
  void encodeSegment(std::string_view segment, std::vector<int32_t>& out) const;
};

void BpeTokenizer::Impl::build() {
  size_t size = spec.vocab.size();
  for (const AddedToken& t : spec.addedTokens) {
    if (t.id < 0)
      ES_THROW(FormatError, "tokenizer spec: added token '", t.content, "' has id ", t.id);
    if (t.content.empty()) ES_THROW(FormatError, "tokenizer spec: added token ", t.id, " is empty");
    size = std::max(size, static_cast<size_t>(t.id) + 1);
  }
  if (size > static_cast<size_t>(INT32_MAX))
    ES_THROW(FormatError, "tokenizer spec: vocabulary of ", size, " tokens is too large");
  bytes.assign(size, {});
  special.assign(size, 0);
  idByBytes.reserve(spec.vocab.size());
  for (size_t id = 0; id < spec.vocab.size(); ++id) {
    const std::string& s = spec.vocab[id];
    // Strings outside the byte-level alphabet (GGUF control tokens, e.g. "<|endoftext|>" is
    // inside it anyway) stand for their own UTF-8 bytes.
    if (!byteLevelToBytes(s, bytes[id])) bytes[id] = s;
    if (!bytes[id].empty()) idByBytes.emplace(bytes[id], static_cast<int32_t>(id));
  }
  for (size_t i = 0; i < spec.addedTokens.size(); ++i) {
    const AddedToken& t = spec.addedTokens[i];
    bytes[t.id] = t.content;
    special[t.id] = t.special;
    addedIdByContent.emplace(t.content, t.id);
    addedByFirstByte[static_cast<uint8_t>(t.content[0])].push_back(static_cast<uint32_t>(i));
  }
  for (auto& list : addedByFirstByte) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return spec.addedTokens[a].content.size() > spec.addedTokens[b].content.size();
    });
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = idByBytes.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byteId[b] = it == idByBytes.end() ? -1 : it->second;  // -1: the byte is dropped, as in HF
  }
  merges.reserve(spec.merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    if (!byteLevelToBytes(a, left)) left = a;
    if (!byteLevelToBytes(b, right)) right = b;
    const auto l = idByBytes.find(left), r = idByBytes.find(right);
    const auto m = idByBytes.find(left + right);
    const char* missing = l == idByBytes.end()   ? "its left part"
                          : r == idByBytes.end() ? "its right part"
                          : m == idByBytes.end() ? "its result"
                                                 : nullptr;
    if (missing) {
      ES_THROW(FormatError, "tokenizer spec: merge ", rank, " ('", a, "' '", b, "'): ", missing,
               " is not in the vocabulary");
    }
    merges.insert(l->second, r->second, {static_cast<int32_t>(rank), m->second});
  }
  const auto checkId = [&](const std::optional<int32_t>& id, const char* name) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= size))
      ES_THROW(FormatError, "tokenizer spec: ", name, " = ", *id, " is outside the vocabulary of ",
               size, " tokens");
  };
  checkId(spec.bosId, "bosId");
  checkId(spec.eosId, "eosId");
  checkId(spec.padId, "padId");
}

// Repeatedly merges the lowest-rank adjacent pair (leftmost on ties). Quadratic, but words of a
// few bytes dominate and this has no allocation beyond `ids`.
void BpeTokenizer::Impl::mergeSimple(std::string_view word, std::vector<int32_t>& out) const {
  int32_t ids[kSimpleMergeMaxBytes];
  size_t n = word.size();
  for (size_t i = 0; i < n; ++i) ids[i] = byteId[static_cast<uint8_t>(word[i])];
  while (n > 1) {
    int32_t bestRank = INT_MAX, bestResult = -1;
    size_t bestPos = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      const MergeTable::Entry* e = merges.find(ids[i], ids[i + 1]);
      if (e && e->rank < bestRank) bestRank = e->rank, bestResult = e->result, bestPos = i;
    }
    if (bestResult < 0) break;
    ids[bestPos] = bestResult;
    std::memmove(ids + bestPos + 1, ids + bestPos + 2, (n - bestPos - 2) * sizeof(int32_t));
    --n;
  }
  for (size_t i = 0; i < n; ++i)
    if (ids[i] >= 0) out.push_back(ids[i]);
}

// The same merge order with a doubly linked list of symbols and a min-heap of candidate pairs
// (rank, position); a popped candidate whose symbols changed since it was pushed is stale.
void BpeTokenizer::Impl::mergeHeap(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left, right;  // ids when pushed
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {byteId[static_cast<uint8_t>(word[i])], i - 1, i + 1};
  sym[n - 1].next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const int32_t l = sym[pos].id, r = sym[sym[pos].next].id;
    if (const MergeTable::Entry* e = merges.find(l, r)) heap.push({e->rank, pos, l, r});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;  // stale
    const int32_t gone = s.next;
    s.id = merges.find(c.left, c.right)->result;
    s.next = sym[gone].next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    sym[gone].id = -2;  // dead: never matches a pushed id
    push(s.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next)
    if (sym[i].id >= 0) out.push_back(sym[i].id);
}

void BpeTokenizer::Impl::encodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    if (const int32_t id = byteId[static_cast<uint8_t>(word[0])]; id >= 0) out.push_back(id);
    return;
  }
  if (spec.ignoreMerges) {
    if (const auto it = idByBytes.find(word); it != idByBytes.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    mergeHeap(word, out);
    return;
  }
  {
    std::lock_guard lock(cacheMutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  if (word.size() <= kSimpleMergeMaxBytes) {
    mergeSimple(word, out);
  } else {
    mergeHeap(word, out);
  }
  std::lock_guard lock(cacheMutex);
  if (cache.size() >= kCacheMaxEntries) cache.clear();
  cache.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
}

void BpeTokenizer::Impl::encodeSegment(std::string_view segment, std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  std::string normalized;
  if (spec.nfc && !isNfcQuick(segment)) {
    normalized = nfc(segment);
    segment = normalized;
  }
  std::vector<std::string_view> pieces;
  preTokenize(spec.preTokenizer, segment, pieces);
  for (std::string_view piece : pieces) encodeWord(piece, out);
}

BpeTokenizer::BpeTokenizer(TokenizerSpec spec) : impl_(std::make_unique<Impl>()) {
  impl_->spec = std::move(spec);
  impl_->build();
}
BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool parseSpecial) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t segmentBegin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto& candidates = m.addedByFirstByte[static_cast<uint8_t>(text[pos])];
    const AddedToken* match = nullptr;
    for (uint32_t index : candidates) {
      const AddedToken& t = m.spec.addedTokens[index];
      if ((parseSpecial || !t.special) && text.substr(pos, t.content.size()) == t.content) {
        match = &t;  // longest first
        break;
      }
    }
    if (!match) {
      ++pos;
      continue;
    }
    m.encodeSegment(text.substr(segmentBegin, pos - segmentBegin), out);
    out.push_back(match->id);
    pos += match->content.size();
    segmentBegin = pos;
  }
  m.encodeSegment(text.substr(segmentBegin), out);
  return out;
}

std::vector<int32_t> BpeTokenizer::encodePrompt(std::string_view text, bool parseSpecial) const {
  std::vector<int32_t> ids = encode(text, parseSpecial);
  if (impl_->spec.addBos && impl_->spec.bosId) ids.insert(ids.begin(), *impl_->spec.bosId);
  return ids;
}

const std::string& BpeTokenizer::tokenBytes(int32_t id) const {
  ES_CHECK_ARG(id >= 0 && id < vocabSize(), "BpeTokenizer", "token id", id, "must be in [0, ",
               vocabSize(), ")");
  return impl_->bytes[id];
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skipSpecial) const {
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    ES_CHECK_ARG(id >= 0 && id < vocabSize(), "BpeTokenizer::decode",
                 "ids[" + std::to_string(i) + "]", id, "must be in [0, ", vocabSize(), ")");
    if (skipSpecial && impl_->special[id]) continue;
    joined += impl_->bytes[id];
  }
  return sanitizeUtf8(joined);
}

int32_t BpeTokenizer::vocabSize() const { return static_cast<int32_t>(impl_->bytes.size()); }

bool BpeTokenizer::isSpecial(int32_t id) const {
  return id >= 0 && id < vocabSize() && impl_->special[id];
}

std::optional<int32_t> BpeTokenizer::tokenId(std::string_view bytes) const {
  if (const auto it = impl_->addedIdByContent.find(bytes); it != impl_->addedIdByContent.end())
    return it->second;
  if (const auto it = impl_->idByBytes.find(bytes); it != impl_->idByBytes.end()) return it->second;
  return std::nullopt;
}

const TokenizerSpec& BpeTokenizer::spec() const { return impl_->spec; }

StreamingDecoder::StreamingDecoder(const BpeTokenizer& tokenizer, bool skipSpecial)
    : tokenizer_(&tokenizer), skipSpecial_(skipSpecial) {}

std::string StreamingDecoder::push(int32_t id) {
  const std::string& bytes = tokenizer_->tokenBytes(id);  // range-checked
  if (skipSpecial_ && tokenizer_->isSpecial(id)) return {};
  pending_ += bytes;
  const size_t complete = completeUtf8Prefix(pending_);
  std::string out = sanitizeUtf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out = sanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace es::tokenizer
