// The control loop around a policy: record, assess, decide, check, version. Everything the
// decision depends on (monitor windows, streaks, plan history, policy state) is state of
// this object and goes into its checkpoint form, so decisions are a pure function of the
// stats history (invariant 5) and a restored controller continues as if never stopped.
#include "controller/controller.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>

#include "antdt/error.hpp"
#include "controller/model_inputs.hpp"
#include "core/blob_fields.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "monitor/robust_stats.hpp"

namespace antdt {

namespace {

constexpr std::uint32_t kControllerMagic = 0x4c544341;  // "ACTL"
// 2: adds each rank's was-fine flag and the restarts decided. 3: adds the cost model's recent
// prediction errors. 4: plans say whether their steps are pooled, and one field list serves
// both directions; formats 1 to 3 are refused with a clear error. 5: plans list the ranks that
// sit out, and the sit-out's state follows.
constexpr std::uint32_t kControllerFormat = 5;

void validate(const ControllerOptions& o) {
  if (o.window < 1) throw UsageError("controller: window must be at least 1 step, got " + std::to_string(o.window));
  if (o.persistence < 1)
    throw UsageError("controller: persistence must be at least 1 step, got " + std::to_string(o.persistence));
  if (!(o.min_gain >= 0.0)) throw UsageError("controller: min_gain must be >= 0, got " + std::to_string(o.min_gain));
  if (!(o.min_pool_gain >= 0.0 && o.min_pool_gain < 1.0))
    throw UsageError("controller: min_pool_gain must be in [0, 1), got " + std::to_string(o.min_pool_gain));
  if (!(o.rejoin_after > 0.0 && o.rejoin_after <= 1e6))
    throw UsageError("controller: rejoin_after must be in (0, 1e6] seconds, got " + std::to_string(o.rejoin_after));
  if (o.min_interval < 0) throw UsageError("controller: min_interval must be >= 0");
  if (o.warmup_steps < 0) throw UsageError("controller: warmup_steps must be >= 0");
  if (o.plan_lag < 0) throw UsageError("controller: plan_lag must be >= 0");
  if (!(o.straggler_ratio > 0.0 && o.straggler_ratio <= 1.0)) {
    throw UsageError("controller: straggler_ratio must be in (0, 1], got " + std::to_string(o.straggler_ratio));
  }
  if (o.restart.max_restarts < 0 || o.restart.cooldown_steps < 0 || o.restart.window < 0)
    throw UsageError("controller: restart limits, cool-down and window must be >= 0");
}

}  // namespace

Controller::Controller(ControllerOptions options, Plan initial)
    : options_(std::move(options)),
      cost_(options_.cost),
      monitor_(std::max(1, initial.world_size()), std::max(1, options_.window)) {
  validate(options_);
  if (initial.world_size() < 1) throw UsageError("controller: the initial plan has no ranks");
  resolve_options(initial);
  policy_ = make_policy(options_.policy);
  initial.pooled = policy_->starts_pooled();
  if (initial.reason.empty()) initial.reason = "initial";
  history_.push_back(checked(std::move(initial)));
  slow_streak_.assign(static_cast<std::size_t>(plan().world_size()), 0);
  was_fine_.assign(static_cast<std::size_t>(plan().world_size()), 0);
  assessments_.assign(static_cast<std::size_t>(plan().world_size()), RankAssessment{});
}

Controller::Controller(Restored, ControllerOptions options, Monitor monitor)
    : options_(std::move(options)), cost_(options_.cost), monitor_(std::move(monitor)) {}

void Controller::resolve_options(const Plan& reference) {
  const auto n = static_cast<std::size_t>(reference.world_size());
  if (options_.world_size == 0) options_.world_size = reference.world_size();
  if (options_.world_size != reference.world_size()) {
    throw UsageError("controller: options say " + std::to_string(options_.world_size) +
                     " ranks but the initial plan has " + std::to_string(reference.world_size()));
  }
  if (options_.global_batch == 0) options_.global_batch = reference.global_batch;
  if (options_.global_batch != reference.global_batch) {
    throw UsageError("controller: options say global batch " + std::to_string(options_.global_batch) +
                     " but the initial plan has " + std::to_string(reference.global_batch));
  }
  if (options_.caps.empty()) options_.caps = reference.micro_batch_cap;
  if (options_.caps.size() == 1) options_.caps.assign(n, options_.caps.front());
  if (options_.caps.size() != n) {
    throw UsageError("controller: " + std::to_string(options_.caps.size()) + " micro-batch caps for " +
                     std::to_string(n) + " ranks; give one for all ranks or one per rank");
  }
  for (const auto c : options_.caps) {
    if (c < 1) throw UsageError("controller: every micro-batch cap must be at least 1");
  }
}

Plan Controller::checked(Plan p) const {
  const auto n = options_.caps.size();
  const std::string who = "controller (policy " + options_.policy + "): ";
  if (p.batch.size() != n) {
    throw UsageError(who + "plan has " + std::to_string(p.batch.size()) + " ranks, world size is " + std::to_string(n));
  }
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (p.batch[i] < 0) throw UsageError(who + "plan gives rank " + std::to_string(i) + " a negative batch");
    if (p.batch[i] == 0 && options_.global_batch >= static_cast<std::int64_t>(n) && !p.sits_out(static_cast<int>(i))) {
      throw UsageError(who + "plan leaves rank " + std::to_string(i) + " without work although B >= world size");
    }
    sum += p.batch[i];
  }
  if (sum != options_.global_batch) {
    throw UsageError(who + "plan batches sum to " + std::to_string(sum) + ", the global batch is " +
                     std::to_string(options_.global_batch));
  }
  if (p.pooled && !policy_->pools()) throw UsageError(who + "plan pools its steps, but the policy does not pool");
  if (const std::string why = sitting_problem(p); !why.empty()) throw UsageError(who + "plan: " + why);
  p.global_batch = options_.global_batch;
  p.micro_batch_cap = options_.caps;
  update_accumulation(p);
  return p;
}

