#pragma once
// Prefix reuse records (spec §1.4, retained pages / prefix reuse). CPU-side bookkeeping only: it
// decides which pages of the full-capacity pools a request may share with earlier requests, and
// which pages are free; it never touches KV data or a page table.
//
// Blocks. Every complete 128-token block of a request is identified by a chained hash:
// hash(block i) = hashPrefixBlock(hash(block i-1), tokens of block i), hash(block -1) =
// kPrefixRootHash. A record publishes one block: its hash, parent record, token ids, and the
// pages holding its K/V: a base (target) page and, optionally, a draft page holding the DFlash
// draft's context K/V for the same positions, so a request running the draft reuses both.
// A lookup walks the chain and on every hash hit checks the parent record and the 128 token ids
// (the hash only finds candidates). A fully matched prompt whose length is a multiple of 128
// still recomputes its last block (its logits are needed): at most (promptLen - 1) / 128 blocks
// match. Partial tail blocks are never published.
//
// Pages. Each page (per pool) carries an active count (running requests using it) and a cache
// count (records holding it); it is free only when both are zero. A request publishes its blocks
// in order and only while each parent is itself a record it uses (a chain it pins); once one of
// its blocks turns out to be a duplicate of, or collide with, an existing record, it publishes no
// more. Hence every record pinned by a running request has all its ancestors pinned by that same
// request, the pages held by unpinned records can always be reclaimed, and a pool of
// computeMinimumKvPoolPages pages never runs out for active requests; pages beyond it hold
// retained records (computePrefixCachePoolPages).
//
// Eviction is LRU over records (every hit and every publish refreshes the record) and only takes
// a record no running request uses (neither page active) and no retained record descends from.
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/page_geometry.h"

namespace es::kv {

// Chain start: the "parent hash" of a request's first block.
constexpr uint64_t kPrefixRootHash = 0;

// 64-bit FNV-1a over the parent hash's 8 bytes (little-endian) followed by every token id's 4
// bytes (little-endian, as uint32). Well defined on every platform, so hashes can be logged and
// compared across processes; not collision-proof, which is why hits verify the token ids.
uint64_t hashPrefixBlock(uint64_t parentHash, std::span<const int32_t> blockTokens);

// computeMinimumKvPoolPages(maxBatchSize, maxKVCacheCapacity) + retainedPages: the pool size
// that keeps every active slot servable and holds up to retainedPages pages of records only.
// retainedPages >= 0; the result must be <= kMaxKvPoolPages.
int64_t computePrefixCachePoolPages(int64_t maxBatchSize, int64_t maxKVCacheCapacity,
                                    int64_t retainedPages);

struct PrefixBlockPages {
  PageId base = kUnusedPageEntry;
  PageId draft = kUnusedPageEntry;  // -1: no draft context K/V for this block
  bool operator==(const PrefixBlockPages&) const = default;
};

struct PrefixAcquireResult {
  int64_t request;
  int32_t matchedBlocks;                // leading blocks served from records
  std::vector<PrefixBlockPages> pages;  // their pages (draft ids only when acquired withDraft)
};

class PrefixCache {
 public:
  // numBasePages: K pages of the base pools; numDraftPages: of the draft pools (0 = no draft).
  PrefixCache(int32_t numBasePages, int32_t numDraftPages);

  int32_t numBasePages() const { return static_cast<int32_t>(base_.active.size()); }
  int32_t numDraftPages() const { return static_cast<int32_t>(draft_.active.size()); }

  // Blocks a new request with this prompt would reuse (requireDraft: only records with a draft
  // page count). Changes nothing, refreshes nothing.
  int32_t matchBlocks(std::span<const int32_t> prompt, bool requireDraft) const;

  // Starts a request: pins the longest matching chain (active count +1 on its pages) and
  // refreshes those records. withDraft: the request runs the DFlash draft, so matches need draft
  // pages and allocateBlock() gives it draft pages too (needs numDraftPages > 0).
  PrefixAcquireResult acquire(std::span<const int32_t> prompt, bool withDraft);

  // Appends one private block to the request (its next logical page): a free base page, and a
  // draft page when the request is withDraft. Evicts LRU records when no page is free; throws,
  // changing nothing, when every page is in use by running requests.
  PrefixBlockPages allocateBlock(int64_t request);

  // Publishes the request's complete blocks not yet published: `tokens` are the request's token
  // ids from position 0 (prompt and generated), covered by its blocks. Returns how many records
  // were created. Blocks already published or matched are not re-checked.
  int32_t publish(int64_t request, std::span<const int32_t> tokens);

  // Ends a request: drops its active counts; pages no record holds become free.
  void release(int64_t request);

  // Evicts the least recently used evictable record; returns its pages, or nullopt when no
  // record is evictable.
  std::optional<PrefixBlockPages> evictOne();

  // Introspection (tests, logging).
  int32_t freeBasePages() const { return static_cast<int32_t>(base_.free.size()); }
  int32_t freeDraftPages() const { return static_cast<int32_t>(draft_.free.size()); }
  int32_t cachedBasePages() const;  // base pages some record holds (active or not)
  int32_t recordCount() const { return static_cast<int32_t>(records_.size()); }
  int32_t activeRequests() const { return static_cast<int32_t>(requests_.size()); }
  int64_t evictions() const { return evictions_; }  // records evicted so far
  int32_t baseActiveCount(PageId page) const;
  int32_t baseCacheCount(PageId page) const;
  int32_t draftActiveCount(PageId page) const;
  int32_t draftCacheCount(PageId page) const;
  const std::vector<PrefixBlockPages>& requestBlocks(int64_t request) const;

 private:
  struct Pool {
    std::vector<int32_t> active;
    std::vector<int32_t> cache;
    std::vector<PageId> free;  // a stack; lowest ids first
    void retain(PageId p, bool isCache);
    void drop(PageId p, bool isCache);
    PageId take();
  };
  struct Record {
    uint64_t hash;
    int64_t parent;  // record id, -1 for a first block
    std::vector<int32_t> tokens;
    PrefixBlockPages pages;
    int32_t children = 0;
    uint64_t lastUse = 0;
  };
  struct Request {
    bool withDraft;
    std::vector<PrefixBlockPages> blocks;
    std::vector<int64_t> records;  // records of blocks [0, records.size())
    uint64_t chainHash = kPrefixRootHash;
    bool chainOpen = true;
  };

  // Record ids of the longest verified match (at most maxBlocks).
  std::vector<int64_t> match(std::span<const int32_t> prompt, bool requireDraft) const;
  bool evictable(const Record& r) const;
  void touch(int64_t recordId);
  Request& findRequest(int64_t request, const char* where);

  Pool base_;
  Pool draft_;
  std::unordered_map<uint64_t, int64_t> index_;  // chained hash -> record id
  std::unordered_map<int64_t, Record> records_;
  std::set<std::pair<uint64_t, int64_t>> lru_;  // (lastUse, record id), oldest first
  std::unordered_map<int64_t, Request> requests_;
  int64_t nextRecord_ = 0;
  int64_t nextRequest_ = 1;
  uint64_t clock_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace es::kv
