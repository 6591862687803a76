// antdt-bench-controller: what the Controller achieves and what it costs, on the simulator
// core (virtual devices: rank i computes b samples in b * c / speed_i seconds, so sum x_i is
// known exactly and only imbalance, control and the modelled allreduce cost efficiency).
//  1. efficiency (throughput / sum x_i) of static vs dd for two heterogeneous clusters,
//     next to the closed-form limits N min(x)/sum(x) and mean(x)/min(x);
//  2. plan changes per 100 steps when the only noise is transient (no persistent skew);
//  3. the Controller's own cost per step (on_step: record + assess + decide), in microseconds,
//     from 4 to 10,000 ranks (100,000 with --large), and the memory its steps add.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "agent/emulation.hpp"
#include "controller/controller.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "sim/simulator.hpp"

namespace {

using antdt::sim::SimConfig;
using antdt::sim::SimResult;

std::string join(const std::vector<double>& v) {
  std::string s;
  char buf[32];
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%g", i ? "," : "", v[i]);
    s += buf;
  }
  return s;
}

SimConfig base(const std::vector<double>& speeds, std::int64_t steps) {
  SimConfig c;
  c.speeds = speeds;
  c.steps = steps;
  c.seconds_per_sample = 1e-3;
  c.controller.global_batch = 256 * static_cast<std::int64_t>(speeds.size());
  c.controller.caps = {128};
  c.gradient_bytes = 4 * 1'000'000;     // a 1M-parameter fp32 model
  c.controller.cost.beta = 1.0 / 10e9;  // 10 GB/s, as the simulated links
  c.network.beta = 1.0 / 10e9;
  c.charge_decision_time = false;
  return c;
}

void efficiency_case(const std::vector<double>& speeds, std::int64_t steps, double jitter) {
  SimConfig c = base(speeds, steps);
  c.emulation.jitter = jitter;
  c.emulation.seed = 1;
  const double sum = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  const double min = *std::min_element(speeds.begin(), speeds.end());
  const double n = static_cast<double>(speeds.size());
  std::printf("\n%zu ranks, speeds %s, B %lld, caps 128, %lld steps, jitter %g, grad %lld B @ 10 GB/s\n", speeds.size(),
              join(speeds).c_str(), static_cast<long long>(c.controller.global_batch), static_cast<long long>(steps),
              jitter, static_cast<long long>(c.gradient_bytes));
  std::printf("  limits: static N*min/sum = %.3f, balancing gain <= mean/min = %.3fx\n", n * min / sum,
              (sum / n) / min);
  std::printf("  %-8s %12s %12s %8s %8s %8s %12s %10s\n", "policy", "samples/s", "ideal", "eff", "idle", "changes",
              "in_force_at", "pred_err");
  double static_tp = 0.0;
  for (const char* policy : {"static", "dd"}) {
    c.controller.policy = policy;
    const SimResult r = antdt::sim::simulate(c);
    if (static_tp == 0.0) static_tp = r.throughput;
    std::printf("  %-8s %12.1f %12.1f %8.3f %8.3f %8lld %12lld %10.4f\n", policy, r.throughput, r.ideal_throughput,
                r.efficiency, r.idle_fraction, static_cast<long long>(r.plan_changes),
                static_cast<long long>(r.last_change_effective_step), r.prediction_error_mean);
    if (r.policy == "dd") std::printf("  dd / static throughput: %.3fx\n", r.throughput / static_tp);
  }
}

void flapping_case(double p, double factor, std::int64_t duration, int seeds, std::int64_t steps) {
  std::int64_t changes = 0;
  std::int64_t worst = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    SimConfig c = base({1, 1, 1, 1}, steps);
    c.controller.policy = "dd";
    c.emulation.jitter = 0.02;
    c.emulation.transient_probability = p;
    c.emulation.transient_factor = factor;
    c.emulation.transient_steps = duration;
    c.emulation.seed = static_cast<std::uint64_t>(seed);
    const SimResult r = antdt::sim::simulate(c);
    changes += r.plan_changes;
    worst = std::max(worst, r.plan_changes);
  }
  const double per100 = 100.0 * static_cast<double>(changes) / static_cast<double>(seeds * steps);
  const double slowed = 1.0 - std::pow(1.0 - p, static_cast<double>(duration));
  std::printf(
      "  p=%.3f x%g for %2lld step(s) (%4.1f%% of steps slowed): %.3f plan changes / 100 steps (worst seed: %lld in "
      "%lld)\n",
      p, factor, static_cast<long long>(duration), 100.0 * slowed, per100, static_cast<long long>(worst),
      static_cast<long long>(steps));
}

long rss_kib() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * 4;
}

