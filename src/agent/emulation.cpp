// Straggler emulation (see include/antdt/emulation.hpp). Transient slowdowns: a rank is slowed
// at step s when a slowdown started at any step in (s - STEPS, s]; a start at step t happens
// when counter_uniform(seed, rank, t) < P. Pure in (seed, rank, step), hence reproducible.
#include "agent/emulation.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include <sys/prctl.h>

#include "agent/counter_rng.hpp"
#include "antdt/error.hpp"
#include "core/option_names.hpp"
#include "core/text.hpp"

namespace antdt {

namespace {

constexpr std::uint64_t kTransientStream = 0x7472616e73ULL;  // "trans"
constexpr std::uint64_t kJitterStream = 0x6a6974746572ULL;   // "jitter"

using detail::split_commas;
using detail::trim;

double parse_double(std::string_view token, std::string_view what, std::string_view whole) {
  double value = 0.0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (token.empty() || ec != std::errc() || end != token.data() + token.size() || !std::isfinite(value)) {
    throw UsageError(std::string(what) + ": '" + std::string(token) + "' in '" + std::string(whole) +
                     "' is not a finite number");
  }
  return value;
}

}  // namespace

bool EmulationOptions::active() const noexcept {
  bool slowed = false;
  for (const double s : speeds) slowed = slowed || s != 1.0;
  const bool transient = transient_probability > 0.0 && transient_factor != 1.0 && transient_steps > 0;
  return slowed || transient || virtual_seconds_per_sample > 0.0 || jitter > 0.0 || !schedule.empty();
}

std::string EmulationOptions::describe() const {
  if (!active()) return "emulation off";
  std::ostringstream out;
  out << "emulation ON:";
  const char* sep = " ";
  if (!speeds.empty()) {
    out << sep << "speeds ";
    constexpr std::size_t kListed = 16;  // a readable line at any world size
    for (std::size_t i = 0; i < speeds.size() && i < kListed; ++i) out << (i ? "," : "") << speeds[i];
    if (speeds.size() > kListed) out << ",...(" << speeds.size() << " ranks)";
    sep = "; ";
  }
  if (transient_probability > 0.0 && transient_steps > 0) {
    out << sep << "transient p=" << transient_probability << " x" << transient_factor << " for " << transient_steps
        << " steps";
    if (transient_from > 0 || transient_until > 0) {
      out << " starting at steps >= " << transient_from;
      if (transient_until > 0) out << " and < " << transient_until;
    }
    sep = "; ";
  }
  if (virtual_seconds_per_sample > 0.0) {
    out << sep << "virtual device " << virtual_seconds_per_sample << " s/sample at speed 1";
    sep = "; ";
  }
  if (jitter > 0.0) {
    out << sep << "jitter " << jitter;
    sep = "; ";
  }
  if (!schedule.empty()) {
    out << sep << "schedule ";
    for (std::size_t i = 0; i < schedule.size(); ++i) {
      const auto& c = schedule[i];
      out << (i ? "," : "") << (c.rank >= 0 ? std::to_string(c.rank) : "@" + c.node) << ":" << c.step << ":" << c.speed;
    }
    sep = "; ";
  }
  out << sep << "seed " << seed;
  return out.str();
}

std::vector<double> parse_speeds(std::string_view text) {
  if (trim(text).empty())
    throw UsageError(detail::option_name("emulate-speed") + ": empty list; give relative speeds like 1,1,1,0.33");
  std::vector<double> speeds;
  for (const auto token : split_commas(text)) {
    const double v = parse_double(token, detail::option_name("emulate-speed"), text);
    if (!(v > 0.0))
      throw UsageError(detail::option_name("emulate-speed") + ": speed " + std::string(token) +
                       " must be > 0 (1 = full speed)");
    speeds.push_back(v);
  }
  return speeds;
}

void parse_transient(std::string_view text, EmulationOptions& options) {
  const auto parts = split_commas(text);
  if (parts.size() < 3 || parts.size() > 5) {
    throw UsageError(detail::option_name("emulate-transient") +
                     ": expected P,FACTOR,STEPS[,FROM[,UNTIL]] (e.g. 0.1,3,5 or 0.1,3,5,200,400), got '" +
                     std::string(text) + "'");
  }
  const double p = parse_double(parts[0], detail::option_name("emulate-transient") + " probability", text);
  const double factor = parse_double(parts[1], detail::option_name("emulate-transient") + " factor", text);
  const double steps = parse_double(parts[2], detail::option_name("emulate-transient") + " steps", text);
  if (p < 0.0 || p > 1.0)
    throw UsageError(detail::option_name("emulate-transient") + ": probability " + std::string(parts[0]) +
                     " must be in [0, 1]");
  if (factor < 1.0)
    throw UsageError(detail::option_name("emulate-transient") + ": factor " + std::string(parts[1]) +
                     " must be >= 1 (a slowdown)");
  if (steps < 1.0 || steps != std::floor(steps) || steps > 1e9) {
    throw UsageError(detail::option_name("emulate-transient") + ": steps " + std::string(parts[2]) +
                     " must be a whole number >= 1");
  }
  std::int64_t bounds[2] = {0, 0};  // FROM, UNTIL
  for (std::size_t k = 3; k < parts.size(); ++k) {
    const double v =
        parse_double(parts[k], detail::option_name("emulate-transient") + (k == 3 ? " from" : " until"), text);
    if (v < 0.0 || v != std::floor(v) || v > 1e15) {
      throw UsageError(detail::option_name("emulate-transient") + ": step " + std::string(parts[k]) +
                       " must be a whole number >= 0");
    }
    bounds[k - 3] = static_cast<std::int64_t>(v);
  }
  if (parts.size() == 5 && bounds[1] <= bounds[0]) {
    throw UsageError(detail::option_name("emulate-transient") + ": until " + std::string(parts[4]) +
                     " must be after from " + std::string(parts[3]));
  }
  options.transient_probability = p;
  options.transient_factor = factor;
  options.transient_steps = static_cast<std::int64_t>(steps);
  options.transient_from = bounds[0];
  options.transient_until = bounds[1];
}

std::vector<SpeedChange> parse_schedule(std::string_view text) {
  if (trim(text).empty())
    throw UsageError(detail::option_name("emulate-schedule") +
                     ": empty; give RANK:STEP:SPEED or @NODE:STEP:SPEED, ...");
  std::vector<SpeedChange> out;
  for (const auto entry : split_commas(text)) {
    const auto first = entry.find(':');
    const auto second = first == std::string_view::npos ? first : entry.find(':', first + 1);
    if (second == std::string_view::npos || entry.find(':', second + 1) != std::string_view::npos) {
      throw UsageError(detail::option_name("emulate-schedule") + ": '" + std::string(entry) +
                       "' is not RANK:STEP:SPEED or @NODE:STEP:SPEED");
    }
    const auto who = trim(entry.substr(0, first));
    SpeedChange c;
    if (!who.empty() && who.front() == '@') {
      c.node = std::string(who.substr(1));
      if (c.node.empty())
        throw UsageError(detail::option_name("emulate-schedule") + ": '" + std::string(entry) +
                         "' names no node after '@'");
    } else {
      const double rank = parse_double(who, detail::option_name("emulate-schedule") + " rank", text);
      if (rank < 0 || rank != std::floor(rank) || rank > 1e8)
        throw UsageError(detail::option_name("emulate-schedule") + ": rank " + std::string(who) +
                         " must be a whole number >= 0");
      c.rank = static_cast<int>(rank);
    }
    const double step = parse_double(trim(entry.substr(first + 1, second - first - 1)),
                                     detail::option_name("emulate-schedule") + " step", text);
    if (step < 0 || step != std::floor(step) || step > 1e15)
      throw UsageError(detail::option_name("emulate-schedule") + ": step in '" + std::string(entry) +
                       "' must be a whole number >= 0");
    c.step = static_cast<std::int64_t>(step);
    c.speed = parse_double(trim(entry.substr(second + 1)), detail::option_name("emulate-schedule") + " speed", text);
    if (!(c.speed > 0.0))
      throw UsageError(detail::option_name("emulate-schedule") + ": speed in '" + std::string(entry) +
                       "' must be > 0 (1 = full speed)");
    out.push_back(c);
  }
  return out;
}

SpeedEmulator::SpeedEmulator(const EmulationOptions& options, int rank, int world_size, const std::string& node)
    : rank_(rank),
      transient_probability_(options.transient_probability),
      transient_factor_(options.transient_factor),
      transient_steps_(options.transient_steps),
      transient_from_(options.transient_from),
      transient_until_(options.transient_until),
      seconds_per_sample_(options.virtual_seconds_per_sample),
      jitter_(options.jitter),
      seed_(options.seed) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw UsageError("emulation: rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world_size));
  }
  const auto n = options.speeds.size();
  if (n > 1 && n != static_cast<std::size_t>(world_size)) {
    throw UsageError(detail::option_name("emulate-speed") + ": " + std::to_string(n) + " speeds for " +
                     std::to_string(world_size) + " ranks; give one per rank or a single value for all");
  }
  if (n >= 1) speed_ = options.speeds[n == 1 ? 0 : static_cast<std::size_t>(rank)];
  if (!(speed_ > 0.0) || !std::isfinite(speed_))
    throw UsageError(detail::option_name("emulate-speed") + ": speeds must be finite and > 0");
  if (options.virtual_seconds_per_sample < 0.0) throw UsageError("virtual device: seconds per sample must be >= 0");
  if (!(options.jitter >= 0.0 && options.jitter < 1.0)) throw UsageError("emulation: jitter must be in [0, 1)");
  for (const auto& c : options.schedule) {
    if (c.rank >= world_size) {
      throw UsageError(detail::option_name("emulate-schedule") + ": rank " + std::to_string(c.rank) +
                       " is not a rank of this " + std::to_string(world_size) + "-rank job");
    }
    if (c.rank == rank || (c.rank < 0 && !node.empty() && c.node == node)) changes_.emplace_back(c.step, c.speed);
  }
  std::stable_sort(changes_.begin(), changes_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  emulated_ = options.active();
}

double SpeedEmulator::speed_at(std::int64_t step) const {
  double s = speed_;
  for (const auto& [from, speed] : changes_) {
    if (from > step) break;
    s = speed;
  }
  return s;
}

double SpeedEmulator::slowdown(std::int64_t step) const {
  if (!(transient_probability_ > 0.0) || transient_steps_ <= 0 || step < 0) return 1.0;
  for (std::int64_t start = step; start > step - transient_steps_ && start >= transient_from_; --start) {
    if (transient_until_ > 0 && start >= transient_until_) continue;
    const double u = detail::counter_uniform(seed_, kTransientStream, static_cast<std::uint64_t>(rank_),
                                             static_cast<std::uint64_t>(start));
    if (u < transient_probability_) return transient_factor_;
  }
  return 1.0;
}

double SpeedEmulator::noise(std::int64_t step) const {
  if (!(jitter_ > 0.0) || step < 0) return 1.0;
  const double u = detail::counter_uniform(seed_, kJitterStream, static_cast<std::uint64_t>(rank_),
                                           static_cast<std::uint64_t>(step));
  return 1.0 + jitter_ * (2.0 * u - 1.0);
}

double SpeedEmulator::target_compute_seconds(double measured, std::int64_t samples, std::int64_t step) const {
  if (!emulated_) return measured;
  double target = 0.0;
  if (seconds_per_sample_ > 0.0) {
    target = static_cast<double>(samples) * seconds_per_sample_ / speed_at(step) * slowdown(step) * noise(step);
  } else {
    target = measured / speed_at(step) * slowdown(step);
  }
  return std::max(measured, target);
}

double SpeedEmulator::virtual_throughput() const noexcept {
  return seconds_per_sample_ > 0.0 ? speed_ / seconds_per_sample_ : 0.0;
}

double SpeedEmulator::virtual_throughput(std::int64_t step) const {
  return seconds_per_sample_ > 0.0 ? speed_at(step) / seconds_per_sample_ : 0.0;
}

void wait_for(double seconds) {
  if (!(seconds > 0.0)) return;
  // The kernel lets a sleeping thread wake up to its timer slack late (50 us by default); the
  // virtual device must wait b*c/speed, not that plus a wake-up slop the ideal does not know.
  // With 1 ns, 9 ms waits wake 56 us late instead of 104 (median, antdt-bench-session --mode
  // wait). Once per thread.
  [[maybe_unused]] thread_local const bool precise = ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0;
  using clock = std::chrono::steady_clock;
  const auto deadline =
      clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  // sleep_until may wake early on signals; sleep again until the deadline has passed.
  while (clock::now() < deadline) std::this_thread::sleep_until(deadline);
}

}  // namespace antdt
