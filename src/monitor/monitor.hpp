// Monitor: per-rank windowed robust statistics of the step stats that rank 0 gathers.
// Pure C++ (no MPI, no clock): the Controller owns one on rank 0 and feeds it once per step;
// the simulator and the tests feed it synthetic histories. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "antdt/plan.hpp"
#include "core/step_record.hpp"

namespace antdt {

// Summary of one rank's window, computed on demand by Monitor::summary (O(window)). The
// statistics the Controller reads every step (throughput, last throughput, data wait) have
// O(1) getters of their own, kept exact incrementally.
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

// One rank's compute model, t(b) = fixed_seconds + b / throughput (docs/controller.md, "Cost
// model"): affine in the batch, fitted from the (batch, compute time) pairs the rank has run.
//  - intercept_samples phi = fixed_seconds * throughput: the fixed part in samples. It comes
//    from robust fits made when the window holds two batch levels (twice after a plan
//    change), and is held between fits; 0 (plain proportional) until two fits agree on a
//    significant one. At most the largest batch it was fitted on (half of that step).
//    phi > 0: fixed per-step costs (the GEMMs grow more efficient with the batch); phi < 0: the
//    cost per sample grows with the batch (caches).
//  - throughput: the window median of (b_k + phi) / t_k, so a rank that slows down for good
//    moves it within half a window, whatever its batch.
struct RankComputeModel {
  double fixed_seconds = 0.0;
  double throughput = 0.0;  // samples/s of the marginal sample; 0 without timing
  double intercept_samples = 0.0;
  int fits = 0;  // fits behind the intercept (at most kFitsKept are combined)
  [[nodiscard]] double seconds(std::int64_t batch) const noexcept;  // 0 for batch 0; inf without timing
};

class Monitor {
 public:
  // Fits combined into a rank's intercept (their median, missing ones as 0): one noisy fit
  // cannot swing it.
  static constexpr int kFitsKept = 3;
  // The longest window (steps): state is world x window entries, allocated up front.
  static constexpr int kMaxWindow = 1 << 16;

  // world_size >= 1, window in [1, kMaxWindow] (UsageError otherwise).
  explicit Monitor(int world_size, int window = 20);

  // Adds the stats of `step` (one entry per rank, in rank order). Steps must increase
  // strictly; UsageError on a wrong count or a step that is not after the last one.
  // O(world x window) in the worst case, O(world) when the ranks' values repeat; the fit of a
  // rank's compute model, O(window log window), runs once per plan change of that rank.
  void record(std::int64_t step, std::span<const RankStepStats> stats);

  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  [[nodiscard]] int window() const noexcept { return window_; }
  [[nodiscard]] std::int64_t steps_recorded() const noexcept { return steps_recorded_; }
  [[nodiscard]] std::int64_t last_step() const noexcept { return last_step_; }  // -1 before any
  [[nodiscard]] int entries() const noexcept { return filled_; }                // steps in the window

  // O(window): the whole summary of one rank's window.
  [[nodiscard]] RankWindowSummary summary(int rank) const;
  // O(1):
  [[nodiscard]] bool has_throughput(int rank) const { return timed_count_[checked(rank)] > 0; }
  [[nodiscard]] double throughput(int rank) const { return x_median_[checked(rank)]; }
  [[nodiscard]] double last_throughput(int rank) const { return last_x_[checked(rank)]; }
  [[nodiscard]] double data_wait_seconds(int rank) const { return wait_median_[checked(rank)]; }
  // O(window):
  [[nodiscard]] double spread(int rank) const { return summary(rank).spread; }
  [[nodiscard]] double trend(int rank) const { return summary(rank).trend; }
  [[nodiscard]] double reduce_seconds(int rank) const { return summary(rank).reduce_seconds; }
  [[nodiscard]] double idle_seconds(int rank) const { return summary(rank).idle_seconds; }
  [[nodiscard]] std::vector<double> throughputs() const { return x_median_; }  // per rank
  // What rank measured `age` steps ago (0: the latest), for age < entries(). O(1).
  [[nodiscard]] const RankStepStats& recent(int rank, int age = 0) const;
  // The highest per-step throughput among rank's last `steps` recorded steps (untimed steps
  // count as 0): the rank has been at or below it in every one of them. 0 with fewer steps.
  [[nodiscard]] double recent_peak(int rank, int steps) const;
  [[nodiscard]] std::vector<double> data_wait_seconds() const { return wait_median_; }  // per rank
  // Median over ranks of the per-rank window throughputs (ranks without timing ignored). O(1).
  [[nodiscard]] double median_throughput() const noexcept { return median_throughput_; }

