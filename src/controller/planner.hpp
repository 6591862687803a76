// Cost model and planner (after PaddlePaddle's adaptive training, arXiv 2112.02752): predict
// a step's time from per-rank throughputs and an alpha-beta allreduce, and choose the split
// of a fixed global batch with the lowest predicted time. Pure functions: no MPI, no clock.
// Rank 0 (Controller, Session) calls them; any rank may.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "antdt/options.hpp"
#include "antdt/plan.hpp"
#include "core/step_record.hpp"

namespace antdt {

// Predicted step time = max_i (a_i + b_i / x_i) + allreduce(p), where x_i is rank i's compute
// throughput (samples/s), a_i its fixed per-step seconds (its data wait plus the fixed part of
// its fitted compute model, which may be negative: Monitor::compute_model), b_i its batch,
// and allreduce(p) = alpha + 2(p-1)/p * bytes * beta (ring allreduce; 0 when p == 1).
// Waiting of the faster ranks for the slowest is the "bubble" the planner minimises.
class CostModel {
 public:
  CostModel() = default;
  explicit CostModel(CostModelParams params) : params_(params) {}

  [[nodiscard]] const CostModelParams& params() const noexcept { return params_; }
  [[nodiscard]] double allreduce_seconds(int p) const noexcept;
  // a + b / x for one rank (never below 0: a fitted fixed part a may be negative); a rank with
  // b == 0 costs nothing, b > 0 with x <= 0 is infinite.
  [[nodiscard]] static double rank_compute_seconds(std::int64_t b, double x, double overhead) noexcept;
  // Per-rank predicted compute (+overhead) seconds of `plan`. `overhead` may be empty (all 0).
  // Throws UsageError when x (or a non-empty overhead) does not have one entry per rank.
  [[nodiscard]] std::vector<double> predict_rank_seconds(const Plan& plan, std::span<const double> x,
                                                         std::span<const double> overhead = {}) const;
  // max_i (a_i + b_i / x_i): the part of the step that the split changes.
  [[nodiscard]] double predict_compute_seconds(const Plan& plan, std::span<const double> x,
                                               std::span<const double> overhead = {}) const;
  // predict_compute_seconds + the all-reduce: `allreduce` seconds when >= 0 (a measured one),
  // else the alpha-beta model's allreduce_seconds(p).
  [[nodiscard]] double predict_step_seconds(const Plan& plan, std::span<const double> x,
                                            std::span<const double> overhead = {}, double allreduce = -1.0) const;

 private:
  CostModelParams params_{};
};

// The split of `global_batch` over ranks with the lowest predicted max_i(a_i + b_i/x_i):
// continuous water-filling (b_i = (T - a_i) x_i; with no overhead simply b_i = B x_i / sum x),
// rounded by largest remainder (ties to the lower rank) so sum b_i == B exactly, every
// b_i >= 1 when B >= world size, then improved by moving single samples off the slowest rank
// while that lowers the predicted max (the result is the integer optimum). caps are the
// per-rank micro-batch caps m_i (one value for all ranks, or one per rank); accumulation
// k_i = ceil(b_i / m_i). Deterministic; O(n log n + moves log n). Throws UsageError on B < 1,
// empty x, x_i not finite or <= 0, a non-finite overhead, or mismatched sizes.
[[nodiscard]] Plan plan_split(std::int64_t global_batch, std::span<const double> x, std::span<const std::int64_t> caps,
                              std::int64_t effective_step, std::span<const double> overhead = {});

// The lowest predicted max_i(a_i + b_i/x_i) of any split, integer or not: the water-filling
// of plan_split's first step, O(n) per pinning round. No integer plan beats it, so a policy
// can test whether any change could pay before it builds one.
[[nodiscard]] double continuous_split_seconds(std::int64_t global_batch, std::span<const double> x,
                                              std::span<const double> overhead = {});

// The same two over the ranks not in `sitting` (ascending rank ids): those get b_i == 0 and
// the plan lists them as sitting out (Plan::sitting). x and overhead hold every rank's entry;
// those of the sitting ranks are not read.
[[nodiscard]] Plan plan_split_without(std::int64_t global_batch, std::span<const double> x,
                                      std::span<const std::int64_t> caps, std::int64_t effective_step,
                                      std::span<const double> overhead, std::span<const std::int32_t> sitting);
[[nodiscard]] double continuous_split_seconds_without(std::int64_t global_batch, std::span<const double> x,
                                                      std::span<const double> overhead,
                                                      std::span<const std::int32_t> sitting);

// Rough relative training throughput of a GPU generation, A100 (sm_80) = 1.0. A name match
// ("H200", "L40", "T4"...) wins over the compute capability (90 for sm_90). Returns 0 for
// unknown devices and the host. These are priors for the first split only, never a
// substitute for measurement: docs/controller.md lists the numbers and their basis.
[[nodiscard]] double gpu_relative_throughput(int compute_capability, std::string_view name = {}) noexcept;

// Throughput (samples/s) from a startup probe: the median over the probe's micro-steps of
// samples / compute_seconds, ignoring entries with no samples or no time; 0 if none usable.
[[nodiscard]] double probe_throughput(std::span<const RankStepStats> probe) noexcept;

// The first plan of a job. probe_x[i] is rank i's probed throughput (0 = not probed).
// priors[i] (optional; e.g. gpu_relative_throughput) fill in unprobed ranks, scaled to
// samples/s by the median probe/prior ratio of ranks that have both; with no probe at all
// the priors alone give the split; a rank with neither gets the median of the others, and
// with no information at all the split is equal. The reason names what was used.
[[nodiscard]] Plan initial_plan(std::int64_t global_batch, std::span<const double> probe_x,
                                std::span<const std::int64_t> caps, std::span<const double> priors = {},
                                std::int64_t effective_step = 0);

}  // namespace antdt