const Plan& Controller::plan_at(std::int64_t step) const {
  for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
    if (it->effective_step <= step) return *it;
  }
  return history_.front();
}

// Classifies each rank against the cluster reference (median of window-median throughputs).
// O(1) per rank from the Monitor's incremental statistics; the reasons are formatted only when
// someone reads them (format_reasons), not for every rank at every step.
void Controller::assess(std::int64_t step) {
  const double reference = monitor_.median_throughput();
  const double ratio = options_.straggler_ratio;
  const auto& current = plan_at(step);
  assessed_reference_ = reference;
  for (int i = 0; i < monitor_.world_size(); ++i) {
    const auto r = static_cast<std::size_t>(i);
    RankAssessment& a = assessments_[r];
    a.throughput = monitor_.throughput(i);
    a.relative = reference > 0.0 ? a.throughput / reference : 1.0;
    a.last_throughput = monitor_.last_throughput(i);
    a.batch = r < current.batch.size() ? current.batch[r] : 0;
    const bool timed_now = a.last_throughput > 0.0;
    if (timed_now && reference > 0.0) {
      const bool slow = a.last_throughput < ratio * reference;
      slow_streak_[r] = slow ? slow_streak_[r] + 1 : 0;
      if (!slow) was_fine_[r] = 1;
    }
    a.slow_streak = slow_streak_[r];
    a.was_fine = was_fine_[r] != 0;
    if (a.slow_streak >= options_.persistence) {
      // Slow since it was first assessed: a slower device. Fine once, then slow: contention.
      a.kind = a.was_fine ? RankClass::persistent_straggler : RankClass::deterministic_straggler;
    } else if (a.slow_streak > 0) {
      a.kind = RankClass::transient_straggler;
    } else if (reference > 0.0 && a.throughput >= reference / ratio) {
      a.kind = RankClass::leader;
    } else {
      a.kind = RankClass::normal;
    }
  }
  reasons_current_ = false;  // the old reasons stay until format_reasons overwrites them
}

