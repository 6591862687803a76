// Monitor: keeps the last `window` steps per rank and each rank's robust statistics.
// Medians (not means) so that a few transient slow steps move nothing: with a window of 20,
// fewer than 10 slow steps leave the median throughput where it was.
//
// Incremental, because rank 0 runs this for every rank at every step (docs/controller.md,
// "Cost at scale"): each rank's window throughputs and data waits are kept sorted, so a step
// removes the oldest value and inserts the newest (a binary search and a move of at most
// `window` doubles, nothing when the value repeats) and the medians stay exact: the same
// values a full recomputation gives, bit for bit. What only reports read (spread, trend, the
// other medians) is computed on demand from the ring of entries.
//
// The compute model (RankComputeModel) is fitted here too. Whenever a rank has run a new
// batch for half a window while the older half still holds another one, its window has two
// (or more) batch levels: the fit takes the median compute time of every level with at least
// three timed steps and runs a Theil-Sen line through those points (the median of the slopes
// between levels, then the median intercept); a level whose times scatter by more than 10 %
// (MAD / median: a transient inside it) stops the fit, and so does a slope that the levels'
// noise (the standard errors of their medians, at least 1 %) cannot tell from 0. An
// intercept within two standard errors of 0, or below 2 % of the current step's compute,
// counts as 0. A change gives two fits (at a half and at three quarters of a window on the
// new batch); the rank's intercept phi is the median of its last kFitsKept fits with missing
// ones as 0, so it takes two fits that agree to move it and one unlucky fit cannot swing the
// plan.
#include "monitor/monitor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "antdt/error.hpp"
#include "core/blob_fields.hpp"
#include "core/step_record.hpp"
#include "monitor/robust_stats.hpp"

