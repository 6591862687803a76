// antdt-sim: the real step code at any scale, without MPI or GPUs. One Agent per simulated rank
// and the real StepCoordinator (DDS ledger and data order, coverage counters, Monitor, Controller,
// planner), with modelled compute (b * c / speed_i, transients, jitter) and a modelled network
// of its own. Reports, per policy, efficiency against the ideal sum of standalone throughputs,
// idle fraction, plan changes, duplicated/missing samples, control bytes and the coordinator's
// decision time per step; --summary-json writes the same as JSON.
#include <sys/resource.h>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "antdt/cli.hpp"
#include "antdt/emulation.hpp"
#include "antdt/error.hpp"
#include "antdt/report.hpp"
#include "controller/controller.hpp"
#include "controller/planner.hpp"
#include "core/log.hpp"
#include "sim/simulator.hpp"

namespace {

// 0 or more, in antdt's words ("-1 is not >= 0"), for an option of any number type.
template <class T>
CLI::Validator non_negative(const T&) {
  return antdt::cli::at_least<T>(T{0});
}

using antdt::UsageError;

std::string join(const std::vector<std::int64_t>& v, std::size_t limit = 16) {
  std::ostringstream out;
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) out << (i ? "," : "") << v[i];
  if (v.size() > limit) out << ",...(" << v.size() << ")";
  return out.str();
}

