// Monitor: per-rank windowed robust statistics of the step stats that rank 0 gathers.
// Pure C++ (no MPI, no clock): the Controller owns one on rank 0 and feeds it once per step;
// the simulator and the tests feed it synthetic histories. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "antdt/plan.hpp"

namespace antdt {

// Summary of one rank's window, recomputed on every record() so the getters are O(1).
struct RankWindowSummary {
  int entries = 0;               // steps in the window
  int timed_entries = 0;         // steps with samples > 0 and compute_seconds > 0
  double throughput = 0.0;       // median of samples / compute_seconds (samples/s); 0 if none timed
  double spread = 0.0;           // MAD of the per-step throughputs / their median (relative)
  double trend = 0.0;            // (median newer half - median older half) / median; > 0 speeding up
  double last_throughput = 0.0;  // the latest step's samples / compute_seconds; 0 without samples
  double compute_seconds = 0.0;  // medians over the window
  double data_wait_seconds = 0.0;
  double reduce_seconds = 0.0;
  double idle_seconds = 0.0;
};

class Monitor {
 public:
  // world_size >= 1, window >= 1 (UsageError otherwise).
  explicit Monitor(int world_size, int window = 20);

  // Adds the stats of `step` (one entry per rank, in rank order). Steps must increase
  // strictly; UsageError on a wrong count or a step that is not after the last one.
  void record(std::int64_t step, std::span<const RankStepStats> stats);

  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  [[nodiscard]] int window() const noexcept { return window_; }
  [[nodiscard]] std::int64_t steps_recorded() const noexcept { return steps_recorded_; }
  [[nodiscard]] std::int64_t last_step() const noexcept { return last_step_; }  // -1 before any

  [[nodiscard]] const RankWindowSummary& summary(int rank) const;
  [[nodiscard]] bool has_throughput(int rank) const { return summary(rank).timed_entries > 0; }
  [[nodiscard]] double throughput(int rank) const { return summary(rank).throughput; }
  [[nodiscard]] double last_throughput(int rank) const { return summary(rank).last_throughput; }
  [[nodiscard]] double spread(int rank) const { return summary(rank).spread; }
  [[nodiscard]] double trend(int rank) const { return summary(rank).trend; }
  [[nodiscard]] double data_wait_seconds(int rank) const { return summary(rank).data_wait_seconds; }
  [[nodiscard]] double reduce_seconds(int rank) const { return summary(rank).reduce_seconds; }
  [[nodiscard]] double idle_seconds(int rank) const { return summary(rank).idle_seconds; }
  [[nodiscard]] std::vector<double> throughputs() const;  // per rank
  // The highest per-step throughput among rank's last `steps` recorded steps (untimed steps
  // count as 0): the rank has been at or below it in every one of them. 0 with fewer steps.
  [[nodiscard]] double recent_peak(int rank, int steps) const;
  [[nodiscard]] std::vector<double> data_wait_seconds() const;  // per rank (cost-model overhead)
  // Median over ranks of the per-rank window throughputs (ranks without timing ignored).
  [[nodiscard]] double median_throughput() const;

  // Measured step time of one step: max_i(data_wait_i + compute_i) + min_i(reduce_i) (the
  // slowest rank waits least in the reduction, so its reduce time is the communication).
  [[nodiscard]] double last_step_seconds() const noexcept { return last_step_seconds_; }
  [[nodiscard]] double step_seconds() const noexcept { return median_step_seconds_; }  // window median
  // Window median of 1 - mean_i t_i / max_i t_i with t_i = data_wait_i + compute_i.
  [[nodiscard]] double idle_fraction() const noexcept { return median_idle_fraction_; }

  // Checkpoint form (see src/core/bytes.hpp); restore throws CheckpointError on bad bytes.
  [[nodiscard]] std::vector<std::byte> serialize() const;
  [[nodiscard]] static Monitor restore(std::span<const std::byte> bytes);

 private:
  void summarise();

  int world_size_;
  int window_;
  std::int64_t steps_recorded_ = 0;
  std::int64_t last_step_ = -1;
  // The last `window_` steps, oldest first: entries_[rank][k], step_time_[k], idle_fraction_[k].
  std::vector<std::vector<RankStepStats>> entries_;
  std::vector<double> step_time_;
  std::vector<double> idle_fraction_;
  std::vector<RankWindowSummary> summaries_;
  double last_step_seconds_ = 0.0;
  double median_step_seconds_ = 0.0;
  double median_idle_fraction_ = 0.0;
};

}  // namespace antdt