namespace antdt {

namespace {

constexpr std::uint32_t kMonitorMagic = 0x4e4f4d41;  // "AMON"
// 2: adds each rank's compute-model fits. 3: one field list for both directions (each rank's
// fits with a 64-bit count); formats 1 and 2 are refused with a clear error.
constexpr std::uint32_t kMonitorFormat = 3;

// A fitted intercept below this fraction of the rank's current compute time is noise.
constexpr double kSignificantIntercept = 0.02;
// Batch levels must differ by this factor before their times can tell a slope from noise.
constexpr double kLevelSpread = 1.1;
constexpr int kLevelEntries = 3;     // timed steps a batch level needs to take part in a fit
constexpr double kLevelNoise = 0.1;  // the most relative MAD of a level's times that a fit accepts

double step_throughput(const RankStepStats& s) noexcept {
  return (s.samples > 0 && s.compute_seconds > 0.0) ? static_cast<double>(s.samples) / s.compute_seconds : 0.0;
}

double model_throughput(const RankStepStats& s, double phi) noexcept {
  return (s.samples > 0 && s.compute_seconds > 0.0) ? (static_cast<double>(s.samples) + phi) / s.compute_seconds : 0.0;
}

// The data wait as the sorted window holds it: a NaN would break the order.
double wait_of(const RankStepStats& s) noexcept { return std::isnan(s.data_wait_seconds) ? 0.0 : s.data_wait_seconds; }

// Limits on restored stats: every time in [0, kMaxSeconds] (about 30 years), samples in
// [0, 2^53] (exact in a double), and a step throughput of at most kMaxThroughput samples/s.
// Beyond them the planner's sums of throughputs and times could reach infinity.
constexpr double kMaxSeconds = 1e9;
constexpr std::int64_t kMaxSamples = std::int64_t{1} << 53;
constexpr double kMaxThroughput = 1e12;

bool plausible_seconds(double v) noexcept { return v >= 0.0 && v <= kMaxSeconds; }  // false for NaN

// Why a restored entry is out of range, or nullptr.
const char* implausible(const RankStepStats& s) noexcept {
  if (!plausible_seconds(s.compute_seconds) || !plausible_seconds(s.data_wait_seconds) ||
      !plausible_seconds(s.reduce_seconds) || !plausible_seconds(s.idle_seconds))
    return "a time is not in [0, 1e9] seconds";
  if (s.samples < 0 || s.samples > kMaxSamples || s.micro_steps < 0) return "samples or micro-steps out of range";
  if (!(step_throughput(s) <= kMaxThroughput)) return "its throughput exceeds 1e12 samples/s";
  return nullptr;
}

template <class T>
void erase_front_if_full(std::vector<T>& v, int window) {
  if (static_cast<int>(v.size()) > window) v.erase(v.begin(), v.begin() + (static_cast<int>(v.size()) - window));
}

// A sorted run of `n` doubles at `a` (room for one more): insert, erase one equal value, median.
void sorted_insert(double* a, int& n, double v) {
  double* at = std::upper_bound(a, a + n, v);
  std::move_backward(at, a + n, a + n + 1);
  *at = v;
  ++n;
}

void sorted_erase(double* a, int& n, double v) {
  double* at = std::lower_bound(a, a + n, v);
  if (at == a + n || !(*at == v)) return;  // cannot happen for values it inserted
  std::move(at + 1, a + n, at);
  --n;
}

// sorted_erase(old) then sorted_insert(new) (both present or positive as the caller checks),
// in one pass: only the values between the two positions move.
void sorted_replace(double* a, int n, double old_value, double new_value) {
  double* at = std::lower_bound(a, a + n, old_value);
  if (at == a + n || !(*at == old_value)) return;  // cannot happen for values it inserted
  if (new_value >= old_value) {
    double* to = std::upper_bound(at + 1, a + n, new_value);
    std::move(at + 1, to, at);
    *(to - 1) = new_value;
  } else {
    double* to = std::upper_bound(a, at, new_value);
    std::move_backward(to, at, at + 1);
    *to = new_value;
  }
}

// The same value median_in_place gives: the middle one, or the mean of the two middle ones.
double sorted_median(const double* a, int n) noexcept {
  if (n <= 0) return 0.0;
  const int mid = n / 2;
  return n % 2 == 1 ? a[mid] : 0.5 * (a[mid - 1] + a[mid]);
}

// The intercept in force: the median of the last kFitsKept fits, missing ones counted as 0
// (no fixed part): it takes two fits that agree to move it, and their smaller one counts.
double combined_intercept(const double* fits, int count) {
  std::vector<double> kept(fits, fits + count);
  kept.resize(static_cast<std::size_t>(Monitor::kFitsKept), 0.0);
  return detail::median_in_place(kept);
}

}  // namespace

double RankComputeModel::seconds(std::int64_t batch) const noexcept {
  if (batch <= 0) return 0.0;
  if (!(throughput > 0.0)) return std::numeric_limits<double>::infinity();
  return std::max(0.0, fixed_seconds + static_cast<double>(batch) / throughput);
}

Monitor::Monitor(int world_size, int window) : world_size_(world_size), window_(window) {
  if (world_size < 1) throw UsageError("Monitor: world size must be at least 1, got " + std::to_string(world_size));
  if (window < 1 || window > kMaxWindow) {
    throw UsageError("Monitor: window must be 1 to " + std::to_string(kMaxWindow) + " steps, got " +
                     std::to_string(window));
  }
  const auto n = static_cast<std::size_t>(world_size);
  const auto cells = n * static_cast<std::size_t>(window);
  ring_.resize(cells);
  x_ring_.resize(cells);
  x_sorted_.resize(cells);
  wait_sorted_.resize(cells);
  timed_count_.assign(n, 0);
  x_median_.assign(n, 0.0);
  wait_median_.assign(n, 0.0);
  last_x_.assign(n, 0.0);
  last_samples_.assign(n, 0);
  fits_.assign(n * kFitsKept, 0.0);
  fit_count_.assign(n, 0);
  phi_.assign(n, 0.0);
  model_median_.assign(n, 0.0);
  model_count_.assign(n, 0);
  level_run_.assign(n, 0);
}

void Monitor::out_of_range(int rank) const {
  throw UsageError("Monitor: rank " + std::to_string(rank) + " out of range [0, " + std::to_string(world_size_) + ")");
}

void Monitor::record(std::int64_t step, std::span<const RankStepStats> stats) {
  if (static_cast<int>(stats.size()) != world_size_) {
    throw UsageError("Monitor::record: got stats for " + std::to_string(stats.size()) + " ranks, world size is " +
                     std::to_string(world_size_));
  }
  if (step <= last_step_) {
    throw UsageError("Monitor::record: step " + std::to_string(step) + " is not after the last recorded step " +
                     std::to_string(last_step_));
  }
  double max_t = 0.0;
  double sum_t = 0.0;
  double min_reduce = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < stats.size(); ++i) {
    add_entry(i, stats[i]);
    const double t = stats[i].data_wait_seconds + stats[i].compute_seconds;
    max_t = std::max(max_t, t);
    sum_t += t;
    // A rank that sits out (no samples, no reduction) has no reduce time: the all-reduce is the
    // shortest of those that took part.
    if (stats[i].reduce_seconds > 0.0 || stats[i].samples > 0)
      min_reduce = std::min(min_reduce, stats[i].reduce_seconds);
  }
  if (!std::isfinite(min_reduce)) min_reduce = 0.0;
  filled_ = std::min(filled_ + 1, window_);
  next_slot_ = (next_slot_ + 1) % window_;
  // Fits need the entries in place (ring position advanced), so they run after the loop.
  // Two fits per change: at half a window on the new batch, and at three quarters (with a
  // quarter of the window still on the old one).
  const int half = window_ / 2, three_quarters = (3 * window_) / 4;
  if (half >= kLevelEntries && window_ - three_quarters >= kLevelEntries) {
    for (std::size_t i = 0; i < stats.size(); ++i) {
      const int run = level_run_[i];
      if ((run == half || run == three_quarters) && filled_ > run) refit(i);
    }
  }
  last_step_seconds_ = max_t + min_reduce;
  last_compute_seconds_ = max_t;
  step_time_.push_back(last_step_seconds_);
  erase_front_if_full(step_time_, window_);
  idle_fraction_.push_back(max_t > 0.0 ? 1.0 - (sum_t / static_cast<double>(world_size_)) / max_t : 0.0);
  erase_front_if_full(idle_fraction_, window_);
  allreduce_.push_back(min_reduce);
  erase_front_if_full(allreduce_, window_);
  last_step_ = step;
  ++steps_recorded_;
  summarise_steps();
}

