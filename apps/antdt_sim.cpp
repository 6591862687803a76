// antdt-sim: what-if studies for the Controller without MPI or GPUs. Virtual ranks with given
// relative speeds (and optional seeded transient slowdowns) run a modelled workload; the SAME
// Controller, Monitor and planner code as a real job decides the plans. Reports efficiency
// against the ideal sum of standalone throughputs, idle fraction and plan changes per policy.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "antdt/controller.hpp"
#include "antdt/emulation.hpp"
#include "antdt/error.hpp"
#include "cli/cli_common.hpp"
#include "controller/simulator.hpp"

namespace {

std::string join(const std::vector<std::int64_t>& v, std::size_t limit = 16) {
  std::ostringstream out;
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) out << (i ? "," : "") << v[i];
  if (v.size() > limit) out << ",...(" << v.size() << ")";
  return out.str();
}

int run(int argc, char** argv) {
  CLI::App app{
      "antdt-sim: discrete-event simulation of heterogeneous data-parallel training.\n"
      "Runs the real antdt Controller/Monitor/planner on virtual ranks whose compute for b samples\n"
      "takes b * c / speed_i seconds (times transient slowdowns and jitter), then an alpha-beta allreduce.\n"
      "Efficiency = throughput / sum_i x_i with x_i = speed_i / c (the ideal; no schedule beats it).",
      "antdt-sim"};
  std::string speeds_text = "1,1,1,0.33";
  std::vector<std::string> policies{"static", "dd"};
  std::string transient_text;
  std::vector<std::int64_t> caps{0};
  antdt::sim::SimConfig config;
  antdt::ControllerOptions& ctl = config.controller;
  ctl.global_batch = 1024;
  bool show_plans = false;

  app.add_option("--speeds,--emulate-speed", speeds_text,
                 "Relative speed per rank, comma separated; the number of entries is the world size")
      ->capture_default_str();
  app.add_option("--global-batch,-B", ctl.global_batch, "Global batch B (samples per step, kept constant)")
      ->capture_default_str();
  app.add_option("--steps", config.steps, "Steps to simulate")->capture_default_str();
  app.add_option(
         "--policy", policies,
         "Controller policies to compare, run one after another (registered: " +
             [] {
               std::string s;
               for (const auto& n : antdt::policy_names()) s += (s.empty() ? "" : ", ") + n;
               return s;
             }() +
             ")")
      ->capture_default_str();
  app.add_option("--micro-batch-cap", caps,
                 "Most samples per micro-step m_i: one value for all ranks or one per rank (0: no cap)")
      ->capture_default_str();
  app.add_option("--seconds-per-sample", config.seconds_per_sample, "c: compute seconds per sample at speed 1")
      ->capture_default_str();
  app.add_option("--overhead", config.overhead_seconds, "Fixed per-step seconds on every rank (reported as data wait)")
      ->capture_default_str();
  app.add_option("--jitter", config.jitter, "Uniform multiplicative noise on compute, in [0,1): time x [1-j, 1+j]")
      ->capture_default_str();
  app.add_option("--emulate-transient", transient_text,
                 "P,FACTOR,STEPS: per rank and step, with probability P a slowdown by FACTOR lasting STEPS steps");
  app.add_option("--seed", config.emulation.seed, "Seed of the transient and jitter draws")->capture_default_str();
  app.add_option("--min-gain", ctl.min_gain, "dd: least predicted relative gain to change the plan")
      ->capture_default_str();
  app.add_option("--min-interval", ctl.min_interval, "dd: least steps between plan changes")->capture_default_str();
  app.add_option("--warmup", ctl.warmup_steps, "Steps ignored at the start")->capture_default_str();
  app.add_option("--window", ctl.window, "Monitor window in steps")->capture_default_str();
  app.add_option("--persistence", ctl.persistence, "Consecutive steps a condition must hold before it counts")
      ->capture_default_str();
  app.add_option("--straggler-ratio", ctl.straggler_ratio, "Slow: throughput below this fraction of the cluster median")
      ->capture_default_str();
  app.add_option("--plan-lag", ctl.plan_lag, "Extra steps between deciding a plan and applying it")
      ->capture_default_str();
  app.add_option("--alpha", ctl.cost.alpha, "Cost model: allreduce latency (s)")->capture_default_str();
  app.add_option("--beta", ctl.cost.beta, "Cost model: seconds per byte (1/bandwidth)")->capture_default_str();
  app.add_option("--gradient-bytes", ctl.cost.gradient_bytes, "Cost model: bytes reduced per step")
      ->capture_default_str();
  app.add_flag("--show-plans", show_plans, "Print every policy's plan history");
  antdt::cli::add_env_names(app);
  if (const int code = antdt::cli::parse(app, argc, argv, 0); code >= 0) return code;

  config.speeds = antdt::parse_speeds(speeds_text);
  if (!transient_text.empty()) antdt::parse_transient(transient_text, config.emulation);
  for (auto& cap : caps) {
    if (cap == 0) cap = ctl.global_batch;  // no cap: one micro-step holds any share
  }
  ctl.caps = caps;
  config.emulation.speeds = config.speeds;
  config.emulation.virtual_seconds_per_sample = config.seconds_per_sample;

  std::cout << "antdt-sim: discrete-event simulation, virtual devices (no MPI, no real compute)\n"
            << "config: " << config.speeds.size() << " ranks, B " << ctl.global_batch << ", steps " << config.steps
            << ", micro-batch cap " << join(caps) << ", overhead " << config.overhead_seconds << " s, jitter "
            << config.jitter << "\n"
            << "        " << config.emulation.describe() << "\n"
            << "cost model: alpha " << ctl.cost.alpha << " s, beta " << ctl.cost.beta << " s/byte, gradient bytes "
            << ctl.cost.gradient_bytes << "\n"
            << "controller: window " << ctl.window << ", persistence " << ctl.persistence << ", min gain "
            << ctl.min_gain << ", min interval " << ctl.min_interval << ", warmup " << ctl.warmup_steps
            << ", straggler ratio " << ctl.straggler_ratio << ", plan lag " << ctl.plan_lag << "\n\n";

  std::vector<antdt::sim::SimResult> results;
  for (const auto& policy : policies) {
    config.controller.policy = policy;
    results.push_back(antdt::sim::simulate(config));
  }
  std::cout << std::left << std::setw(10) << "policy" << std::right << std::setw(14) << "samples/s" << std::setw(12)
            << "ideal" << std::setw(12) << "efficiency" << std::setw(8) << "idle" << std::setw(14) << "plan_changes"
            << std::setw(14) << "last_change" << std::setw(10) << "pred_err" << std::setw(14) << "ctl_us/step"
            << "\n";
  for (const auto& r : results) {
    std::cout << std::left << std::setw(10) << r.policy << std::right << std::fixed << std::setprecision(1)
              << std::setw(14) << r.throughput << std::setw(12) << r.ideal_throughput << std::setprecision(3)
              << std::setw(12) << r.efficiency << std::setw(8) << r.idle_fraction << std::setw(14) << r.plan_changes
              << std::setw(14) << r.last_change_effective_step << std::setw(10) << r.mean_prediction_error
              << std::setprecision(2) << std::setw(14) << 1e6 * r.controller_seconds / static_cast<double>(r.steps)
              << "\n";
  }
  std::cout.unsetf(std::ios::floatfield);
  if (results.size() >= 2 && results.front().throughput > 0.0) {
    for (std::size_t k = 1; k < results.size(); ++k) {
      std::cout << results[k].policy << " vs " << results.front().policy << ": " << std::setprecision(3)
                << results[k].throughput / results.front().throughput << "x throughput\n";
    }
  }
  for (const auto& r : results) {
    const auto& last = r.plans.back();
    std::cout << r.policy << " final plan v" << last.version << " from step " << last.effective_step << ": batch ["
              << join(last.batch) << "] accumulation [" << join({last.accumulation.begin(), last.accumulation.end()})
              << "]\n";
    if (!show_plans) continue;
    for (const auto& p : r.plans) {
      std::cout << "  v" << p.version << " @" << p.effective_step << " [" << join(p.batch) << "] " << p.reason << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const antdt::UsageError& e) {
    std::fprintf(stderr, "antdt-sim: error: %s\n", e.what());
    return antdt::cli::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "antdt-sim: error: %s\n", e.what());
    return antdt::cli::kExitRuntime;
  }
}
