// Straggler emulation for tests and benchmarks (docs/controller.md, "Emulation").
// Each rank's Agent stretches its measured compute to what a device of the given relative
// speed would take, by waiting (never spinning) the difference before it reports the time.
// Reports must say when emulation is on: EmulationOptions::describe() is the line to print.
//
// Modes (combinable):
//  - stretch:  --emulate-speed 1,1,1,0.33: compute takes measured / speed_i.
//  - virtual device: virtual_seconds_per_sample c > 0: compute for b samples takes
//    b * c / speed_i (or the measured time, if longer), so x_i = speed_i / c exactly.
//  - transient: --emulate-transient P,FACTOR,STEPS[,FROM[,UNTIL]]: at every step a rank starts,
//    with probability P, a slowdown by FACTOR that lasts STEPS steps; with FROM (and UNTIL),
//    slowdowns start only at steps in [FROM, UNTIL) (a burst phase in a steady run). The draw is
//    a pure hash of (seed, rank, step), so runs are reproducible and independent of call order.
//  - schedule: --emulate-schedule 3:100:0.33,@n2:50:0.5: from step 100 rank 3 runs at speed
//    0.33, and from step 50 every rank on node n2 at 0.5 (a rank that turns slow for good, or
//    recovers). A pure function of (rank or node, step): it replays after a resume, and a
//    node's slowness follows the node when the ranks are renumbered by a restart.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace antdt {

// From `step` on, the ranks it names run at `speed` (instead of their --emulate-speed one).
struct SpeedChange {
  int rank = -1;     // the rank it names, or -1 ...
  std::string node;  // ... the node (LaunchInfo::node_name) whose ranks it names
  std::int64_t step = 0;
  double speed = 1.0;
  friend bool operator==(const SpeedChange&, const SpeedChange&) = default;
};

struct EmulationOptions {
  std::vector<double> speeds;             // empty: 1 for all; one value: for all; else one per rank
  double transient_probability = 0;       // per rank and step, in [0, 1]
  double transient_factor = 1;            // compute time multiplier while slowed, >= 1
  std::int64_t transient_steps = 0;       // duration of one slowdown
  std::int64_t transient_from = 0;        // slowdowns start at steps >= this ...
  std::int64_t transient_until = 0;       // ... and < this (0: no end)
  double virtual_seconds_per_sample = 0;  // c; 0 = stretch the measured compute instead
  double jitter = 0;                      // virtual device: time x uniform [1 - j, 1 + j] per rank and step
  std::vector<SpeedChange> schedule;      // speed changes by step, in any order
  std::uint64_t seed = 0;

  [[nodiscard]] bool active() const noexcept;
  // One line, e.g. "emulation ON: speeds 1,1,1,0.33; transient p=0.1 x3 for 5 steps; seed 7"
  // or "emulation off".
  [[nodiscard]] std::string describe() const;
};

// "1,1,1,0.33" -> {1,1,1,0.33}. Every value finite and > 0. UsageError (one line) otherwise.
[[nodiscard]] std::vector<double> parse_speeds(std::string_view text);
// "0.1,3,5" -> probability 0.1, factor 3, 5 steps. P in [0,1], FACTOR >= 1, STEPS >= 1 integer.
// "0.1,3,5,200,400": the same, starting only at steps in [200, 400) (UNTIL > FROM; both whole).
void parse_transient(std::string_view text, EmulationOptions& options);
// "3:100:0.33,@n2:50:0.5" -> rank 3 from step 100 at 0.33, node n2's ranks from step 50 at 0.5.
// A rank is a whole number >= 0, a node '@' and a name; STEP >= 0; SPEED finite and > 0.
[[nodiscard]] std::vector<SpeedChange> parse_schedule(std::string_view text);

}  // namespace antdt