// One rank's new entry: the oldest one (when the window is full) leaves the sorted windows,
// the new one enters them. Values that repeat (a virtual device, a steady rank) cost nothing.
void Monitor::add_entry(std::size_t r, const RankStepStats& s) {
  const auto w = static_cast<std::size_t>(window_);
  const std::size_t at = cell_of(static_cast<std::size_t>(next_slot_), r);
  RankStepStats& cell = ring_[at];
  double* xs = &x_sorted_[r * w];
  double* ws = &wait_sorted_[r * w];
  const bool full = filled_ == window_;
  int waits = filled_;
  const double x_new = step_throughput(s);
  const double w_new = wait_of(s);
  if (full) {
    // A value that repeats (a virtual device, a steady rank) leaves its window and median as
    // they are: nothing but the ring is touched.
    if (const double x_old = x_ring_[at]; x_old != x_new) {
      if (x_old > 0.0 && x_new > 0.0) {
        sorted_replace(xs, timed_count_[r], x_old, x_new);
      } else {
        if (x_old > 0.0) sorted_erase(xs, timed_count_[r], x_old);
        if (x_new > 0.0) sorted_insert(xs, timed_count_[r], x_new);
      }
      x_median_[r] = sorted_median(xs, timed_count_[r]);
    }
    if (const double w_old = wait_of(cell); w_old != w_new) {
      sorted_replace(ws, waits, w_old, w_new);
      wait_median_[r] = sorted_median(ws, waits);
    }
  } else {
    if (x_new > 0.0) sorted_insert(xs, timed_count_[r], x_new);
    sorted_insert(ws, waits, w_new);
    x_median_[r] = sorted_median(xs, timed_count_[r]);
    wait_median_[r] = sorted_median(ws, waits);
  }
  if (const double phi = phi_[r]; phi != 0.0) {
    double* ms = &model_sorted_[r * w];
    const double m_old = full ? model_throughput(cell, phi) : 0.0;
    const double m_new = model_throughput(s, phi);
    if (m_old != m_new) {
      if (m_old > 0.0 && m_new > 0.0) {
        sorted_replace(ms, model_count_[r], m_old, m_new);
      } else {
        if (m_old > 0.0) sorted_erase(ms, model_count_[r], m_old);
        if (m_new > 0.0) sorted_insert(ms, model_count_[r], m_new);
      }
    }
    model_median_[r] = sorted_median(ms, model_count_[r]);
  }
  const bool same_level = filled_ > 0 && last_samples_[r] == s.samples;
  level_run_[r] = same_level ? std::min(level_run_[r] + 1, window_) : 1;
  last_samples_[r] = s.samples;
  cell = s;
  x_ring_[at] = x_new;
  last_x_[r] = x_new;
}

