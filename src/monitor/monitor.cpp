// Monitor: keeps the last `window` steps per rank and recomputes each rank's robust summary
// on every record(). Medians (not means) so that a few transient slow steps move nothing:
// with a window of 20, fewer than 10 slow steps leave the median throughput where it was.
#include "antdt/monitor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "monitor/robust_stats.hpp"

namespace antdt {

namespace {

constexpr std::uint32_t kMonitorMagic = 0x4e4f4d41;  // "AMON"
constexpr std::uint32_t kMonitorFormat = 1;

double step_throughput(const RankStepStats& s) noexcept {
  return (s.samples > 0 && s.compute_seconds > 0.0) ? static_cast<double>(s.samples) / s.compute_seconds : 0.0;
}

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

}  // namespace

Monitor::Monitor(int world_size, int window) : world_size_(world_size), window_(window) {
  if (world_size < 1) throw UsageError("Monitor: world size must be at least 1, got " + std::to_string(world_size));
  if (window < 1) throw UsageError("Monitor: window must be at least 1 step, got " + std::to_string(window));
  entries_.resize(static_cast<std::size_t>(world_size));
  summaries_.resize(static_cast<std::size_t>(world_size));
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
    entries_[i].push_back(stats[i]);
    erase_front_if_full(entries_[i], window_);
    const double t = stats[i].data_wait_seconds + stats[i].compute_seconds;
    max_t = std::max(max_t, t);
    sum_t += t;
    min_reduce = std::min(min_reduce, stats[i].reduce_seconds);
  }
  last_step_seconds_ = max_t + min_reduce;
  step_time_.push_back(last_step_seconds_);
  erase_front_if_full(step_time_, window_);
  idle_fraction_.push_back(max_t > 0.0 ? 1.0 - (sum_t / static_cast<double>(world_size_)) / max_t : 0.0);
  erase_front_if_full(idle_fraction_, window_);
  last_step_ = step;
  ++steps_recorded_;
  summarise();
}

void Monitor::summarise() {
  // Scratch buffers are reused across ranks; summarise runs for every rank at every step.
  std::vector<double> x, series, half;
  std::size_t longest = 0;
  for (const auto& window : entries_) longest = std::max(longest, window.size());
  x.reserve(longest);
  series.reserve(longest);
  const auto median_of = [&series](const std::vector<RankStepStats>& window, double RankStepStats::*field) {
    series.clear();
    for (const auto& s : window) series.push_back(s.*field);
    return detail::median_in_place(series);
  };
  for (std::size_t r = 0; r < entries_.size(); ++r) {
    const auto& window = entries_[r];
    x.clear();
    for (const auto& s : window) {
      if (const double v = step_throughput(s); v > 0.0) x.push_back(v);
    }
    RankWindowSummary& out = summaries_[r];
    out.entries = static_cast<int>(window.size());
    out.timed_entries = static_cast<int>(x.size());
    out.trend = 0.0;
    if (x.size() >= 4) {
      const auto h = static_cast<std::ptrdiff_t>(x.size() / 2);
      half.assign(x.begin(), x.begin() + h);
      const double older = detail::median_in_place(half);
      half.assign(x.end() - h, x.end());
      const double newer = detail::median_in_place(half);
      out.trend = newer - older;  // divided by the median below
    }
    series.assign(x.begin(), x.end());
    out.throughput = detail::median_in_place(series);
    if (out.throughput > 0.0) {
      out.trend /= out.throughput;
      out.spread = x.size() >= 2 ? detail::median_abs_deviation(x, out.throughput) / out.throughput : 0.0;
    } else {
      out.trend = 0.0;
      out.spread = 0.0;
    }
    out.last_throughput = window.empty() ? 0.0 : step_throughput(window.back());
    out.compute_seconds = median_of(window, &RankStepStats::compute_seconds);
    out.data_wait_seconds = median_of(window, &RankStepStats::data_wait_seconds);
    out.reduce_seconds = median_of(window, &RankStepStats::reduce_seconds);
    out.idle_seconds = median_of(window, &RankStepStats::idle_seconds);
  }
  median_step_seconds_ = detail::median(step_time_);
  median_idle_fraction_ = detail::median(idle_fraction_);
}

const RankWindowSummary& Monitor::summary(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    throw UsageError("Monitor: rank " + std::to_string(rank) + " out of range [0, " + std::to_string(world_size_) +
                     ")");
  }
  return summaries_[static_cast<std::size_t>(rank)];
}

std::vector<double> Monitor::throughputs() const {
  std::vector<double> x;
  x.reserve(summaries_.size());
  for (const auto& s : summaries_) x.push_back(s.throughput);
  return x;
}

std::vector<double> Monitor::data_wait_seconds() const {
  std::vector<double> a;
  a.reserve(summaries_.size());
  for (const auto& s : summaries_) a.push_back(s.data_wait_seconds);
  return a;
}