void Controller::format_reasons() const {
  const double reference = assessed_reference_;
  const double ratio = options_.straggler_ratio;
  char buf[320];
  for (RankAssessment& a : assessments_) {
    const bool timed_now = a.last_throughput > 0.0;
    const char* untimed = timed_now ? "" : "no timed samples this step; ";
    switch (a.kind) {
      case RankClass::persistent_straggler:
      case RankClass::deterministic_straggler:
        std::snprintf(buf, sizeof buf,
                      "%sbelow %.3gx the cluster median (%.4g samples/s) for %d consecutive steps (persistence %d)%s; "
                      "window median %.4g samples/s = %.3gx",
                      untimed, ratio, reference, a.slow_streak, options_.persistence,
                      a.was_fine ? " after being fine" : ", since its first assessed step", a.throughput, a.relative);
        break;
      case RankClass::transient_straggler:
        std::snprintf(
            buf, sizeof buf,
            "%sthis step %.4g samples/s < %.3gx the cluster median (%.4g) for %d step(s), fewer than persistence %d",
            untimed, a.last_throughput, ratio, reference, a.slow_streak, options_.persistence);
        break;
      case RankClass::leader:
        std::snprintf(buf, sizeof buf, "%swindow median %.4g samples/s = %.3gx the cluster median, >= 1/%.3g", untimed,
                      a.throughput, a.relative, ratio);
        break;
      case RankClass::normal:
        if (timed_now) {
          std::snprintf(buf, sizeof buf, "window median %.4g samples/s = %.3gx the cluster median", a.throughput,
                        a.relative);
        } else {
          std::snprintf(buf, sizeof buf, "no timed samples this step (batch %lld)", static_cast<long long>(a.batch));
        }
        break;
    }
    a.reason = buf;
  }
  reasons_current_ = true;
}

const std::vector<RankAssessment>& Controller::assessments() const {
  if (!reasons_current_) format_reasons();
  return assessments_;
}

std::pair<double, double> Controller::predict(const Plan& p) const {
  PredictionCache& c = prediction_;
  if (c.recorded == monitor_.steps_recorded() && c.plan == &p && c.version == p.version && c.plans == history_.size())
    return c.value;
  const std::pair<double, double> value = predict_now(p);
  c = PredictionCache{monitor_.steps_recorded(), &p, p.version, history_.size(), value};
  return value;
}

std::pair<double, double> Controller::predict_now(const Plan& p) const {
  const double fill = monitor_.median_throughput();
  if (!(fill > 0.0)) return {0.0, 0.0};
  const int n = monitor_.world_size();
  if (p.world_size() != n) throw UsageError("controller: the plan to predict is not for this world");
  double compute = 0.0;  // max_i (a_i + b_i / x_i), in one pass: this runs for every rank at every step
  for (int i = 0; i < n; ++i) {
    const detail::RankModel m = detail::rank_model(monitor_, i);
    const bool timed = m.throughput > 0.0;
    compute = std::max(
        compute, CostModel::rank_compute_seconds(p.batch[static_cast<std::size_t>(i)], timed ? m.throughput : fill,
                                                 timed ? m.fixed : monitor_.data_wait_seconds(i)));
  }
  const double allreduce = detail::measured_allreduce(monitor_);
  return {compute, compute + (allreduce >= 0.0 ? allreduce : cost_.allreduce_seconds(p.world_size()))};
}

double Controller::model_error() const { return detail::median(errors_); }

// Every rank's cost-model inputs, as dd reads them (a rank without timing at the median speed).
void Controller::model_inputs(const Plan& p) {
  const auto n = static_cast<std::size_t>(monitor_.world_size());
  x_.assign(n, 0.0);
  fixed_.assign(n, 0.0);
  const double fill = monitor_.median_throughput();
  for (std::size_t r = 0; r < n; ++r) {
    const int i = static_cast<int>(r);
    if (p.sits_out(i) || !monitor_.has_throughput(i)) {
      x_[r] = fill;
      fixed_[r] = p.sits_out(i) ? 0.0 : monitor_.data_wait_seconds(i);
      continue;
    }
    const detail::RankModel m = detail::rank_model(monitor_, i, options_.persistence);
    x_[r] = m.throughput > 0.0 ? m.throughput : fill;
    fixed_[r] = m.fixed;
  }
}