void Monitor::summarise_steps() {
  scratch_.clear();
  for (std::size_t r = 0; r < x_median_.size(); ++r) {
    if (timed_count_[r] > 0) scratch_.push_back(x_median_[r]);
  }
  median_throughput_ = detail::median_in_place(scratch_);
  median_step_seconds_ = detail::median(step_time_);
  median_idle_fraction_ = detail::median(idle_fraction_);
  median_allreduce_seconds_ = detail::median(allreduce_);
}

// The fit described at the top of this file, for rank r.
void Monitor::refit(std::size_t r) {
  struct Point {
    double b, t;
  };
  std::vector<Point> pts;
  pts.reserve(static_cast<std::size_t>(filled_));
  for (int age = 0; age < filled_; ++age) {
    const RankStepStats& e = entry(r, age);
    if (e.samples > 0 && e.compute_seconds > 0.0) pts.push_back({static_cast<double>(e.samples), e.compute_seconds});
  }
  std::sort(pts.begin(), pts.end(),
            [](const Point& l, const Point& h) { return l.b < h.b || (l.b == h.b && l.t < h.t); });
  struct Level {
    double b, t, se;  // batch, median compute time, the standard error of that median
  };
  std::vector<Level> levels;  // every batch level with enough steps
  std::vector<double> times;
  for (std::size_t k = 0; k < pts.size();) {
    std::size_t end = k;
    times.clear();
    while (end < pts.size() && pts[end].b == pts[k].b) times.push_back(pts[end++].t);
    if (static_cast<int>(times.size()) >= kLevelEntries) {
      const double median = detail::median_in_place(times);
      const double mad = detail::median_abs_deviation(times, median);
      // A level whose times scatter (a transient inside it) cannot place a line: no fit now.
      if (!(median > 0.0) || mad > kLevelNoise * median) return;
      // sigma = 1.4826 MAD; a median's standard error is 1.2533 sigma / sqrt(n).
      const double se = 1.4826 * 1.2533 * mad / std::sqrt(static_cast<double>(times.size()));
      levels.push_back({pts[k].b, median, se});
    }
    k = end;
  }
  if (levels.size() < 2 || levels.back().b < kLevelSpread * levels.front().b) return;
  std::vector<double> slopes;
  for (std::size_t i = 0; i < levels.size(); ++i) {
    for (std::size_t j = i + 1; j < levels.size(); ++j)
      slopes.push_back((levels[j].t - levels[i].t) / (levels[j].b - levels[i].b));
  }
  const double slope = detail::median_in_place(slopes);
  if (!std::isfinite(slope)) return;
  // How well the extreme levels pin the line down: the slope's and the intercept's standard
  // errors from those of the two medians.
  const Level& lo = levels.front();
  const Level& hi = levels.back();
  // A level's error is at least 1 % of its time: a MAD of 0 (most steps alike, a few far off)
  // does not make a median exact.
  const double slope_se = std::hypot(std::max(lo.se, 0.01 * lo.t), std::max(hi.se, 0.01 * hi.t)) / (hi.b - lo.b);
  const double intercept_se = std::hypot(std::max(lo.se, 0.01 * lo.t), lo.b * slope_se);
  // The levels are too noisy or too close to tell a slope, or the time fell with the batch (a
  // transient in the larger level): no evidence either way.
  if (!(slope > 2.0 * slope_se)) return;
  const RankStepStats& now = entry(r, 0);
  const double t_now = now.compute_seconds > 0.0 ? now.compute_seconds : hi.t;
  std::vector<double> intercepts;
  for (const auto& l : levels) intercepts.push_back(l.t - slope * l.b);
  const double intercept = detail::median_in_place(intercepts);
  double phi = 0.0;
  if (std::abs(intercept) >= std::max(kSignificantIntercept * t_now, 2.0 * intercept_se)) {
    // Bounded so that the model stays positive where the rank has run (t(b) > 0 down to half
    // its smallest batch) and the fixed part stays at most half of its largest step: the
    // planner extrapolates from this line, and a wrong flat one would pile samples on a rank.
    phi = std::clamp(intercept / slope, -0.5 * lo.b, hi.b);
  }
  double* history = &fits_[r * kFitsKept];
  auto& count = fit_count_[r];
  if (count == kFitsKept) {
    std::move(history + 1, history + kFitsKept, history);
    --count;
  }
  history[count++] = phi;
  const double combined = combined_intercept(history, count);
  if (combined != phi_[r]) {
    phi_[r] = combined;
    rebuild_model_window(r);
  }
}

