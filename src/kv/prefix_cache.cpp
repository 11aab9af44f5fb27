#include "kv/prefix_cache.h"

#include <algorithm>
#include <numeric>

#include "common/errors.h"

namespace es::kv {

namespace {
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t fnvBytes(uint64_t h, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
  return h;
}

std::span<const int32_t> blockOf(std::span<const int32_t> tokens, size_t block) {
  return tokens.subspan(block * kTokensPerPage, kTokensPerPage);
}
}  // namespace

uint64_t hashPrefixBlock(uint64_t parentHash, std::span<const int32_t> blockTokens) {
  ES_CHECK_ARG(blockTokens.size() == static_cast<size_t>(kTokensPerPage), "hashPrefixBlock",
               "blockTokens.size()", blockTokens.size(), "must be ", kTokensPerPage);
  uint64_t h = fnvBytes(kFnvOffset, parentHash, 8);
  for (int32_t t : blockTokens) h = fnvBytes(h, static_cast<uint32_t>(t), 4);
  return h;
}

int64_t computePrefixCachePoolPages(int64_t maxBatchSize, int64_t maxKVCacheCapacity,
                                    int64_t retainedPages) {
  const char* where = "computePrefixCachePoolPages";
  const int64_t minimum = computeMinimumKvPoolPages(maxBatchSize, maxKVCacheCapacity);
  ES_CHECK_ARG(retainedPages >= 0, where, "retainedPages", retainedPages, "must be >= 0");
  ES_CHECK_ARG(retainedPages <= kMaxKvPoolPages - minimum, where, "retainedPages", retainedPages,
               "must be <= kMaxKvPoolPages (", kMaxKvPoolPages, ") - minimum pool pages (", minimum,
               ")");
  return minimum + retainedPages;
}

void PrefixCache::Pool::retain(PageId p, bool isCache) {
  ++(isCache ? cache : active)[static_cast<size_t>(p)];
}

void PrefixCache::Pool::drop(PageId p, bool isCache) {
  int32_t& c = (isCache ? cache : active)[static_cast<size_t>(p)];
  --c;
  if (active[static_cast<size_t>(p)] == 0 && cache[static_cast<size_t>(p)] == 0) free.push_back(p);
}

PageId PrefixCache::Pool::take() {
  const PageId p = free.back();
  free.pop_back();
  active[static_cast<size_t>(p)] = 1;
  return p;
}

PrefixCache::PrefixCache(int32_t numBasePages, int32_t numDraftPages) {
  const char* where = "PrefixCache";
  ES_CHECK_ARG(numBasePages > 0 && numBasePages <= kMaxKvPoolPages, where, "numBasePages",
               numBasePages, "must be in [1, kMaxKvPoolPages ", kMaxKvPoolPages, "]");
  ES_CHECK_ARG(numDraftPages >= 0 && numDraftPages <= kMaxKvPoolPages, where, "numDraftPages",
               numDraftPages, "must be in [0, kMaxKvPoolPages ", kMaxKvPoolPages, "]");
  for (auto [pool, n] : {std::pair{&base_, numBasePages}, std::pair{&draft_, numDraftPages}}) {
    pool->active.assign(static_cast<size_t>(n), 0);
    pool->cache.assign(static_cast<size_t>(n), 0);
    pool->free.resize(static_cast<size_t>(n));
    std::iota(pool->free.rbegin(), pool->free.rend(), 0);
  }
}

std::vector<int64_t> PrefixCache::match(std::span<const int32_t> prompt, bool requireDraft) const {
  std::vector<int64_t> out;
  // (len - 1) / 128: a fully matched block-aligned prompt still recomputes its last block.
  const size_t maxBlocks = (prompt.size() - 1) / kTokensPerPage;
  uint64_t parentHash = kPrefixRootHash;
  int64_t parent = -1;
  for (size_t b = 0; b < maxBlocks; ++b) {
    const auto tokens = blockOf(prompt, b);
    const uint64_t h = hashPrefixBlock(parentHash, tokens);
    const auto it = index_.find(h);
    if (it == index_.end()) break;
    const Record& r = records_.at(it->second);
    // The hash only names a candidate: the chain and the token ids decide.
    if (r.parent != parent || !std::equal(tokens.begin(), tokens.end(), r.tokens.begin())) break;
    if (requireDraft && r.pages.draft < 0) break;
    out.push_back(it->second);
    parentHash = h;
    parent = it->second;
  }
  return out;
}

int32_t PrefixCache::matchBlocks(std::span<const int32_t> prompt, bool requireDraft) const {
  ES_CHECK_ARG(!prompt.empty(), "PrefixCache::matchBlocks", "prompt.size()", 0, "must be > 0");
  return static_cast<int32_t>(match(prompt, requireDraft).size());
}

void PrefixCache::touch(int64_t recordId) {
  Record& r = records_.at(recordId);
  lru_.erase({r.lastUse, recordId});
  r.lastUse = ++clock_;
  lru_.insert({r.lastUse, recordId});
}

PrefixAcquireResult PrefixCache::acquire(std::span<const int32_t> prompt, bool withDraft) {
  const char* where = "PrefixCache::acquire";
  ES_CHECK_ARG(!prompt.empty(), where, "prompt.size()", 0, "must be > 0");
  ES_CHECK_ARG(!withDraft || numDraftPages() > 0, where, "withDraft", withDraft,
               "needs a draft pool (numDraftPages = 0)");
  const std::vector<int64_t> matched = match(prompt, withDraft);
  const int64_t id = nextRequest_++;
  Request& req = requests_[id];
  req.withDraft = withDraft;
  for (size_t b = 0; b < matched.size(); ++b) {
    const Record& r = records_.at(matched[b]);
    PrefixBlockPages pages{r.pages.base, withDraft ? r.pages.draft : kUnusedPageEntry};
    base_.retain(pages.base, false);
    if (pages.draft >= 0) draft_.retain(pages.draft, false);
    req.blocks.push_back(pages);
    req.records.push_back(matched[b]);
    req.chainHash = r.hash;
    // In block order, so a chain's leaf is its most recent member.
    touch(matched[b]);
  }
  return {id, static_cast<int32_t>(matched.size()), req.blocks};
}

PrefixCache::Request& PrefixCache::findRequest(int64_t request, const char* where) {
  const auto it = requests_.find(request);
  ES_CHECK_ARG(it != requests_.end(), where, "request", request, "is not a running request (",
               requests_.size(), " running)");
  return it->second;
}

const std::vector<PrefixBlockPages>& PrefixCache::requestBlocks(int64_t request) const {
  const auto it = requests_.find(request);
  ES_CHECK_ARG(it != requests_.end(), "PrefixCache::requestBlocks", "request", request,
               "is not a running request");
  return it->second.blocks;
}

bool PrefixCache::evictable(const Record& r) const {
  if (r.children > 0 || base_.active[static_cast<size_t>(r.pages.base)] > 0) return false;
  return r.pages.draft < 0 || draft_.active[static_cast<size_t>(r.pages.draft)] == 0;
}

std::optional<PrefixBlockPages> PrefixCache::evictOne() {
  for (const auto& [lastUse, recordId] : lru_) {
    // Copies: erasing the lru_ entry below invalidates the structured bindings.
    const uint64_t use = lastUse;
    const int64_t id = recordId;
    const Record& r = records_.at(id);
    if (!evictable(r)) continue;
    const PrefixBlockPages pages = r.pages;
    if (r.parent >= 0) --records_.at(r.parent).children;
    index_.erase(r.hash);
    records_.erase(id);
    lru_.erase({use, id});
    base_.drop(pages.base, true);
    if (pages.draft >= 0) draft_.drop(pages.draft, true);
    ++evictions_;
    return pages;
  }
  return std::nullopt;
}

PrefixBlockPages PrefixCache::allocateBlock(int64_t request) {
  const char* where = "PrefixCache::allocateBlock";
  Request& req = findRequest(request, where);
  // Check reclaimability first so a refusal evicts nothing. Every record no running request
  // uses is eventually evictable (leaf first): a pinned record's ancestors are pinned too.
  int64_t reclaimBase = 0, reclaimDraft = 0;
  for (const auto& [id, r] : records_) {
    if (base_.active[static_cast<size_t>(r.pages.base)] > 0) continue;
    if (r.pages.draft >= 0 && draft_.active[static_cast<size_t>(r.pages.draft)] > 0) continue;
    ++reclaimBase;
    reclaimDraft += r.pages.draft >= 0;
  }
  ES_CHECK_ARG(freeBasePages() + reclaimBase > 0, where, "request", request,
               "needs a base page but all numBasePages (", numBasePages(),
               ") are in use by running requests");
  ES_CHECK_ARG(!req.withDraft || freeDraftPages() + reclaimDraft > 0, where, "request", request,
               "needs a draft page but all numDraftPages (", numDraftPages(),
               ") are in use by running requests");
  while (base_.free.empty() || (req.withDraft && draft_.free.empty())) {
    if (!evictOne()) ES_THROW(InvalidArgument, where, ": internal: nothing evictable");
  }
  PrefixBlockPages pages{base_.take(), req.withDraft ? draft_.take() : kUnusedPageEntry};
  req.blocks.push_back(pages);
  return pages;
}

int32_t PrefixCache::publish(int64_t request, std::span<const int32_t> tokens) {
  const char* where = "PrefixCache::publish";
  Request& req = findRequest(request, where);
  ES_CHECK_ARG(tokens.size() <= req.blocks.size() * kTokensPerPage, where, "tokens.size()",
               tokens.size(), "must be <= the request's blocks (", req.blocks.size(), ") * ",
               kTokensPerPage);
  const size_t complete = tokens.size() / kTokensPerPage;  // partial tails stay private
  int32_t created = 0;
  for (size_t b = req.records.size(); req.chainOpen && b < complete; ++b) {
    const auto blockTokens = blockOf(tokens, b);
    const uint64_t h = hashPrefixBlock(req.chainHash, blockTokens);
    if (index_.count(h)) {
      // Another request published this block first (or a different block collides): this
      // request's copy stays private and, so that every published chain stays pinned by its
      // users, nothing after it is published either.
      req.chainOpen = false;
      break;
    }
    const int64_t parent = req.records.empty() ? -1 : req.records.back();
    const int64_t id = nextRecord_++;
    Record& r = records_[id];
    r.hash = h;
    r.parent = parent;
    r.tokens.assign(blockTokens.begin(), blockTokens.end());
    r.pages = req.blocks[b];
    if (parent >= 0) ++records_.at(parent).children;
    base_.retain(r.pages.base, true);
    if (r.pages.draft >= 0) draft_.retain(r.pages.draft, true);
    index_[h] = id;
    r.lastUse = ++clock_;
    lru_.insert({r.lastUse, id});
    req.records.push_back(id);
    req.chainHash = h;
    ++created;
  }
  return created;
}

void PrefixCache::release(int64_t request) {
  Request& req = findRequest(request, "PrefixCache::release");
  for (const PrefixBlockPages& p : req.blocks) {
    base_.drop(p.base, false);
    if (p.draft >= 0) draft_.drop(p.draft, false);
  }
  requests_.erase(request);
}

namespace {
void checkPage(PageId page, size_t n, const char* where) {
  ES_CHECK_ARG(page >= 0 && static_cast<size_t>(page) < n, where, "page", page, "must be in [0, ",
               n, ")");
}
}  // namespace

int32_t PrefixCache::baseActiveCount(PageId page) const {
  checkPage(page, base_.active.size(), "PrefixCache::baseActiveCount");
  return base_.active[static_cast<size_t>(page)];
}
int32_t PrefixCache::cachedBasePages() const {
  return static_cast<int32_t>(
      std::count_if(base_.cache.begin(), base_.cache.end(), [](int32_t n) { return n > 0; }));
}
int32_t PrefixCache::baseCacheCount(PageId page) const {
  checkPage(page, base_.cache.size(), "PrefixCache::baseCacheCount");
  return base_.cache[static_cast<size_t>(page)];
}
int32_t PrefixCache::draftActiveCount(PageId page) const {
  checkPage(page, draft_.active.size(), "PrefixCache::draftActiveCount");
  return draft_.active[static_cast<size_t>(page)];
}
int32_t PrefixCache::draftCacheCount(PageId page) const {
  checkPage(page, draft_.cache.size(), "PrefixCache::draftCacheCount");
  return draft_.cache[static_cast<size_t>(page)];
}

}  // namespace es::kv