  // The compute model of a rank (see RankComputeModel). O(1).
  [[nodiscard]] RankComputeModel compute_model(int rank) const;
  // The median (b_k + phi) / t_k of the timed steps among the last `steps` (0 with fewer
  // steps or none timed): the model's throughput lately, O(steps).
  [[nodiscard]] double model_recent_median(int rank, int steps) const;
  // The best (b_k + phi) / t_k of the last `steps` steps (recent_peak in the model's terms).
  [[nodiscard]] double model_recent_peak(int rank, int steps) const;

  // Measured step time of one step: max_i(data_wait_i + compute_i) + min_i(reduce_i) (the
  // slowest rank waits least in the reduction, so its reduce time is the communication).
  [[nodiscard]] double last_step_seconds() const noexcept { return last_step_seconds_; }
  [[nodiscard]] double step_seconds() const noexcept { return median_step_seconds_; }  // window median
  // The median measured step time of the last `steps` recorded steps (0 with fewer).
  [[nodiscard]] double recent_step_seconds(int steps) const;
  // Window median of the measured all-reduce, min_i reduce_i (0 before any step).
  [[nodiscard]] double allreduce_seconds() const noexcept { return median_allreduce_seconds_; }
  // The latest step's max_i(data_wait_i + compute_i): the part of the step that the split changes.
  [[nodiscard]] double last_compute_seconds() const noexcept { return last_compute_seconds_; }
  // Window median of 1 - mean_i t_i / max_i t_i with t_i = data_wait_i + compute_i.
  [[nodiscard]] double idle_fraction() const noexcept { return median_idle_fraction_; }

  // Checkpoint form (see src/core/bytes.hpp); restore throws CheckpointError on bad bytes.
  [[nodiscard]] std::vector<std::byte> serialize() const;
  [[nodiscard]] static Monitor restore(std::span<const std::byte> bytes);

 private:
  [[nodiscard]] std::size_t checked(int rank) const {
    if (static_cast<unsigned>(rank) >= static_cast<unsigned>(world_size_)) out_of_range(rank);
    return static_cast<std::size_t>(rank);
  }
  [[noreturn]] void out_of_range(int rank) const;
  // age 0: the newest entry (no division: this runs for every rank at every step).
  [[nodiscard]] std::size_t slot_of(int age) const noexcept {
    const int slot = next_slot_ - 1 - age;
    return static_cast<std::size_t>(slot < 0 ? slot + window_ : slot);
  }
  // The ring is slot-major: one step's entries of all ranks are contiguous, so a record
  // writes (and reads the entries it replaces) in one sequential sweep instead of a cache
  // miss per rank.
  [[nodiscard]] std::size_t cell_of(std::size_t slot, std::size_t rank) const noexcept {
    return slot * static_cast<std::size_t>(world_size_) + rank;
  }
  [[nodiscard]] const RankStepStats& entry(std::size_t rank, int age) const noexcept {
    return ring_[cell_of(slot_of(age), rank)];
  }
  void add_entry(std::size_t rank, const RankStepStats& s);
  void refit(std::size_t rank);
  void rebuild_model_window(std::size_t rank);
  void summarise_steps();
  void rebuild();  // every derived structure from the ring (restore)

  int world_size_;
  int window_;
  std::int64_t steps_recorded_ = 0;
  std::int64_t last_step_ = -1;
  // The ring of the last `window_` entries of every rank: entry(r, age) at
  // ring_[slot_of(age) * world_size_ + r]. Every record adds one entry to every rank, so all ranks
  // share one fill count and one write position.
  int filled_ = 0;
  int next_slot_ = 0;
  std::vector<RankStepStats> ring_;
  std::vector<double> x_ring_;  // the same ring of per-step throughputs, compact for recent_peak
  // Per rank, sorted ascending, the window's timed throughputs and data waits (window_ slots
  // each) and their medians: exact, kept by one removal and one insertion per step.
  std::vector<double> x_sorted_, wait_sorted_;
  std::vector<int> timed_count_;
  std::vector<double> x_median_, wait_median_, last_x_;
  // The compute model: intercept fits (kFitsKept per rank, oldest first), the intercept in
  // force, and for ranks with a nonzero intercept the sorted window of (b + phi) / t.
  std::vector<double> fits_;
  std::vector<std::uint8_t> fit_count_;
  std::vector<double> phi_;
  std::vector<double> model_sorted_;
  std::vector<double> model_median_;
  std::vector<int> model_count_;
  std::vector<int> level_run_;  // steps the rank's batch has been the same, within the window
  std::vector<std::int64_t> last_samples_;
  double median_throughput_ = 0.0;
  // Per-step series, oldest first.
  std::vector<double> step_time_;
  std::vector<double> idle_fraction_;
  std::vector<double> allreduce_;
  double last_step_seconds_ = 0.0;
  double last_compute_seconds_ = 0.0;
  double median_step_seconds_ = 0.0;
  double median_idle_fraction_ = 0.0;
  double median_allreduce_seconds_ = 0.0;
  std::vector<double> scratch_;
};

}  // namespace antdt