double Monitor::recent_peak(int rank, int steps) const {
  (void)summary(rank);  // range check
  const auto& window = entries_[static_cast<std::size_t>(rank)];
  if (steps < 1 || static_cast<std::size_t>(steps) > window.size()) return 0.0;
  double peak = 0.0;
  for (auto it = window.end() - steps; it != window.end(); ++it) peak = std::max(peak, step_throughput(*it));
  return peak;
}

double Monitor::median_throughput() const {
  std::vector<double> x;
  for (const auto& s : summaries_) {
    if (s.timed_entries > 0) x.push_back(s.throughput);
  }
  return detail::median(std::move(x));
}

std::vector<std::byte> Monitor::serialize() const {
  detail::ByteWriter w;
  w.put(kMonitorMagic);
  w.put(kMonitorFormat);
  w.put<std::int32_t>(world_size_);
  w.put<std::int32_t>(window_);
  w.put(steps_recorded_);
  w.put(last_step_);
  w.put(last_step_seconds_);
  // Field by field: RankStepStats has padding, which must not leak into the checkpoint.
  for (const auto& window : entries_) {
    w.put<std::uint64_t>(window.size());
    for (const auto& s : window) {
      w.put(s.compute_seconds);
      w.put(s.data_wait_seconds);
      w.put(s.reduce_seconds);
      w.put(s.idle_seconds);
      w.put(s.samples);
      w.put(s.micro_steps);
    }
  }
  w.put_vector(step_time_);
  w.put_vector(idle_fraction_);
  return w.take();
}

Monitor Monitor::restore(std::span<const std::byte> bytes) {
  try {
    detail::ByteReader r(bytes);
    if (r.get<std::uint32_t>() != kMonitorMagic) throw CheckpointError("monitor state: not a monitor blob (bad magic)");
    if (const auto format = r.get<std::uint32_t>(); format != kMonitorFormat) {
      throw CheckpointError("monitor state: format " + std::to_string(format) + " is not supported (expected " +
                            std::to_string(kMonitorFormat) + ")");
    }
    const int world = r.get<std::int32_t>();
    const int window = r.get<std::int32_t>();
    // After the 24 bytes of counters, every rank has an 8-byte entry count: the bytes bound
    // the world size, so a corrupt header cannot allocate per-rank state for 2^31 ranks.
    constexpr std::size_t kCounterBytes = 2 * sizeof(std::int64_t) + sizeof(double);
    const std::size_t max_world = r.remaining() < kCounterBytes ? 0 : (r.remaining() - kCounterBytes) / 8;
    if (world < 1 || static_cast<std::size_t>(world) > max_world || window < 1) {
      throw CheckpointError("monitor state: world size " + std::to_string(world) + " (must be in [1, " +
                            std::to_string(max_world) + "] for " + std::to_string(r.remaining()) +
                            " bytes) or window " + std::to_string(window) + " (must be >= 1) is out of range");
    }
    Monitor m(world, window);
    m.steps_recorded_ = r.get<std::int64_t>();
    m.last_step_ = r.get<std::int64_t>();
    m.last_step_seconds_ = r.get<double>();
    // Recorded steps are distinct and >= 0, so at most last_step + 1 of them (and the count
    // cannot overflow when the next step is recorded).
    if (m.last_step_ < -1 || m.steps_recorded_ < 0 || m.steps_recorded_ - 1 > m.last_step_) {
      throw CheckpointError("monitor state: " + std::to_string(m.steps_recorded_) + " steps recorded up to last step " +
                            std::to_string(m.last_step_) +
                            "; expected last step >= -1 and at most last step + 1 steps");
    }
    constexpr std::size_t kEntryBytes = 4 * sizeof(double) + sizeof(std::int64_t) + sizeof(std::int32_t);
    for (auto& entries : m.entries_) {
      const auto n = r.get<std::uint64_t>();
      if (n > static_cast<std::uint64_t>(window) || n > r.remaining() / kEntryBytes) {
        throw CheckpointError("monitor state: a rank's window holds " + std::to_string(n) + " steps; at most window " +
                              std::to_string(window) + " and what the remaining " + std::to_string(r.remaining()) +
                              " bytes hold");
      }
      entries.resize(n);
      for (auto& s : entries) {
        s.compute_seconds = r.get<double>();
        s.data_wait_seconds = r.get<double>();
        s.reduce_seconds = r.get<double>();
        s.idle_seconds = r.get<double>();
        s.samples = r.get<std::int64_t>();
        s.micro_steps = r.get<std::int32_t>();
        if (const char* why = implausible(s))
          throw CheckpointError(std::string("monitor state: a recorded step is out of range: ") + why);
      }
    }
    m.step_time_ = r.get_vector<double>();
    m.idle_fraction_ = r.get_vector<double>();
    if (!r.done()) throw CheckpointError("monitor state: " + std::to_string(r.remaining()) + " trailing bytes");
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
    m.summarise();
    return m;
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(std::string("monitor state: ") + e.what());
  }
}

}  // namespace antdt
