// Private: backup workers on MPI, "sitting out" (docs/nd.md, "Sitting out"). Pure: no MPI, no
// clock; the Controller runs it after every step, before the policy.
//
// A rank that is away (another process holds its core for longer than a step) or that costs
// more than it gives (its share of the reduction outweighs its samples) makes every step wait
// for it, and no split of the samples helps: even one sample keeps it in the reduction. Such a
// rank sits out: the next plan gives it no samples and lists it in Plan::sitting, and the
// others reduce without it. The same samples form each step, so the maths does not change.
//
// What it sees. Every rank leaves the step's reduction at about the same time, so the rank
// that arrived last is the one with the shortest reduce time, and it arrived later than the
// next-latest by the difference of their reduce times: how long the step waited for it. Part
// of that the cost model explains (a slower device given more samples than its speed allows);
// the rest is its absence, wherever it was held: in its compute, its data, its update or its
// control round. delay_i is the mean of that unexplained wait over the rank's last window of
// steps (since it last joined), less the consecutive quarter of them that adds up to most: a
// rank away for a few long steps in a row, again and again (a co-tenant's time slices), costs
// what its waits add up to, and a transient of up to a quarter of the window (which pooled
// steps absorb) never makes a rank sit out.
//
// When it acts. For each rank i but rank 0 (which hosts the coordinator), with the cost model:
//   with_i    = the predicted step of the plan in force (or of a rebalance) + delay_i, or the
//               steps' measured spans since it joined (their mean less the worst consecutive
//               quarter) where that is less: pooled steps absorb part of an absence
//   without_i = the best continuous split over the others + the all-reduce of one rank fewer
// and the gain (with_i - without_i) / with_i. When the best gain clears min_gain for
// `persistence` consecutive steps, and fewer than backup_workers ranks sit out, that rank
// sits out from the next plan. The Controller keeps the step mode (plain or pooled) of the plan in
// force: that is the policy's choice.
//
// Rejoining. A rank that sits out is not timed, so it rejoins for a trial after a probe
// interval, with the share of a rank that is back (at the others' median speed), but at most
// what its last speed computes in one step without it: a rank that is back can show it, and one
// still held back costs about a step more per trial step. The probe interval is max(window,
// 2^level x options.rejoin_after seconds of steps at the median step time). A rank that has to
// sit out again before it has been in for as long as its interval doubles its interval (level,
// at most kMaxLevel: 8x rejoin_after); one that stays in that long resets it. So a rank whose
// co-tenant or quota went is back within about rejoin_after x 2^kMaxLevel plus a window of
// steps.
//
// A trial is judged as measured, model-free: each step's span is the longest a rank spent from
// its start to the end of the reduction (the rank that arrived first waited there for the last,
// wherever that one was held). From the third step of a trial to the end of its first window,
// once the mean span of its steps after the first (which carries the regroup, paid once)
// exceeds the median span of the steps without the rank by more than min_gain, it sits out
// again. (The cost model alone would keep a rank that is away: it reads it as slow and offers it
// fewer samples.) Two steps of the model's bar decide a trial too: it is a measurement made on
// purpose.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "antdt/plan.hpp"
#include "core/step_record.hpp"

namespace antdt {

struct ControllerContext;

namespace detail {

class SitOut {
 public:
  static constexpr int kMaxLevel = 3;

  // `plan`: the plan in force at the step of `stats`; x and fixed: the cost model's inputs
  // (every rank's, sitting ranks' unused).
  void observe(std::int64_t step, std::span<const RankStepStats> stats, const Plan& plan, std::span<const double> x,
               std::span<const double> fixed, int window);
  // The plan that makes a rank sit out or rejoin, or nothing. `backup_workers`: how many may
  // sit out at once (0: none).
  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& ctx, std::span<const double> x,
                                           std::span<const double> fixed, double allreduce, int backup_workers);

  // Counts over the run (restored with it): sit-outs and rejoins decided.
  [[nodiscard]] std::int64_t sit_outs() const noexcept { return sit_outs_; }
  [[nodiscard]] std::int64_t rejoins() const noexcept { return rejoins_; }
  [[nodiscard]] double delay_seconds(int rank) const;

  [[nodiscard]] std::vector<std::byte> save() const;
  void load(std::span<const std::byte> bytes, int world);

 private:
  void resize(std::size_t n);
  [[nodiscard]] std::int64_t probe_steps(const ControllerContext& ctx, std::size_t rank) const;
  // The speed a trial's split gives `rank` (see "Rejoining" above).
  [[nodiscard]] double trial_speed(std::span<const double> x, const std::vector<std::int32_t>& sitting,
                                   std::size_t rank, std::int64_t batch) const;

  [[nodiscard]] double trimmed_wait(std::size_t rank) const;
  [[nodiscard]] double trimmed_span(std::int64_t steps) const;
  [[nodiscard]] double median_span() const;
  void sat_out(std::size_t rank, std::int64_t step, double x);

  int window_ = 0;                       // entries per rank in waits_
  std::vector<double> waits_;            // each rank's last window_ unexplained waits (a ring)
  std::vector<std::int64_t> timed_;      // steps observed since the rank (re)joined
  std::vector<std::int32_t> positive_;   // entries > 0 in its ring (the median is 0 below half)
  std::vector<std::int64_t> sat_at_;     // the step its last sit-out was decided; -1: never
  std::vector<std::int64_t> joined_at_;  // the step its last rejoin was decided; -1: never
  std::vector<std::int32_t> level_;      // its probe interval's doubling
  std::vector<double> x_at_sit_;         // its throughput when it sat out (its trial's share)
  std::vector<double> spans_;            // the last window_ steps' spans (a ring)
  std::int64_t spans_seen_ = 0;
  std::vector<double> trial_base_;  // the median span without the rank when its trial began
  std::vector<double> trial_sum_;   // the spans of its trial's steps (its first window)
  std::int32_t candidate_ = -1;     // the rank the gain streak is about
  std::int32_t streak_ = 0;
  std::int64_t sit_outs_ = 0, rejoins_ = 0;
};

}  // namespace detail
}  // namespace antdt