std::optional<Plan> Controller::on_step(std::int64_t step, std::span<const RankStepStats> stats,
                                        const StepOutlook& outlook) {
  restart_.reset();
  if (static_cast<int>(stats.size()) != plan().world_size()) {
    throw UsageError("controller: got stats for " + std::to_string(stats.size()) + " ranks, world size is " +
                     std::to_string(plan().world_size()));
  }
  if (step <= last_step_) {
    throw UsageError("controller: step " + std::to_string(step) + " is not after the last step " +
                     std::to_string(last_step_));
  }
  last_step_ = step;
  last_error_ = -1.0;
  // Warm-up steps (allocation, first-touch, library initialisation) would only pollute the window.
  if (step < options_.warmup_steps) return std::nullopt;
  // The model's prediction for this step, made before its stats are seen, then its error.
  const auto [predicted_compute, predicted_step] = predict(plan_at(step));
  monitor_.record(step, stats);
  if (predicted_step > 0.0 && monitor_.last_step_seconds() > 0.0)
    last_error_ = std::abs(predicted_step - monitor_.last_step_seconds()) / monitor_.last_step_seconds();
  // The model's error on plain steps only: it predicts each rank computing its share, which a
  // pooled step does not do (its ranks claim chunks until the batch is done). Its error there
  // measured the pooling, not the model, and it became the bar of every rebalance: nd kept equal
  // shares with one rank at 0.02 of the other's speed (0.31 of the ideal).
  if (!plan_at(step).pooled && predicted_compute > 0.0 && monitor_.last_compute_seconds() > 0.0) {
    errors_.push_back(std::abs(predicted_compute - monitor_.last_compute_seconds()) / monitor_.last_compute_seconds());
    if (static_cast<int>(errors_.size()) > options_.window) errors_.erase(errors_.begin());
  }
  assess(step);
  const ControllerContext context{
      step, plan(), monitor_, assessments_, options_, cost_, last_change_step_, model_error(), plan_at(step).pooled};
  if (policy_->restarts()) consider_restart(context, outlook);
  std::optional<Plan> decided;
  if (policy_->rebalances() && (options_.backup_workers > 0 || !plan().sitting.empty())) {
    model_inputs(plan());
    sit_out_.observe(step, stats, plan_at(step), x_, fixed_, options_.window);
    if (history_.back().effective_step <= step)
      decided = sit_out_.decide(context, x_, fixed_, detail::measured_allreduce(monitor_), options_.backup_workers);
    if (decided) decided->pooled = plan().pooled;  // who takes part is the sit-out's; the step mode the policy's
  }
  if (!decided) decided = policy_->decide(context);
  // One plan waits at a time: with plan_lag >= 1 a plan issued at step t - 1 is not yet in force
  // at step t, and every rank holds one pending plan (PlanSchedule); a policy that wants another
  // change at once proposes it again at the next step.
  if (!decided || history_.back().effective_step > step) return std::nullopt;
  if (!policy_->switches_pooling()) decided->pooled = plan().pooled;
  Plan next = checked(std::move(*decided));
  if (next.batch == plan().batch && next.pooled == plan().pooled && next.sitting == plan().sitting) return std::nullopt;
  next.effective_step = context.effective_step();
  next.version = plan().version + 1;
  if (next.reason.empty()) next.reason = "policy " + policy_->name();
  history_.push_back(std::move(next));
  last_change_step_ = step;
  return history_.back();
}

