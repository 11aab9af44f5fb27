#pragma once
// The KV capacity rule: how many tokens a slot must hold for a request, given what a decode step
// writes. The engine builder sizes caches by it and DecodeEngine refuses requests past it.
#include <cstdint>

namespace es::runtime {

// KV positions one slot must hold for requests of at most `longestRequest` = prompt L +
// maxNewTokens N tokens, decoded in steps of W = verifyWidth rows per sequence with proposals of
// BS = blockSize rows (plain decoding: W = BS = 1).
//
// What the engine writes: the prefill commits the L prompt tokens and emits the first token,
// which stays uncommitted as the next step's anchor; each step writes W rows at positions
// [committed, committed + W) and commits the k <= W tokens it emits, so committed = L +
// emitted − 1. A request still running has emitted at most N − 1 tokens, so committed <= L + N −
// 2 and its last step writes up to position L + N + W − 3. That step may commit all W rows, and
// within the same device step the draft proposes its next block of BS rows at [committed,
// committed + BS) before the host retires the request: the highest position written is
// L + N + (W − 1) + (BS − 1) − 1. Hence L + N + (W − 1) + (BS − 1) positions (2·(BS − 1) more
// than L + N at full width). Plain decoding needs L + N − 1; the same formula gives it L + N, one
// spare row for one rule. The KvCacheManager pads the result to whole pages.
constexpr int64_t kvCapacityTokens(int64_t longestRequest, int32_t verifyWidth, int32_t blockSize) {
  return longestRequest + (verifyWidth - 1) + (blockSize - 1);
}

}  // namespace es::runtime