void Monitor::rebuild_model_window(std::size_t r) {
  const auto w = static_cast<std::size_t>(window_);
  if (phi_[r] == 0.0) {
    model_median_[r] = 0.0;
    model_count_[r] = 0;
    return;
  }
  if (model_sorted_.empty()) model_sorted_.assign(ring_.size(), 0.0);
  double* ms = &model_sorted_[r * w];
  int& count = model_count_[r];
  count = 0;
  for (int age = 0; age < filled_; ++age) {
    const double m = model_throughput(entry(r, age), phi_[r]);
    if (m > 0.0) sorted_insert(ms, count, m);
  }
  model_median_[r] = sorted_median(ms, count);
}

RankWindowSummary Monitor::summary(int rank) const {
  const auto r = checked(rank);
  RankWindowSummary out;
  std::vector<double> x, series, half;
  x.reserve(static_cast<std::size_t>(filled_));
  for (int age = filled_ - 1; age >= 0; --age) {  // oldest first
    if (const double v = step_throughput(entry(r, age)); v > 0.0) x.push_back(v);
  }
  out.entries = filled_;
  out.timed_entries = static_cast<int>(x.size());
  if (x.size() >= 4) {
    const auto h = static_cast<std::ptrdiff_t>(x.size() / 2);
    half.assign(x.begin(), x.begin() + h);
    const double older = detail::median_in_place(half);
    half.assign(x.end() - h, x.end());
    const double newer = detail::median_in_place(half);
    out.trend = newer - older;  // divided by the median below
  }
  out.throughput = x_median_[r];
  if (out.throughput > 0.0) {
    out.trend /= out.throughput;
    out.spread = x.size() >= 2 ? detail::median_abs_deviation(x, out.throughput) / out.throughput : 0.0;
  } else {
    out.trend = 0.0;
    out.spread = 0.0;
  }
  out.last_throughput = last_throughput(rank);
  const auto median_of = [&](double RankStepStats::*field) {
    series.clear();
    for (int age = 0; age < filled_; ++age) series.push_back(entry(r, age).*field);
    return detail::median_in_place(series);
  };
  out.compute_seconds = median_of(&RankStepStats::compute_seconds);
  out.data_wait_seconds = wait_median_[r];
  out.reduce_seconds = median_of(&RankStepStats::reduce_seconds);
  out.idle_seconds = median_of(&RankStepStats::idle_seconds);
  return out;
}

const RankStepStats& Monitor::recent(int rank, int age) const {
  const auto r = checked(rank);
  if (age < 0 || age >= filled_)
    throw UsageError("monitor: step age " + std::to_string(age) + " is not in the window of " +
                     std::to_string(filled_) + " steps");
  return entry(r, age);
}