// Kill-restart (docs/nd.md): only for ranks that were fine and then stayed slow for the restart
// window (lasting contention; a slower device stays slow wherever it runs), only where the
// gain of finishing the remaining work at the throughput predicted after the restart beats the
// measured cost of the restart, and never past the limit or inside the cool-down.
void Controller::consider_restart(const ControllerContext& context, const StepOutlook& outlook) {
  const std::int64_t step = context.step;
  const RestartOptions& ro = options_.restart;
  if (restarts_decided_ >= ro.max_restarts) return;
  const std::int64_t cooldown = ro.cooldown_steps > 0 ? ro.cooldown_steps : options_.window;
  if (last_restart_step_ >= 0 && step - last_restart_step_ < cooldown) return;
  if (outlook.remaining_samples <= 0 || !(outlook.restart_seconds > 0.0)) return;  // nothing measured to weigh
  const int world = monitor_.world_size();
  const int window = ro.window > 0 ? ro.window : options_.window;
  const auto node_of = [&](int r) {
    return options_.nodes.size() == static_cast<std::size_t>(world) ? options_.nodes[static_cast<std::size_t>(r)]
                                                                    : std::to_string(r);
  };
  std::vector<std::string> nodes;
  for (int r = 0; r < world; ++r) {
    const auto& a = assessments_[static_cast<std::size_t>(r)];
    if (a.kind == RankClass::persistent_straggler && a.slow_streak >= window &&
        std::find(nodes.begin(), nodes.end(), node_of(r)) == nodes.end())
      nodes.push_back(node_of(r));
  }
  const double step_seconds = monitor_.step_seconds();
  const double fill = monitor_.median_throughput();
  if (nodes.empty() || !(step_seconds > 0.0) || !(fill > 0.0)) return;
  RestartDecision d;
  double sum_now = 0.0, sum_after = 0.0;
  for (int r = 0; r < world; ++r) {
    const double x = monitor_.has_throughput(r) ? monitor_.throughput(r) : fill;
    sum_now += x;
    if (std::find(nodes.begin(), nodes.end(), node_of(r)) == nodes.end()) {
      sum_after += x;
    } else {
      d.ranks.push_back(r);
      if (ro.replaces) sum_after += fill;  // the replacement node runs at the median speed
    }
  }
  d.step = step;
  d.x_now = static_cast<double>(options_.global_batch) / step_seconds;
  d.x_after = d.x_now * sum_after / sum_now;
  d.remaining_samples = outlook.remaining_samples;
  d.cost_seconds = outlook.restart_seconds;
  if (!(d.x_after > d.x_now)) return;
  d.gain_seconds = static_cast<double>(d.remaining_samples) * (1.0 / d.x_now - 1.0 / d.x_after);
  if (!(d.gain_seconds > d.cost_seconds)) return;
  if (options_.nodes.size() == static_cast<std::size_t>(world)) d.nodes = nodes;
  if (!policy_->accept_restart(d, context)) return;
  std::ostringstream why;
  why << std::setprecision(4) << "kill-restart without ";
  for (std::size_t i = 0; i < nodes.size(); ++i)
    why << (i ? ", " : "") << (d.nodes.empty() ? "rank " : "node ") << nodes[i];
  why << " (persistent straggler for >= " << window << " steps): predicted " << d.x_now << " -> " << d.x_after
      << " samples/s over " << d.remaining_samples << " remaining samples gains " << d.gain_seconds
      << " s > measured restart cost " << d.cost_seconds << " s; restart " << restarts_decided_ + 1 << " of at most "
      << ro.max_restarts;
  d.reason = why.str();
  restart_ = std::move(d);
  ++restarts_decided_;
  last_restart_step_ = step;
}

const Plan& Controller::install_plan(Plan p, std::int64_t decided_at_step) {
  p.pooled = plan().pooled;  // whether steps are pooled is the policy's decision
  Plan next = checked(std::move(p));
  next.version = plan().version + 1;
  if (next.reason.empty()) next.reason = "installed";
  history_.push_back(std::move(next));
  last_change_step_ = decided_at_step;
  return history_.back();
}

double Controller::predicted_step_seconds() const { return predict(plan_at(last_step_ + 1)).second; }

namespace {

// What a Controller saves, listed once for serialize and restore (core/blob_fields.hpp).
struct SavedController {
  std::int32_t world = 0;
  std::string policy;
  std::int64_t global_batch = 0;
  std::vector<std::int64_t> caps;
  std::vector<Plan> history;
  std::vector<std::byte> monitor;  // Monitor::serialize
  std::vector<int> slow_streak;
  std::int64_t last_change = -1, last_step = -1;
  std::vector<std::byte> policy_state;  // PolicyPlugin::save_state
  std::vector<std::uint8_t> was_fine;
  std::int32_t restarts = 0;
  std::int64_t last_restart = -1;
  std::vector<double> errors;      // the cost model's recent prediction errors, oldest first
  std::vector<std::byte> sit_out;  // detail::SitOut::save

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.world), f(m.policy), f(m.global_batch), f(m.caps), f(m.history), f(m.monitor), f(m.slow_streak),
        f(m.last_change), f(m.last_step), f(m.policy_state), f(m.was_fine), f(m.restarts), f(m.last_restart),
        f(m.errors), f(m.sit_out);
  }
};

}  // namespace

std::vector<std::byte> Controller::serialize() const {
  SavedController saved;
  saved.world = plan().world_size();
  saved.policy = options_.policy;
  saved.global_batch = options_.global_batch;
  saved.caps = options_.caps;
  saved.history = history_;
  saved.monitor = monitor_.serialize();
  saved.slow_streak = slow_streak_;
  saved.last_change = last_change_step_;
  saved.last_step = last_step_;
  saved.policy_state = policy_->save_state();
  saved.was_fine = was_fine_;
  saved.restarts = restarts_decided_;
  saved.last_restart = last_restart_step_;
  saved.errors = errors_;
  saved.sit_out = sit_out_.save();
  return detail::write_blob(kControllerMagic, kControllerFormat, saved);
}