// Controller::on_step (record, assess, decide) on `world` ranks: rank r % 4 == 3 at half speed,
// transient 2x slowdowns (5 % of steps, 3 steps long) and `jitter` on every step's time.
// Prints the median and the worst step, and the resident memory the steps added after the
// first quarter (it must stay flat: nothing grows with the steps).
void cost_case(int world, std::int64_t steps, double jitter) {
  antdt::ControllerOptions o;
  o.policy = "dd";
  o.global_batch = 64LL * world;
  o.caps = {64};
  antdt::Controller c(
      o, antdt::equal_plan(o.global_batch, std::vector<std::int64_t>(static_cast<std::size_t>(world), 64)));
  antdt::EmulationOptions e;
  e.transient_probability = 0.05;
  e.transient_factor = 2;
  e.transient_steps = 3;
  e.jitter = jitter;
  e.virtual_seconds_per_sample = 1e-3;
  std::vector<antdt::SpeedEmulator> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(e, r, world);
  std::vector<antdt::RankStepStats> stats(static_cast<std::size_t>(world));
  std::vector<double> per_step;
  long rss_quarter = 0;
  for (std::int64_t s = 0; s < steps; ++s) {
    const antdt::Plan plan = c.plan_at(s);
    for (int r = 0; r < world; ++r) {
      auto& st = stats[static_cast<std::size_t>(r)];
      const auto& em = ranks[static_cast<std::size_t>(r)];
      st.samples = plan.batch[static_cast<std::size_t>(r)];
      st.compute_seconds =
          static_cast<double>(st.samples) * 1e-3 * (r % 4 == 3 ? 2.0 : 1.0) * em.slowdown(s) * em.noise(s);
      st.reduce_seconds = 1e-3;
    }
    const auto begin = std::chrono::steady_clock::now();
    (void)c.on_step(s, stats);
    per_step.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    if (s == steps / 4) rss_quarter = rss_kib();
  }
  const double worst = *std::max_element(per_step.begin(), per_step.end());
  std::nth_element(per_step.begin(), per_step.begin() + static_cast<std::ptrdiff_t>(per_step.size() / 2),
                   per_step.end());
  std::printf(
      "  world %6d, jitter %.2f: %9.1f us median per on_step, worst %9.1f us (%lld steps, %zu plans); "
      "memory +%ld KiB after step %lld\n",
      world, jitter, 1e6 * per_step[per_step.size() / 2], 1e6 * worst, static_cast<long long>(steps),
      c.history().size(), rss_kib() - rss_quarter, static_cast<long long>(steps / 4));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"antdt-bench-controller: Controller efficiency, stability and cost on the simulator (virtual devices)"};
  std::int64_t steps = 500;
  int seeds = 10;
  app.add_option("--steps", steps, "Simulated steps per run")->capture_default_str();
  app.add_option("--seeds", seeds, "Seeds for the transient-noise runs")->capture_default_str();
  bool large = false;
  app.add_flag("--large", large, "Also measure the controller's cost at 100,000 ranks (about 1.5 GiB, a minute)");
  CLI11_PARSE(app, argc, argv);

  std::printf(
      "antdt-bench-controller: simulator core, virtual devices (c = 1 ms/sample at speed 1), EMULATED speeds\n");
  std::printf("controller defaults: window 20, persistence 5, min gain 0.05, min interval 10, warmup 3, ratio 0.85\n");
  std::printf("\n[1] efficiency = throughput / sum x_i\n");
  efficiency_case({1, 1, 1, 0.33}, steps, 0.0);
  efficiency_case({1, 1, 1, 1, 0.5, 0.5, 0.33, 0.33}, steps, 0.0);
  efficiency_case({1, 1, 1, 1, 0.5, 0.5, 0.33, 0.33}, steps, 0.05);

  std::printf(
      "\n[2] plan changes under transient-only noise (4 ranks, equal speeds, jitter 0.02, %d seeds x %lld steps, dd)\n",
      seeds, static_cast<long long>(steps * 2));
  flapping_case(0.10, 3.0, 1, seeds, steps * 2);
  flapping_case(0.021, 3.0, 5, seeds, steps * 2);
  flapping_case(0.0105, 3.0, 10, seeds, steps * 2);
  flapping_case(0.05, 3.0, 5, seeds, steps * 2);
  flapping_case(0.02, 5.0, 8, seeds, steps * 2);

  std::printf("\n[3] controller cost per step (record + assess + decide, dd, wall clock of this machine)\n");
  for (const double jitter : {0.0, 0.05}) {
    cost_case(4, 4000, jitter);
    cost_case(64, 1000, jitter);
    cost_case(1000, 400, jitter);
    cost_case(10000, 200, jitter);
    if (large) cost_case(100000, 60, jitter);
  }
  return 0;
}
