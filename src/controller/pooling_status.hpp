// Private: what the policy that chooses the step mode (auto, docs/controller.md "auto")
// measured and decided, for the Controller, the simulator and their tests.
#pragma once

#include <cstdint>
#include <vector>

namespace antdt {

// A switch between plain and pooled steps, decided by a policy that chooses the step mode
// (auto, docs/controller.md "auto"), with the numbers behind it.
struct PoolingSwitch {
  std::int64_t step = -1;            // decided after this step
  std::int64_t effective_step = -1;  // the first step in the new mode
  bool pooled = false;               // the new mode
  bool trial = false;                // plain steps tried once to measure e, not for a predicted gain
  double predicted_gain = 0.0;       // predicted drop of the mean step time, over the recent steps
  double required_gain = 0.0;        // the bar it cleared (min_pool_gain, model error, noise, damping)
  double pool_overhead = 0.0;        // o: a pooled step's time over B / sum_i x_i, minus 1 (measured; 0 before)
  double chunk_efficiency = 1.0;     // e: the ranks' speed in pooled steps over plain ones (measured; 1 before)
};

// What a policy that chooses the step mode measured and decided; `chooses` is false for the others.
struct PoolingStatus {
  bool chooses = false;
  std::int64_t pooled_steps = 0;  // steps recorded in each mode
  std::int64_t plain_steps = 0;
  double pool_overhead = 0.0;  // o, as last measured (0 until a pooled step was seen)
  bool overhead_measured = false;
  double chunk_efficiency = 1.0;  // e, as last measured across a switch (1 until then)
  bool efficiency_measured = false;
  double model_error = 0.0;             // the decision model's median relative error per step
  double predicted_gain = 0.0;          // of switching the mode, at the last step
  double required_gain = 0.0;           // the bar that gain must clear
  std::vector<PoolingSwitch> switches;  // every switch of the run, in order
};

}  // namespace antdt