Controller Controller::restore(std::span<const std::byte> bytes, ControllerOptions options) {
  validate(options);
  try {
    auto saved = detail::read_blob<SavedController>(
        bytes, kControllerMagic, kControllerFormat, "controller state",
        "it was written by an older antdt (before plans listed the ranks that sit out): resume with that "
        "version, or start the run afresh");
    if (saved.history.empty()) throw CheckpointError("controller state: no plan history");
    for (std::size_t k = 0; k < saved.history.size(); ++k) {
      if (const auto problem = plan_problem(saved.history[k]); !problem.empty()) {
        throw CheckpointError("controller state: plan " + std::to_string(k) + " of the history is invalid: " + problem);
      }
    }
    Monitor monitor = Monitor::restore(saved.monitor);
    if (std::any_of(saved.errors.begin(), saved.errors.end(), [](double e) { return !(e >= 0.0 && e <= 1e12); }))
      throw CheckpointError("controller state: a recorded prediction error is not a number >= 0");
    if (saved.world < 1 || saved.history.back().world_size() != saved.world || monitor.world_size() != saved.world ||
        static_cast<int>(saved.slow_streak.size()) != saved.world ||
        saved.was_fine.size() != saved.slow_streak.size()) {
      throw CheckpointError("controller state: inconsistent world sizes");
    }
    if (saved.restarts < 0 || saved.last_restart < -1 || saved.last_restart > saved.last_step ||
        std::any_of(saved.was_fine.begin(), saved.was_fine.end(), [](std::uint8_t f) { return f > 1; })) {
      throw CheckpointError("controller state: " + std::to_string(saved.restarts) + " restarts, the last at step " +
                            std::to_string(saved.last_restart) + ", or a was-fine flag out of range");
    }
    // The options in force when saved are those of the latest plan (checked() makes them so).
    if (saved.global_batch != saved.history.back().global_batch || saved.caps != saved.history.back().micro_batch_cap) {
      throw CheckpointError("controller state: the saved global batch or caps differ from the latest plan's");
    }
    // Steps are -1 before any; a streak grows by one per step, so at INT_MAX it would overflow.
    if (saved.last_step < -1 || saved.last_step == std::numeric_limits<std::int64_t>::max() || saved.last_change < -1) {
      throw CheckpointError("controller state: last step " + std::to_string(saved.last_step) + " or last change " +
                            std::to_string(saved.last_change) + " out of range [-1, 2^63 - 1)");
    }
    // The monitor records only steps the controller saw: none after its last step.
    if (monitor.last_step() > saved.last_step) {
      throw CheckpointError("controller state: the monitor recorded step " + std::to_string(monitor.last_step()) +
                            ", after the controller's last step " + std::to_string(saved.last_step));
    }
    for (const int s : saved.slow_streak) {
      if (s < 0 || s == std::numeric_limits<int>::max())
        throw CheckpointError("controller state: slow streak " + std::to_string(s) + " outside [0, 2^31 - 1)");
    }

    const int world = options.world_size > 0    ? options.world_size
                      : options.caps.size() > 1 ? static_cast<int>(options.caps.size())
                                                : saved.world;
    if (options.world_size < 0) throw UsageError("controller restore: world_size must be >= 0");
    options.world_size = world;
    if (options.global_batch == 0) options.global_batch = saved.global_batch;
    if (options.caps.empty()) {
      if (world == saved.world) {
        options.caps = saved.caps;
      } else if (std::adjacent_find(saved.caps.begin(), saved.caps.end(), std::not_equal_to<>()) == saved.caps.end()) {
        options.caps.assign(static_cast<std::size_t>(world), saved.caps.front());
      } else {
        throw UsageError("controller restore onto " + std::to_string(world) +
                         " ranks: the saved micro-batch caps differ per rank; pass caps for the new world");
      }
    }
    if (options.caps.size() == 1) options.caps.assign(static_cast<std::size_t>(world), options.caps.front());
    if (options.caps.size() != static_cast<std::size_t>(world)) {
      throw UsageError("controller restore onto " + std::to_string(world) + " ranks: got " +
                       std::to_string(options.caps.size()) + " micro-batch caps");
    }

    const bool same_world = world == saved.world;
    const bool same_monitor = same_world && monitor.window() == options.window;
    Controller c(Restored{}, options, same_monitor ? std::move(monitor) : Monitor(world, options.window));
    c.policy_ = make_policy(c.options_.policy);
    if (same_world && c.options_.policy == saved.policy) c.policy_->load_state(saved.policy_state);
    c.history_ = std::move(saved.history);
    c.last_step_ = saved.last_step;
    c.assessments_.assign(static_cast<std::size_t>(world), RankAssessment{});
    if (same_world) {
      c.slow_streak_ = std::move(saved.slow_streak);
      c.was_fine_ = std::move(saved.was_fine);
      c.last_change_step_ = saved.last_change;
      if (same_monitor) {
        c.errors_ = std::move(saved.errors);
        if (static_cast<int>(c.errors_.size()) > c.options_.window)
          c.errors_.erase(c.errors_.begin(), c.errors_.end() - c.options_.window);
      }
    } else {
      c.slow_streak_.assign(static_cast<std::size_t>(world), 0);
      c.was_fine_.assign(static_cast<std::size_t>(world), 0);
      c.last_change_step_ = -1;
    }
    // A restart's count and step stay with the run, whatever the new world: that is what keeps
    // a job from restarting again and again.
    c.restarts_decided_ = saved.restarts;
    c.last_restart_step_ = saved.last_restart;
    c.sit_out_.load(same_world ? std::span<const std::byte>(saved.sit_out) : std::span<const std::byte>(), world);

    const Plan& last = c.history_.back();
    // The restored policy's mode: a policy that switches keeps the one in force; others their own.
    const bool pooled = c.policy_->switches_pooling() ? last.pooled && c.policy_->pools() : c.policy_->starts_pooled();
    // A policy that does not rebalance has no way back for a rank that sits out: it re-plans.
    const bool same_shape = same_world && last.global_batch == c.options_.global_batch &&
                            last.micro_batch_cap == c.options_.caps &&
                            (last.sitting.empty() || c.policy_->rebalances());
    if (same_shape && last.pooled == pooled) return c;
    if (same_shape) {  // another policy on the same job: the same split, in its mode
      Plan next = last;
      next.pooled = pooled;
      next.reason = "restored under policy " + c.options_.policy + ": steps " + (pooled ? "pooled" : "not pooled");
      next.version = last.version + 1;
      next.effective_step = saved.last_step + 1;
      c.history_.push_back(c.checked(std::move(next)));
      return c;
    }
    // Elastic restart or changed batch/caps: re-plan. Without measurements on the new world
    // an equal split is the only honest choice; the Session may install a probed plan.
    Plan next;
    std::ostringstream reason;
    if (same_world && c.monitor_.median_throughput() > 0.0) {
      const double fill = c.monitor_.median_throughput();
      std::vector<double> x(static_cast<std::size_t>(world)), fixed(static_cast<std::size_t>(world));
      for (int i = 0; i < world; ++i) {
        const detail::RankModel m = detail::rank_model(c.monitor_, i);
        x[static_cast<std::size_t>(i)] = m.throughput > 0.0 ? m.throughput : fill;
        fixed[static_cast<std::size_t>(i)] = m.throughput > 0.0 ? m.fixed : c.monitor_.data_wait_seconds(i);
      }
      next = plan_split(c.options_.global_batch, x, c.options_.caps, saved.last_step + 1, fixed);
      reason << "restored with global batch " << c.options_.global_batch << ": re-split by measured throughput";
    } else {
      next = equal_plan(c.options_.global_batch, c.options_.caps, saved.last_step + 1);
      reason << "restored onto " << world << " ranks (was " << saved.world << "): equal split until measured";
    }
    next.reason = reason.str();
    next.pooled = pooled;
    next.version = last.version + 1;
    next.effective_step = saved.last_step + 1;
    c.history_.push_back(c.checked(std::move(next)));
    return c;
  } catch (const CheckpointError&) {
    throw;
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(std::string("controller state: ") + e.what());
  }
}

}  // namespace antdt
