// Private: the pool of a non-dedicated step (docs/nd.md). In a pooled step no rank owns a
// fixed share: every rank claims micro-chunks of the step's global batch B until B samples are
// claimed, so a rank that is slowed this step simply claims fewer, and the step ends when B
// samples' worth of work is done, whoever did it. A claim is made BEFORE the chunk is
// computed, so nothing computed is ever thrown away and the step's count is exactly B (fewer
// only when the data runs out).
//
// The job's pool is one 64-bit counter on rank 0 (transport/rma_pool.hpp, MPI one-sided atomics);
// the simulator's and the tests' is CounterPool below.
#pragma once

#include <algorithm>
#include <cstdint>

namespace antdt::agent {

class StepPool {
 public:
  virtual ~StepPool() = default;
  // Claims up to `want` (>= 1) of this step's `global_batch` samples. Returns how many it got
  // (0: all B are claimed) and sets `claimed_before` to what had been claimed before it.
  virtual std::int64_t claim(std::int64_t want, std::int64_t global_batch, std::int64_t& claimed_before) = 0;
  // How many samples of this step have been claimed so far, by every rank.
  [[nodiscard]] virtual std::int64_t claimed() = 0;
};

// A pool in one address space: the simulator's and the tests'. reset() between steps.
class CounterPool final : public StepPool {
 public:
  std::int64_t claim(std::int64_t want, std::int64_t global_batch, std::int64_t& claimed_before) override {
    claimed_before = claimed_;
    claimed_ += want;
    return std::clamp<std::int64_t>(global_batch - claimed_before, 0, want);
  }
  [[nodiscard]] std::int64_t claimed() override { return claimed_; }
  void reset() noexcept { claimed_ = 0; }

 private:
  std::int64_t claimed_ = 0;
};

}  // namespace antdt::agent
