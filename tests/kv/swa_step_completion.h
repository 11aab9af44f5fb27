#pragma once
// Shared by the sliding-window property tests (test_swa_page_manager, test_kv_swa_wiring): the
// steps in flight, and the verify slots that commit their rows only once their step completed.
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace es::kv::swa_test {

// Verify slot -> (the step that wrote its rows, how many rows it wrote).
using AwaitingCommits = std::map<int32_t, std::pair<int64_t, int32_t>>;

// After retireAndCompact: waiting slots follow their sequence to its new slot (oldToNew), and
// retired ones stop waiting.
inline void remapAwaiting(AwaitingCommits& awaiting, const std::vector<int32_t>& oldToNew) {
  AwaitingCommits moved;
  for (const auto& [slot, v] : awaiting) {
    if (oldToNew[static_cast<size_t>(slot)] >= 0) moved[oldToNew[static_cast<size_t>(slot)]] = v;
  }
  awaiting.swap(moved);
}

// Completes the running steps up to a random one, oldest first, through complete(id) (running is
// in issue order; Step has an `id`); every slot waiting on a step that has now completed then
// commits a random 0 … rows of its rows through commit(slot, count) and stops waiting.
template <typename Step, typename Complete, typename Commit>
void completeOldestSteps(std::vector<Step>& running, AwaitingCommits& awaiting, std::mt19937& rng,
                         Complete complete, Commit commit) {
  const size_t upto = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
  const int64_t id = running[upto].id;
  complete(id);
  running.erase(running.begin(), running.begin() + static_cast<long>(upto) + 1);
  for (auto it = awaiting.begin(); it != awaiting.end();) {
    if (it->second.first <= id) {
      commit(it->first, std::uniform_int_distribution<int32_t>(0, it->second.second)(rng));
      it = awaiting.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace es::kv::swa_test
