// Private: the dd policy (AntDT-DD, LB-BSP), which nd and auto build on.
//
// dd: split the global batch to balance each rank's fitted compute model,
// t_i(b) = a_i + b / x_i (Monitor::compute_model; a_i its data wait plus the model's fixed
// part; x_i its recent speed instead when it is clearly fast again, detail::rank_model), and
// switch only when
// all of these hold:
//   - every rank with work has timing in the Monitor window;
//   - the cost model predicts the candidate faster than the current plan by more than the
//     required gain: the largest of min_gain, the model's own measured error (the window
//     median of its relative error on the part of the step a split changes), what the noise
//     of the slowest rank's estimate alone could predict (estimate_noise), the damping
//     left by a change that did not deliver (below) and, once the continuous bound clears
//     those, what the noise of all the ranks' estimates could predict at this world size
//     (estimates_noise: at scale the slowest of n noisy medians is always an outlier);
//   - that has been true for `persistence` consecutive steps. With the estimate above, a
//     slowdown must last about 2 x persistence - 1 steps AND hold half the window (to move the
//     median) before it changes the plan; shorter transients never do;
//   - at least min_interval steps have passed since the last change.
// The gain is first tested against the continuous optimum (continuous_split_seconds, O(n)):
// no integer plan beats it, so most steps never build one (plan_split is O(n log n)).
//
// Every change is checked once it has run for max(persistence, window / 2) steps: the measured
// gain is the drop of the median step time against the steps before the change. A change that
// delivered less than half its predicted gain sets the damping to that predicted gain: the
// next change must promise more (the damping halves every kDampingHalfLife windows).
// The gain streak, the damping and the pending check are the policy's state, in its checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "controller/controller.hpp"

namespace antdt::detail {

class DdPolicy : public PolicyPlugin {
 public:
  [[nodiscard]] std::string name() const override { return "dd"; }

  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& ctx) override;

  [[nodiscard]] std::vector<std::byte> save_state() const override;
  void load_state(std::span<const std::byte> state) override;

 protected:
  // Forgets the measurement of the last change: a switch of the step mode (auto) changes the
  // steps it would compare.
  void forget_pending_check() noexcept { check_.pending = false; }

 private:
  static constexpr double kDampingHalfLife = 5.0;  // windows

  // A change waiting to be measured.
  struct Check {
    bool pending = false;
    std::int64_t due_step = 0;  // the step whose stats complete its measurement
    std::int32_t steps = 0;     // steps under the new plan it is measured over
    double predicted_gain = 0.0;
    double before_seconds = 0.0;  // measured median step time under the plan it replaced

    template <class Self, class F>
    static void fields(Self& m, F&& f) {
      f(m.pending), f(m.due_step), f(m.steps), f(m.predicted_gain), f(m.before_seconds);
    }
  };

  // How much of a predicted gain the noise of the estimates alone could make: the predicted
  // step is the largest of the ranks' predicted times, and the largest of n noisy estimates
  // sits above the truth. The slowest rank's estimate has a relative standard error of
  // 1.2533 x 1.4826 x (MAD / median) / sqrt(timed steps) (a median of its window); noise can
  // put it sqrt(2 ln n) standard errors high, and the gain must clear two more.
  [[nodiscard]] double estimate_noise(const ControllerContext& ctx, double slowest_seconds) const;

  // What the noise of the ranks' window medians alone could predict as a gain: the typical
  // relative deviation of a rank's last step from its window median (their median over the
  // ranks, robust to the few in a transient) gives each median's standard error se, and the
  // largest of n such errors is about sqrt(2 ln n) se; plus 2 se of margin, as for the
  // slowest rank alone. (sqrt(4 ln n), for the noise of the medians the plan in force was
  // balanced on as well, also blocked the changes that refine a first plan made on a few
  // steps: at 10,000 simulated ranks with 5 % jitter 0.897 settled instead of 0.909.) O(n).
  [[nodiscard]] double estimates_noise(const ControllerContext& ctx);

  [[nodiscard]] double damping_at(const ControllerContext& ctx) const;

  // Remembers what the change to `next` must deliver.
  void expect(const ControllerContext& ctx, const Plan& next, double gain);

  // The measurement of the last change. One that delivered less than half its predicted gain
  // leaves its gain as the damping. No revert: the measurement is as noisy as the steps it
  // covers (a transient during it looks like a failed change), and a revert to a plan made for
  // older conditions is itself an unchecked change; the model, fed the new steps, proposes
  // the way back if there is one, and it must then clear the damped bar.
  void check_change(const ControllerContext& ctx);

  struct Saved;  // the checkpointed state

  int gain_streak_ = 0;
  double damping_ = 0.0;            // the required gain a change that did not deliver left behind
  std::int64_t damping_step_ = -1;  // when it was set
  Check check_;
  std::vector<double> x_, fixed_;   // scratch: the cost model's inputs this step
  std::vector<double> deviations_;  // scratch of estimates_noise
};

}  // namespace antdt::detail
