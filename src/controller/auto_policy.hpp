// Private: the auto policy (docs/controller.md, "auto"): what the Monitor sees, mapped to an
// action step by step, so that a user never has to know whether the cluster is dedicated.
//
//   deterministic straggler (slow from the start: a slower device) -> rebalance, as dd does;
//     never restarted (it is as slow anywhere);
//   persistent straggler (fine, then slow for `persistence` steps: contention) -> rebalance,
//     and kill-restart without its node when the predicted gain beats the measured restart
//     cost AND the model's measured error (Controller::consider_restart, accept_restart);
//   transient straggler (slow for fewer steps) -> pooled steps while the transients cost more
//     than pooling does, plain steps otherwise (dd's medians ignore them);
//   leader (faster than the median by 1 / straggler_ratio) -> rebalanced too: the split gives
//     it work in proportion to its speed; nothing else is right for a fast rank;
//   normal -> nothing.
//
// The step mode is a plan-level decision (Plan::pooled) that every rank applies at the plan's
// effective step. A run starts pooled: pooled steps absorb whatever comes (an unbalanced first
// split, transients) while nothing is measured yet. At every step the policy predicts the mean
// step time of the last `window` steps in either mode, from what every rank did in each of them
// (its samples and compute time, x_ik = samples / compute, in the Monitor's window):
//   a plain step k with the current split b_i takes  max_i b_i / x_ik;
//   a pooled step k takes                            (1 + o) B / sum_i x_ik,
// where o is the pooled step's own overhead (its time over B / sum_i x_ik, minus 1: the claims
// and the last chunks; measured in pooled steps) and speeds convert between the modes by e, the
// ranks' speed in pooled steps over plain ones (small chunks cost GEMM efficiency on real
// compute; measured across a switch, 1 until then). A switch must be predicted to shorten the
// mean step by more than the required gain: the largest of min_pool_gain, the decision model's
// measured error (the median relative error of each recorded step's own mode's formula against
// its measured time), twice the standard error of the predicted gain, and the damping left by an
// earlier switch the same way that did not deliver. It must hold for 2 consecutive steps to
// pool and for `persistence` to stop pooling, and min_interval steps must have passed since the
// last switch: a wrong switch to pooled steps costs o for a few steps, a late one costs every
// transient in full, so pooling is bought early and given up late (ski rental). Every switch is
// checked half a window after it took effect, with the parameters measured since.
//
// e cannot be measured without plain steps, and on real compute it is most of what pooling
// costs: pooled steps' slower chunks also slow the plain steps predicted from them. So once, after
// a window of pooled steps, auto tries plain steps (a trial, logged as one) unless they are
// predicted more than kTrialLoss slower; it then decides with e measured.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "controller/dd_policy.hpp"
#include "controller/pooling_status.hpp"

namespace antdt::detail {

class AutoPolicy final : public DdPolicy {
 public:
  [[nodiscard]] std::string name() const override { return "auto"; }
  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& ctx) override;
  [[nodiscard]] bool pools() const override { return true; }
  [[nodiscard]] bool starts_pooled() const override { return true; }
  [[nodiscard]] bool switches_pooling() const override { return true; }
  [[nodiscard]] bool restarts() const override { return true; }
  [[nodiscard]] bool accept_restart(const RestartDecision& decision, const ControllerContext& ctx) override;
  [[nodiscard]] PoolingStatus pooling_status() const override;
  [[nodiscard]] std::vector<std::byte> save_state() const override;
  void load_state(std::span<const std::byte> state) override;

  // One recorded step, as the mode decision sees it (what each rank did in it is the Monitor's).
  struct Sample {
    bool pooled = false;
    double seconds = 0.0;  // measured max_i (data wait + compute)
    double samples = 0.0;  // done in the step
    // sum_i x_ik, samples/s: the ranks timed in it at their speed then, the others at their
    // window median then
    double speed_sum = 0.0;

    template <class Self, class F>
    static void fields(Self& m, F&& f) {
      f(m.pooled), f(m.seconds), f(m.samples), f(m.speed_sum);
    }
  };

 private:
  struct Saved;
  // The prediction of switching the mode over the recent steps.
  struct Outlook {
    double plain = 0.0;     // the mean step time with plain steps, seconds
    double pool = 0.0;      // ... with pooled steps
    double gain = 0.0;      // relative drop of the mean step time
    double noise = 0.0;     // twice its standard error
    double error = 0.0;     // the decision model's median relative error
    double required = 0.0;  // the bar
    const char* why = "";   // which term of the bar is the largest
    int steps = 0;
  };

  void observe(const ControllerContext& ctx);
  void measure(const Monitor& monitor);
  void measure_error(const Monitor& monitor);
  // max_i b_i / x_ik of the step `age` steps back, for the split b of `plan`.
  [[nodiscard]] static double plain_seconds(const Monitor& m, const Plan& plan, int age);
  [[nodiscard]] Outlook outlook(const ControllerContext& ctx, bool to_pooled) const;
  [[nodiscard]] double switch_damping_at(const ControllerContext& ctx, bool to_pooled) const;
  void check_switch(const ControllerContext& ctx);

  // A switch as the checkpoint keeps it (PoolingSwitch, listed).
  struct Switch {
    std::int64_t step = -1, effective_step = -1;
    bool pooled = false;
    bool trial = false;  // plain steps to measure e, not a predicted gain
    double predicted_gain = 0.0, required_gain = 0.0, pool_overhead = 0.0, chunk_efficiency = 1.0;

    template <class Self, class F>
    static void fields(Self& m, F&& f) {
      f(m.step), f(m.effective_step), f(m.pooled), f(m.trial), f(m.predicted_gain), f(m.required_gain),
          f(m.pool_overhead), f(m.chunk_efficiency);
    }
  };

  // Everything the decisions depend on, listed once: the policy's checkpoint (with dd's).
  struct State {
    std::vector<Sample> ring;  // the last `window` steps, oldest first
    double overhead = 0.0;     // o
    bool overhead_measured = false;
    double efficiency = 1.0;  // e
    bool efficiency_measured = false;
    double error = 0.0;                     // the decision model's, over the window
    std::int32_t streak = 0;                // consecutive steps the switch has cleared its bar
    std::int64_t last_switch = -1;          // step a switch was decided at
    std::vector<double> damping{0.0, 0.0};  // left by a switch that did not deliver: [to plain, to pooled]
    std::vector<std::int64_t> damping_step{-1, -1};
    bool check_pending = false;  // the last switch is checked at check_step
    std::int64_t check_step = -1;
    std::int64_t pooled_steps = 0, plain_steps = 0;
    std::vector<Switch> switches;

    template <class Self, class F>
    static void fields(Self& m, F&& f) {
      f(m.ring), f(m.overhead), f(m.overhead_measured), f(m.efficiency), f(m.efficiency_measured), f(m.error),
          f(m.streak), f(m.last_switch), f(m.damping), f(m.damping_step), f(m.check_pending), f(m.check_step),
          f(m.pooled_steps), f(m.plain_steps), f(m.switches);
    }
  };

  State st_;
  // Per step of st_.ring: max_i b_i / x_ik for the split of plan version split_version_, in the
  // step's own speeds (not saved: rebuilt from the Monitor after a restore).
  std::vector<double> plain_raw_;
  std::int64_t split_version_ = -1;
  Outlook last_{};
};

}  // namespace antdt::detail