double Monitor::recent_peak(int rank, int steps) const {
  const auto r = checked(rank);
  if (steps < 1 || steps > filled_) return 0.0;
  double peak = 0.0;
  for (int age = 0; age < steps; ++age) peak = std::max(peak, x_ring_[cell_of(slot_of(age), r)]);
  return peak;
}

RankComputeModel Monitor::compute_model(int rank) const {
  const auto r = checked(rank);
  RankComputeModel m;
  m.fits = fit_count_[r];
  // A negative intercept takes samples away: a window of batches at or below it (a convex rank
  // given a small share) has no step the line times, so the rank is timed at its plain speed.
  const bool line = phi_[r] != 0.0 && model_count_[r] > 0;
  m.intercept_samples = line ? phi_[r] : 0.0;
  m.throughput = line ? model_median_[r] : x_median_[r];
  m.fixed_seconds = m.throughput > 0.0 ? m.intercept_samples / m.throughput : 0.0;
  return m;
}

double Monitor::model_recent_peak(int rank, int steps) const {
  const auto r = checked(rank);
  const double phi = phi_[r];
  if (phi == 0.0) return recent_peak(rank, steps);
  if (steps < 1 || steps > filled_) return 0.0;
  double peak = 0.0;
  for (int age = 0; age < steps; ++age) peak = std::max(peak, model_throughput(entry(r, age), phi));
  return peak;
}

double Monitor::model_recent_median(int rank, int steps) const {
  const auto r = checked(rank);
  if (steps < 1 || steps > filled_) return 0.0;
  constexpr int kOnStack = 32;
  double on_stack[kOnStack];
  std::vector<double> on_heap;
  double* recent = on_stack;
  if (steps > kOnStack) {
    on_heap.resize(static_cast<std::size_t>(steps));
    recent = on_heap.data();
  }
  int n = 0;
  for (int age = 0; age < steps; ++age) {
    if (const double v = model_throughput(entry(r, age), phi_[r]); v > 0.0) recent[n++] = v;
  }
  std::sort(recent, recent + n);
  return sorted_median(recent, n);
}

double Monitor::recent_step_seconds(int steps) const {
  if (steps < 1 || static_cast<std::size_t>(steps) > step_time_.size()) return 0.0;
  return detail::median(std::vector<double>(step_time_.end() - steps, step_time_.end()));
}

// Every derived structure from the ring and the fits (after restore).
void Monitor::rebuild() {
  const auto w = static_cast<std::size_t>(window_);
  for (std::size_t r = 0; r < static_cast<std::size_t>(world_size_); ++r) {
    int timed = 0, waits = 0;
    double* xs = &x_sorted_[r * w];
    double* ws = &wait_sorted_[r * w];
    int run = 0;
    for (int age = 0; age < filled_; ++age) {
      const RankStepStats& e = entry(r, age);
      x_ring_[cell_of(slot_of(age), r)] = step_throughput(e);
      if (const double x = step_throughput(e); x > 0.0) sorted_insert(xs, timed, x);
      sorted_insert(ws, waits, wait_of(e));
      if (run == age && e.samples == entry(r, 0).samples) run = age + 1;
    }
    timed_count_[r] = timed;
    last_x_[r] = filled_ > 0 ? step_throughput(entry(r, 0)) : 0.0;
    last_samples_[r] = filled_ > 0 ? entry(r, 0).samples : 0;
    x_median_[r] = sorted_median(xs, timed);
    wait_median_[r] = sorted_median(ws, waits);
    level_run_[r] = run;
    phi_[r] = combined_intercept(&fits_[r * kFitsKept], fit_count_[r]);
    rebuild_model_window(r);
  }
  allreduce_.clear();
  for (int age = filled_ - 1; age >= 0; --age) {
    double m = std::numeric_limits<double>::infinity();
    for (std::size_t r = 0; r < static_cast<std::size_t>(world_size_); ++r)
      m = std::min(m, entry(r, age).reduce_seconds);
    allreduce_.push_back(m);
  }
  last_compute_seconds_ = 0.0;
  if (filled_ > 0) {
    for (std::size_t r = 0; r < static_cast<std::size_t>(world_size_); ++r)
      last_compute_seconds_ =
          std::max(last_compute_seconds_, entry(r, 0).data_wait_seconds + entry(r, 0).compute_seconds);
  }
  summarise_steps();
}