// "v100:0.25,a100:0.5,h100:0.25" (GPU names of the prior table, or relative speeds such as
// "1:0.5,0.5:0.25,0.33:0.25") -> one speed per rank, in contiguous blocks of the fractions.
std::vector<double> speeds_of_profile(const std::string& text, int ranks) {
  std::vector<std::pair<double, double>> entries;  // speed, fraction
  std::stringstream in(text);
  std::string item;
  double total = 0.0;
  while (std::getline(in, item, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw UsageError("--profile: '" + item + "' is not KIND:FRACTION");
    const std::string kind = item.substr(0, colon);
    double speed = antdt::gpu_relative_throughput(0, kind);
    if (!(speed > 0.0)) speed = antdt::parse_speeds(kind).front();  // a relative speed, or a clear error
    const double fraction = antdt::parse_speeds(item.substr(colon + 1)).front();
    entries.emplace_back(speed, fraction);
    total += fraction;
  }
  if (entries.empty() || std::abs(total - 1.0) > 1e-6)
    throw UsageError("--profile: the fractions must add up to 1 (they add up to " + std::to_string(total) + ")");
  std::vector<double> speeds(static_cast<std::size_t>(ranks));
  for (int i = 0; i < ranks; ++i) {
    const double at = (i + 0.5) / ranks;
    double upto = 0.0;
    std::size_t k = 0;
    while (k + 1 < entries.size() && at >= upto + entries[k].second) upto += entries[k++].second;
    speeds[static_cast<std::size_t>(i)] = entries[k].first;
  }
  return speeds;
}

// "3,7:4" -> ranks 3 and 7 have links 4x slower.
std::vector<double> link_factors(const std::string& text, int ranks) {
  std::vector<double> factors(static_cast<std::size_t>(ranks), 1.0);
  const auto colon = text.find(':');
  if (colon == std::string::npos) throw UsageError("--slow-links: expected RANK,RANK...:FACTOR, got '" + text + "'");
  const double factor = antdt::parse_speeds(text.substr(colon + 1)).front();
  for (const double r : antdt::parse_speeds(text.substr(0, colon))) {
    if (r != std::floor(r) || r >= ranks) throw UsageError("--slow-links: " + std::to_string(r) + " is not a rank");
    factors[static_cast<std::size_t>(r)] = factor;
  }
  return factors;
}

std::string json_policy(const antdt::sim::SimResult& r) {
  std::ostringstream o;
  o << std::setprecision(10);
  o << "    {\"policy\": \"" << r.policy << "\", \"ranks\": " << r.ranks << ", \"steps\": " << r.steps
    << ", \"samples\": " << r.samples << ", \"simulated_seconds\": " << r.seconds
    << ", \"throughput\": " << r.throughput << ", \"ideal_throughput\": " << r.ideal_throughput
    << ", \"efficiency\": " << r.efficiency << ", \"settled_from_step\": " << r.settled_from_step
    << ", \"settled_efficiency\": " << r.settled_efficiency << ", \"idle_fraction\": " << r.idle_fraction
    << ", \"plan_changes\": " << r.plan_changes << ", \"last_change_effective_step\": " << r.last_change_effective_step
    << ", \"prediction_error_median\": " << r.prediction_error_median
    << ", \"prediction_error_mean\": " << r.prediction_error_mean
    << ", \"decision_seconds_median\": " << r.decision_seconds_median
    << ", \"decision_seconds_max\": " << r.decision_seconds_max
    << ", \"controller_seconds_median\": " << r.controller_seconds_median
    << ", \"dds_seconds_median\": " << r.dds_seconds_median << ", \"settled_steps\": " << r.settled_steps
    << ", \"decision_waits\": " << r.decision_waits << ", \"decision_wait_seconds\": " << r.decision_wait_seconds
    << ", \"report_bytes\": " << r.report_bytes << ", \"reply_bytes_typical\": " << r.reply_bytes_typical
    << ", \"reply_bytes_max\": " << r.reply_bytes_max << ", \"gather_bytes_at_rank0\": " << r.gather_bytes
    << ", \"control_seconds_median\": " << r.control_seconds_median
    << ", \"allreduce_seconds\": " << r.allreduce_seconds << ", \"duplicated_samples\": " << r.duplicated
    << ", \"missing_samples\": " << r.missing << ", \"restarts\": " << r.restarts.size() << ", \"claims\": " << r.claims
    << ", \"pooled_steps\": " << r.pooling.pooled_steps << ", \"plain_steps\": " << r.pooling.plain_steps
    << ", \"mode_switches\": " << r.pooling.switches.size() << ", \"pool_overhead\": " << r.pooling.pool_overhead
    << ", \"chunk_efficiency\": " << r.pooling.chunk_efficiency << ", \"epochs\": [";
  for (std::size_t i = 0; i < r.coverage.size(); ++i) {
    const auto& c = r.coverage[i];
    o << (i ? ", " : "") << "{\"epoch\": " << c.epoch << ", \"committed\": " << c.committed
      << ", \"missing\": " << c.missing << ", \"duplicated\": " << c.duplicated << "}";
  }
  o << "], \"final_split\": [" << join(r.plans.back().batch, r.plans.back().batch.size()) << "]}";
  return o.str();
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

int run(int argc, char** argv) {
  // The coordinator logs each plan at info; a simulation prints its own summary instead.
  if (std::getenv("ANTDT_LOG_LEVEL") == nullptr) antdt::log::set_level(antdt::log::Level::warn);
  CLI::App app{
      "antdt-sim: the real antdt step code (StepCoordinator, DDS, Controller, one Agent per rank) on simulated\n"
      "ranks whose compute for b samples takes b * c / speed_i seconds (x transients, x jitter), over a\n"
      "modelled network of its own. Efficiency = throughput / sum_i x_i with x_i = speed_i / c (the ideal).",
      "antdt-sim"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string speeds_text, profile, transient_text, schedule_text, network = "auto", slow_links, summary_json;
  std::string nd_pool = "counter";
  int ranks = 0;
  std::vector<std::string> policies{"static", "dd"};
  std::vector<std::int64_t> caps{0};
  std::int64_t batch_per_rank = 0;
  antdt::sim::SimConfig config;
  antdt::ControllerOptions& ctl = config.controller;
  ctl.global_batch = 1024;
  bool show_plans = false, no_charge = false;

  app.add_option("--speeds,--emulate-speed", speeds_text,
                 "Relative speed per rank, comma separated (its length is the world size; default 1,1,1,0.33)");
  app.add_option("--ranks,-n", ranks, "World size, with --profile (or all at speed 1)")->check(CLI::Range(1, 10000000));
  app.add_option("--profile", profile,
                 "Mix of speeds as KIND:FRACTION,...: GPU names of the prior table (v100, a100, h100...) or relative "
                 "speeds, e.g. v100:0.25,a100:0.5,h100:0.25 or 1:0.5,0.5:0.25,0.33:0.25; contiguous blocks of ranks");
  app.add_option("--global-batch,-B", ctl.global_batch, "Global batch B (samples per step, kept constant)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--batch-per-rank", batch_per_rank, "Global batch = this x ranks (instead of --global-batch)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--steps", config.steps, "Steps to simulate")->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("--dataset-size", config.dataset_size, "Samples in the data set (0: 20 global batches)")
      ->check(non_negative(config.dataset_size))
      ->capture_default_str();
  app.add_option("--epochs", config.max_epochs, "Stop after this many epochs (0: by --steps only)")
      ->check(non_negative(config.max_epochs))
      ->capture_default_str();
  app.add_option("--shard-size", config.shard_size, "DDS shard length (0: about 10 global batches)")
      ->check(non_negative(config.shard_size))
      ->capture_default_str();
  antdt::cli::gone_option(app, "prefetch-steps", "it has had no effect since batches became positional");
  app.add_option("--policy", policies,
                 "Controller policies to compare, one after another (static, dd, nd, auto, or a plugin)")
      ->expected(1, -1)
      ->capture_default_str();
  app.add_option("--micro-batch-cap", caps,
                 "Most samples per micro-step m_i: one value for all ranks or one per rank (0: no cap)")
      ->capture_default_str();
  app.add_option("--seconds-per-sample", config.seconds_per_sample, "c: compute seconds per sample at speed 1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--overhead", config.overhead_seconds, "Data wait of every rank in every step (seconds)")
      ->check(non_negative(config.overhead_seconds))
      ->capture_default_str();
  app.add_option("--jitter", config.emulation.jitter, "Uniform noise on compute: time x [1-j, 1+j], j in [0,1)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--emulate-transient", transient_text,
                 "P,FACTOR,STEPS: per rank and step, with probability P a slowdown by FACTOR lasting STEPS steps");
  app.add_option("--emulate-schedule", schedule_text,
                 "RANK:STEP:SPEED,...: from STEP on, that rank runs at SPEED (a rank that turns slow, or recovers)");
  app.add_option("--seed", config.emulation.seed, "Seed of the transient and jitter draws")->capture_default_str();
  app.add_option("--min-gain", ctl.min_gain, "dd: least predicted relative gain to change the plan")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--min-pool-gain", ctl.min_pool_gain,
                 "auto: least predicted relative gain to switch between pooled and plain steps")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--min-interval", ctl.min_interval, "dd: least steps between plan changes")
      ->check(non_negative(ctl.min_interval))
      ->capture_default_str();
  app.add_option("--warmup", ctl.warmup_steps, "Steps the Monitor ignores at the start")
      ->check(non_negative(ctl.warmup_steps))
      ->capture_default_str();
  app.add_option("--window", ctl.window, "Monitor window in steps")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--persistence", ctl.persistence, "Consecutive steps a condition must hold before it counts")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--rejoin-after", ctl.rejoin_after,
                 "Backup workers: seconds of steps before a rank that sits out rejoins for a trial (doubles, up to "
                 "8x, while trials fail)")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  app.add_option("--straggler-ratio", ctl.straggler_ratio, "Slow: throughput below this fraction of the median")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  app.add_option("--plan-lag", ctl.plan_lag, "Extra steps between deciding a plan and applying it")
      ->check(non_negative(ctl.plan_lag))
      ->capture_default_str();
  app.add_option("--reply-lag", config.reply_lag,
                 "1: rank 0 decides a step while the ranks compute the next (its decision time is charged only "
                 "where a step waits for it); 0: every step waits for its decision")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("--alpha", ctl.cost.alpha, "Cost model (what the Controller plans with): allreduce latency (s)")
      ->check(non_negative(ctl.cost.alpha))
      ->capture_default_str();
  app.add_option("--beta", ctl.cost.beta, "Cost model: seconds per byte (1/bandwidth)")
      ->check(non_negative(ctl.cost.beta))
      ->capture_default_str();
  app.add_option("--gradient-bytes", config.gradient_bytes, "Bytes of the gradient all-reduce per step")
      ->check(non_negative(config.gradient_bytes))
      ->capture_default_str();
  app.add_option("--network", network,
                 "Simulated all-reduce: auto (NCCL's pick: the faster of ring and tree for the size), ring, tree, "
                 "binomial (a reduce and a broadcast along binomial trees), rabenseifner (reduce-scatter and "
                 "all-gather), or mpi (antdt's MPI reducer on Open MPI 4.1: rabenseifner from 4 ranks and 64 KiB, "
                 "binomial below)")
      ->check(CLI::IsMember({"auto", "ring", "tree", "binomial", "rabenseifner", "mpi"}))
      ->capture_default_str();
  app.add_option("--link-alpha", config.network.alpha, "Simulated network: latency per message on a link (s)")
      ->check(non_negative(config.network.alpha))
      ->capture_default_str();
  app.add_option("--link-beta", config.network.beta, "Simulated network: seconds per byte on a link")
      ->check(non_negative(config.network.beta))
      ->capture_default_str();
  app.add_option("--link-burst", config.network.link_burst_bytes,
                 "Simulated network: a slow link's token bucket in bytes (tc tbf's burst): the first BYTES of an "
                 "all-reduce's traffic each way cross it at the nominal speed")
      ->check(non_negative(config.network.link_burst_bytes))
      ->capture_default_str();
  app.add_option("--link-atomic", config.network.atomic_seconds,
                 "Simulated network: one remote atomic on rank 0's pool counter (nd's claims), seconds")
      ->check(non_negative(config.network.atomic_seconds))
      ->capture_default_str();
  app.add_option("--backup-workers", config.backup_workers,
                 "dd, nd, auto: ranks that may sit out at once, as in a job (docs/nd.md, \"Sitting out\"); 0 turns "
                 "it off (default 1, or 0 on a single rank)")
      ->check(CLI::Range(-1, 1 << 24));
  app.add_option("--nd-chunks", config.chunks_per_share, "nd: a micro-chunk is about a rank's share / this")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--nd-first-chunk", config.first_chunk,
                 "nd: a step's first chunk is at least this part of a rank's share (0: the usual chunk), in [0, 0.99]")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--nd-pool", nd_pool, "nd: counter (claims on rank 0) or deadline (a predicted compute deadline)")
      ->check(CLI::IsMember({"counter", "deadline"}))
      ->capture_default_str();
  app.add_option("--restart-seconds", config.restart_seconds,
                 "nd: what one kill-restart costs (checkpoint, queue, relaunch), charged to the simulated time and "
                 "given to the Controller as its measured cost (0: unknown: no restart)")
      ->check(non_negative(config.restart_seconds))
      ->capture_default_str();
  app.add_option("--max-restarts", ctl.restart.max_restarts, "nd: kill-restarts over the run")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--chunk-overhead", config.chunk_overhead_seconds,
                 "nd: seconds per micro-chunk besides its compute and claims (its read)")
      ->check(non_negative(config.chunk_overhead_seconds))
      ->capture_default_str();
  app.add_option("--slow-links", slow_links, "RANK,RANK...:FACTOR: these ranks' links are FACTOR times slower");
  app.add_flag("--no-charge-decision", no_charge,
               "Do not add the coordinator's real decision time to the simulated steps (reproducible times)");
  app.add_option("--summary-json", summary_json, "Write the results as JSON here (one object per policy)");
  app.add_flag("--show-plans", show_plans, "Print every policy's plan history");
  antdt::cli::add_env_names(app);
  if (const int code = antdt::parse(app, argc, argv); code >= 0) return code;

  if (!profile.empty() && !speeds_text.empty()) throw UsageError("give --speeds or --profile, not both");
  if (!profile.empty() && ranks < 1) throw UsageError("--profile needs --ranks");
  if (!profile.empty()) {
    config.speeds = speeds_of_profile(profile, ranks);
  } else if (!speeds_text.empty()) {
    config.speeds = antdt::parse_speeds(speeds_text);
    if (ranks > 0 && ranks != static_cast<int>(config.speeds.size()))
      throw UsageError("--ranks " + std::to_string(ranks) + " but --speeds lists " +
                       std::to_string(config.speeds.size()) + " ranks");
  } else {
    config.speeds =
        ranks > 0 ? std::vector<double>(static_cast<std::size_t>(ranks), 1.0) : std::vector<double>{1, 1, 1, 0.33};
  }
  const int world = static_cast<int>(config.speeds.size());
  if (batch_per_rank > 0) ctl.global_batch = batch_per_rank * world;
  if (!transient_text.empty()) antdt::parse_transient(transient_text, config.emulation);
  if (!schedule_text.empty()) config.emulation.schedule = antdt::parse_schedule(schedule_text);
  if (!slow_links.empty()) config.network.link_factor = link_factors(slow_links, world);
  using Allreduce = antdt::sim::NetworkModel::Allreduce;
  config.network.allreduce = network == "tree"           ? Allreduce::tree
                             : network == "ring"         ? Allreduce::ring
                             : network == "binomial"     ? Allreduce::binomial
                             : network == "rabenseifner" ? Allreduce::rabenseifner
                             : network == "mpi"          ? Allreduce::mpi
                                                         : Allreduce::automatic;
  config.charge_decision_time = !no_charge;
  config.pool_mechanism = nd_pool == "deadline" ? antdt::PoolMechanism::deadline : antdt::PoolMechanism::counter;
  for (auto& cap : caps) {
    if (cap < 0) throw UsageError("--micro-batch-cap must be >= 0");
    if (cap == 0) cap = ctl.global_batch;  // no cap: one micro-step holds any share
  }
  ctl.caps = caps;
  config.emulation.speeds = config.speeds;
  config.emulation.virtual_seconds_per_sample = config.seconds_per_sample;

  std::cout << "antdt-sim: simulated ranks on the real step code (no MPI, no real compute; speeds EMULATED)\n"
            << "config: " << world << " ranks, B " << ctl.global_batch << ", steps " << config.steps
            << ", micro-batch cap " << join(caps) << ", c " << config.seconds_per_sample << " s/sample, overhead "
            << config.overhead_seconds << " s, jitter " << config.emulation.jitter << "\n"
            << "        " << config.emulation.describe() << "\n"
            << "network (simulated): " << network << " all-reduce of " << config.gradient_bytes << " B, link alpha "
            << config.network.alpha << " s, beta " << config.network.beta << " s/B"
            << (slow_links.empty() ? "" : ", slow links " + slow_links) << "\n"
            << "cost model (the Controller's): alpha " << ctl.cost.alpha << " s, beta " << ctl.cost.beta << " s/B\n"
            << "controller: window " << ctl.window << ", persistence " << ctl.persistence << ", min gain "
            << ctl.min_gain << ", min interval " << ctl.min_interval << ", warmup " << ctl.warmup_steps << ", plan lag "
            << ctl.plan_lag << ", reply lag " << config.reply_lag
            << (config.charge_decision_time ? "; decision time charged" : "") << "\n\n";

  std::vector<antdt::sim::SimResult> results;
  for (const auto& policy : policies) {
    config.controller.policy = policy;
    results.push_back(antdt::sim::simulate(config));
  }
  std::cout << std::left << std::setw(8) << "policy" << std::right << std::setw(13) << "samples/s" << std::setw(13)
            << "ideal" << std::setw(8) << "eff" << std::setw(9) << "settled" << std::setw(7) << "idle" << std::setw(8)
            << "plans" << std::setw(9) << "pred_err" << std::setw(11) << "decide_ms" << std::setw(8) << "max_ms"
            << std::setw(8) << "ctl_ms" << std::setw(8) << "dds_ms" << std::setw(9) << "reply_B" << std::setw(6)
            << "dup" << std::setw(6) << "miss\n";
  for (const auto& r : results) {
    std::cout << std::left << std::setw(8) << r.policy << std::right << std::fixed << std::setprecision(1)
              << std::setw(13) << r.throughput << std::setw(13) << r.ideal_throughput << std::setprecision(3)
              << std::setw(8) << r.efficiency << std::setw(9) << r.settled_efficiency << std::setw(7) << r.idle_fraction
              << std::setw(8) << r.plan_changes << std::setw(9) << r.prediction_error_median << std::setw(11)
              << 1e3 * r.decision_seconds_median << std::setw(8) << 1e3 * r.decision_seconds_max << std::setw(8)
              << 1e3 * r.controller_seconds_median << std::setw(8) << 1e3 * r.dds_seconds_median << std::setw(9)
              << r.reply_bytes_typical << std::setw(6) << r.duplicated << std::setw(6) << r.missing << "\n";
  }
  std::cout.unsetf(std::ios::floatfield);
  std::cout << "simulated time to the end:";
  for (const auto& r : results) {
    std::cout << " " << r.policy << " " << std::setprecision(4) << r.seconds << " s";
    if (!r.restarts.empty())
      std::cout << " (" << r.restarts.size() << " restart(s), " << config.restart_seconds << " s each)";
  }
  std::cout << "\n";
  for (const auto& r : results)
    for (const auto& d : r.restarts) std::cout << r.policy << " at step " << d.step << ": " << d.reason << "\n";
  for (const auto& r : results) {
    if (!r.pooling.chooses) continue;
    std::cout << r.policy << ": " << r.pooling.pooled_steps << " pooled and " << r.pooling.plain_steps
              << " plain steps, " << r.pooling.switches.size() << " switch(es):";
    for (const auto& w : r.pooling.switches)
      std::cout << " " << (w.pooled ? "pooled" : "plain") << " from step " << w.effective_step;
    std::cout << std::setprecision(3) << "; pool overhead o " << 100.0 * r.pooling.pool_overhead
              << "%, chunk efficiency e " << r.pooling.chunk_efficiency << "\n";
  }
  for (const auto& r : results) {
    std::cout << r.policy << ": " << r.settled_steps << " of " << r.steps
              << " steps settled (decided in their own round); " << r.decision_waits
              << " step(s) waited for rank 0's decision of the step before (" << std::setprecision(4)
              << 1e3 * r.decision_wait_seconds << " ms in all)\n";
  }
  std::cout << "per epoch (committed/missing/duplicated, counted independently of the ledger):";
  for (const auto& r : results) {
    std::cout << "\n  " << r.policy << ":";
    for (const auto& c : r.coverage)
      std::cout << " e" << c.epoch << " " << c.committed << "/" << c.missing << "/" << c.duplicated;
    if (r.coverage.empty()) std::cout << " (no epoch completed)";
  }
  std::cout << "\ncontrol per step: each rank sends " << results.front().report_bytes << " B and receives "
            << results.front().reply_bytes_typical << " B (" << results.front().reply_bytes_max
            << " B with a new plan); rank 0 gathers " << results.front().gather_bytes << " B; modelled exchange "
            << 1e6 * results.front().control_seconds_median << " us, all-reduce "
            << 1e6 * results.front().allreduce_seconds << " us\n";
  if (results.size() >= 2 && results.front().throughput > 0.0) {
    for (std::size_t k = 1; k < results.size(); ++k) {
      std::cout << results[k].policy << " vs " << results.front().policy << ": " << std::setprecision(3)
                << results[k].throughput / results.front().throughput << "x throughput\n";
    }
  }
  for (const auto& r : results) {
    const auto& last = r.plans.back();
    std::cout << r.policy << " final plan v" << last.version << " from step " << last.effective_step << ": batch ["
              << join(last.batch) << "]\n";
    if (!show_plans) continue;
    for (const auto& p : r.plans)
      std::cout << "  v" << p.version << " @" << p.effective_step << " [" << join(p.batch) << "] " << p.reason << "\n";
  }
  std::cout << "peak memory " << peak_rss_kib() / 1024 << " MiB\n";
  if (!summary_json.empty()) {
    std::ofstream out(summary_json);
    out << "{\n  \"ranks\": " << world << ",\n  \"global_batch\": " << ctl.global_batch
        << ",\n  \"steps\": " << config.steps << ",\n  \"emulation\": \"" << config.emulation.describe()
        << "\",\n  \"peak_rss_mib\": " << peak_rss_kib() / 1024 << ",\n  \"policies\": [\n";
    for (std::size_t k = 0; k < results.size(); ++k)
      out << json_policy(results[k]) << (k + 1 < results.size() ? ",\n" : "\n");
    out << "  ]\n}\n";
    out.close();
    if (!out) throw antdt::FileError("cannot write --summary-json " + summary_json);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const antdt::UsageError& e) {
    std::fprintf(stderr, "antdt-sim: error: %s\n", e.what());
    return antdt::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "antdt-sim: error: %s\n", e.what());
    return antdt::kExitRuntime;
  }
}