namespace {

// One recorded step of one rank, field by field: RankStepStats has padding, which must not leak
// into the checkpoint.
struct SavedEntry {
  double compute_seconds = 0.0, data_wait_seconds = 0.0, reduce_seconds = 0.0, idle_seconds = 0.0;
  std::int64_t samples = 0;
  std::int32_t micro_steps = 0;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.compute_seconds), f(m.data_wait_seconds), f(m.reduce_seconds), f(m.idle_seconds), f(m.samples),
        f(m.micro_steps);
  }
};

// What a Monitor saves, listed once for serialize and restore (core/blob_fields.hpp).
struct SavedMonitor {
  std::int32_t world = 0, window = 0;
  std::int64_t steps_recorded = 0, last_step = -1;
  double last_step_seconds = 0.0;
  std::vector<std::vector<SavedEntry>> windows;  // per rank, oldest first
  std::vector<double> step_time, idle_fraction;  // per step, oldest first
  std::vector<std::vector<double>> fits;         // per rank, its compute-model intercept fits, oldest first

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.world), f(m.window), f(m.steps_recorded), f(m.last_step), f(m.last_step_seconds), f(m.windows), f(m.step_time),
        f(m.idle_fraction), f(m.fits);
  }
};

}  // namespace

std::vector<std::byte> Monitor::serialize() const {
  SavedMonitor saved;
  saved.world = world_size_;
  saved.window = window_;
  saved.steps_recorded = steps_recorded_;
  saved.last_step = last_step_;
  saved.last_step_seconds = last_step_seconds_;
  saved.windows.resize(static_cast<std::size_t>(world_size_));
  saved.fits.resize(static_cast<std::size_t>(world_size_));
  for (std::size_t r = 0; r < static_cast<std::size_t>(world_size_); ++r) {
    for (int age = filled_ - 1; age >= 0; --age) {  // oldest first
      const RankStepStats& s = entry(r, age);
      saved.windows[r].push_back(
          {s.compute_seconds, s.data_wait_seconds, s.reduce_seconds, s.idle_seconds, s.samples, s.micro_steps});
    }
    saved.fits[r].assign(&fits_[r * kFitsKept], &fits_[r * kFitsKept] + fit_count_[r]);
  }
  saved.step_time = step_time_;
  saved.idle_fraction = idle_fraction_;
  return detail::write_blob(kMonitorMagic, kMonitorFormat, saved);
}

Monitor Monitor::restore(std::span<const std::byte> bytes) {
  try {
    const auto saved = detail::read_blob<SavedMonitor>(
        bytes, kMonitorMagic, kMonitorFormat, "monitor state",
        "it was written by an older antdt: resume with that version, or start the run afresh");
    const int world = saved.world;
    const int window = saved.window;
    if (world < 1 || static_cast<std::size_t>(world) != saved.windows.size() ||
        saved.fits.size() != saved.windows.size() || window < 1 || window > kMaxWindow) {
      throw CheckpointError("monitor state: world size " + std::to_string(world) + " (with " +
                            std::to_string(saved.windows.size()) + " windows and " + std::to_string(saved.fits.size()) +
                            " fit lists) or window " + std::to_string(window) + " (must be in [1, " +
                            std::to_string(kMaxWindow) + "]) is out of range");
    }
    // The ring holds world x window entries, allocated whole, while a checkpoint taken early
    // holds fewer: a blob may ask for at most 64 cells per byte (or 2^20 cells), so corrupt
    // bytes cannot allocate gigabytes. A genuine one asks for far less.
    const auto cells = static_cast<std::size_t>(world) * static_cast<std::size_t>(window);
    if (cells > std::max<std::size_t>(std::size_t{1} << 20, 64 * bytes.size())) {
      throw CheckpointError("monitor state: " + std::to_string(world) + " ranks x window " + std::to_string(window) +
                            " is more state than " + std::to_string(bytes.size()) + " bytes can describe");
    }
    // Recorded steps are distinct and >= 0, so at most last_step + 1 of them (and the count
    // cannot overflow when the next step is recorded).
    if (saved.last_step < -1 || saved.steps_recorded < 0 || saved.steps_recorded - 1 > saved.last_step) {
      throw CheckpointError("monitor state: " + std::to_string(saved.steps_recorded) +
                            " steps recorded up to last step " + std::to_string(saved.last_step) +
                            "; expected last step >= -1 and at most last step + 1 steps");
    }
    Monitor m(world, window);
    m.steps_recorded_ = saved.steps_recorded;
    m.last_step_ = saved.last_step;
    m.last_step_seconds_ = saved.last_step_seconds;
    // Every step adds an entry to every rank: their windows hold the same number of steps.
    const std::size_t n = saved.windows.front().size();
    if (n > static_cast<std::size_t>(std::min<std::int64_t>(m.steps_recorded_, window)))
      throw CheckpointError("monitor state: the windows hold more steps than were recorded or the window holds");
    for (std::size_t rank = 0; rank < saved.windows.size(); ++rank) {
      const auto& w = saved.windows[rank];
      if (w.size() != n) {
        throw CheckpointError("monitor state: rank " + std::to_string(rank) + "'s window holds " +
                              std::to_string(w.size()) + " steps, rank 0's " + std::to_string(n));
      }
      for (std::size_t k = 0; k < n; ++k) {
        const SavedEntry& e = w[k];
        const RankStepStats s{e.compute_seconds, e.data_wait_seconds, e.reduce_seconds,
                              e.idle_seconds,    e.samples,           e.micro_steps};
        if (const char* why = implausible(s))
          throw CheckpointError(std::string("monitor state: a recorded step is out of range: ") + why);
        m.ring_[m.cell_of(k, rank)] = s;  // oldest first from slot 0
      }
      const auto& fits = saved.fits[rank];
      if (fits.size() > static_cast<std::size_t>(kFitsKept))
        throw CheckpointError("monitor state: " + std::to_string(fits.size()) + " compute-model fits, at most " +
                              std::to_string(kFitsKept));
      for (std::size_t k = 0; k < fits.size(); ++k) {
        if (!(std::abs(fits[k]) <= static_cast<double>(kMaxSamples)))
          throw CheckpointError("monitor state: a compute-model intercept is not a finite number of samples");
        m.fits_[rank * kFitsKept + k] = fits[k];
      }
      m.fit_count_[rank] = static_cast<std::uint8_t>(fits.size());
    }
    m.filled_ = static_cast<int>(n);
    m.next_slot_ = m.filled_ % window;
    m.step_time_ = saved.step_time;
    m.idle_fraction_ = saved.idle_fraction;
    if (m.step_time_.size() > static_cast<std::size_t>(window) ||
        m.idle_fraction_.size() > static_cast<std::size_t>(window)) {
      throw CheckpointError("monitor state: more step times than the window of " + std::to_string(window));
    }
    // A step time is max(data wait + compute) + min(reduce) of plausible times; an idle
    // fraction is 1 - mean / max, in [0, 1] up to rounding.
    const auto bad_time = [](double v) { return !(v >= 0.0 && v <= 3 * kMaxSeconds); };
    const auto bad_fraction = [](double v) { return !std::isfinite(v) || v > 1.0; };
    if (bad_time(m.last_step_seconds_) || std::any_of(m.step_time_.begin(), m.step_time_.end(), bad_time) ||
        std::any_of(m.idle_fraction_.begin(), m.idle_fraction_.end(), bad_fraction))
      throw CheckpointError("monitor state: a step time is not in [0, 3e9] seconds or an idle fraction is above 1");
    m.rebuild();
    return m;
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(std::string("monitor state: ") + e.what());
  }
}

}  // namespace antdt
