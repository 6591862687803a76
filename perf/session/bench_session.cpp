// antdt-bench-session: the whole Session loop over MPI, measured the way docs/benchmarks.md
// describes. Three modes, each printing its configuration and ratios measured in one run:
//
//   efficiency  virtual-device run (ranks wait out b*c/speed_i instead of competing for cores,
//               so sum x_i = sum speed_i / c is known exactly), a tiny real MLP, policies
//               static and dd side by side, medians over --repeats.
//               mpirun -np 4 antdt-bench-session --mode efficiency --speeds 1,1,1,0.33
//   overhead    equal speeds, real compute: the Session loop (DDS, control exchange, plan)
//               against a bare loop with the same kernels, fixed batches and a plain
//               MPI_Allreduce. Use at most one rank per core.
//               mpirun -np 2 antdt-bench-session --mode overhead
//   transient   equal speeds with transient-only slowdowns: plan changes per 100 steps.
//               mpirun -np 4 antdt-bench-session --mode transient --transient 0.1,3,1
//   wait        how late the virtual device's wait (antdt::wait_for) wakes, against a plain
//               sleep_until on a thread with the kernel's default timer slack: --repeats x 200
//               waits of --wait-ms each, on one rank; medians and 90th percentiles.
//               antdt-bench-session --mode wait
#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "agent/emulation.hpp"
#include "antdt/antdt.hpp"
#include "comm/reduce.hpp"
#include "core/log.hpp"
#include "core/step_record.hpp"
#include "model/model.hpp"
#include "runtime/device.hpp"
#include "session/session.hpp"

namespace {

using namespace antdt;

struct Options {
  std::string mode = "efficiency";
  std::string speeds;
  std::string transient;
  std::string policies = "static,dd";
  std::int64_t steps = 150;
  std::int64_t warmup = 10;
  int repeats = 3;
  std::int64_t global_batch = 256;
  double virtual_device = 2e-4;
  std::string layers = "16,32,4";
  std::int64_t dataset = 1 << 16;
  double step_timeout = SessionOptions{}.step_timeout_seconds;
  double wait_ms = 9.0;
  std::string fixed_split;  // policy "fixed": static with this split
  double seconds = 0.0;     // > 0: each run's timed part lasts this long (then it stops), not --steps
  int reply_lag = SessionOptions{}.reply_lag;
  int nd_chunks = SessionOptions{}.chunks_per_share;
  double nd_first_chunk = SessionOptions{}.first_chunk;
  double wait_spin = SessionOptions{}.wait_spin_seconds;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Samples are a deterministic function of their index, so no rank needs a file.
void fill(const std::vector<std::int64_t>& idx, std::int64_t dim, std::int64_t classes, std::vector<float>& x,
          std::vector<std::int32_t>& y) {
  x.resize(idx.size() * static_cast<std::size_t>(dim));
  y.resize(idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const auto i = idx[k];
    y[k] = static_cast<std::int32_t>(i % classes);
    for (std::int64_t j = 0; j < dim; ++j) {
      x[k * static_cast<std::size_t>(dim) + static_cast<std::size_t>(j)] =
          static_cast<float>(y[k] == j % classes) + 0.1f * static_cast<float>((i * 31 + j * 17) % 13) / 13.0f;
    }
  }
}

struct RunResult {
  double throughput = 0, ideal = 0, ideal_measured = 0, control_fraction = 0, dds_fraction = 0;
  double pool_us_per_step = 0, atomics_per_step = 0;  // pooled steps, the most of any rank
  std::size_t reply_bytes = 0;                        // most bytes any rank received in one step's control exchange
  std::int64_t plan_changes = 0;
  std::int64_t timed_steps = 0;
  std::int64_t pooled_steps = 0;             // of the timed steps, those its plans pooled
  std::vector<double> x;                     // rank 0's Monitor: each rank's window median speed at the end
  std::int64_t duplicated = 0, missing = 0;  // over the completed epochs (rank 0)
  std::vector<std::int64_t> split;
};

// One Session run; timing covers steps after `warmup`.
RunResult run_session(const Options& o, const std::string& policy, const EmulationOptions& emu) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MlpConfig mc;
  mc.layers = parse_layers(o.layers);
  const DeviceInfo host = select_device(0, DevicePreference::host);
  auto model = make_mlp(mc, host);
  SessionOptions so;
  so.dataset_size = o.dataset;
  so.global_batch = o.global_batch;
  so.max_steps = o.seconds > 0 ? std::int64_t{1} << 40 : o.steps;
  const bool fixed = policy == "fixed";
  so.controller.policy = fixed ? "static" : policy;
  if (fixed) {
    for (const double b : parse_speeds(o.fixed_split)) so.fixed_split.push_back(static_cast<std::int64_t>(b));
  }
  so.controller.min_interval = 10;
  so.emulation = emu;
  so.gradient_bytes = model->gradient_count() * 4;
  so.step_timeout_seconds = o.step_timeout;
  so.reply_lag = o.reply_lag;
  so.chunks_per_share = o.nd_chunks;
  so.first_chunk = o.nd_first_chunk;
  so.wait_spin_seconds = o.wait_spin;
  Session s(MPI_COMM_WORLD, so);
  auto reducer = make_reducer(s.comm(), host);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  const auto dim = mc.layers.front(), classes = mc.layers.back();
  if (policy != "static" && !fixed) {
    fill({0, 1, 2, 3}, dim, classes, x, y);
    s.probe([&](std::int64_t) {
      model->zero_gradients();
      model->accumulate(x.data(), y.data(), 4);
    });
  }
  double t0 = 0, control = 0;
  std::int64_t measured_samples = 0, pooled_steps = 0, timed_steps = 0;
  unsigned long long bytes = 0;
  for (std::int64_t step = 0; !s.finished(); ++step) {
    if (step == o.warmup) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    const double c0 = MPI_Wtime();
    StepWork w = s.begin_step();
    control += step >= o.warmup ? MPI_Wtime() - c0 : 0.0;
    pooled_steps += step >= o.warmup && w.pooled ? 1 : 0;
    timed_steps += step >= o.warmup ? 1 : 0;
    model->zero_gradients();
    if (w.pooled) {  // nd: claim micro-chunks of the step until B are claimed
      for (auto chunk = s.next_chunk(); !chunk.empty(); chunk = s.next_chunk()) {
        fill(chunk, dim, classes, x, y);
        const double t = MPI_Wtime();
        model->accumulate(x.data(), y.data(), static_cast<std::int64_t>(chunk.size()));
        s.chunk_done(MPI_Wtime() - t);
      }
    } else {
      fill(w.samples, dim, classes, x, y);
      s.mark_data_ready();
      std::int64_t off = 0;
      for (auto m : w.micro_batches) {
        model->accumulate(x.data() + off * dim, y.data() + off, m);
        off += m;
      }
    }
    s.reduce_sums(model->gradient_buffer(), model->gradient_count(), *reducer);
    model->apply_update();
    const double c1 = MPI_Wtime();
    const StepSummary sum = s.end_step();
    if (step >= o.warmup) {
      control += MPI_Wtime() - c1;
      // Every step trains B (a summary's totals may be the step before's: the reply lag).
      measured_samples += o.global_batch;
      if (!sum.plan_changed) bytes = std::max<unsigned long long>(bytes, s.control_bytes_received());
      // A timed run: rank 0 asks every rank to stop once the time is up (the next step is the last).
      if (o.seconds > 0 && rank == 0 && MPI_Wtime() - t0 >= o.seconds) s.request_stop();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double wall = MPI_Wtime() - t0;
  double control_max = 0;
  MPI_Allreduce(&control, &control_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  RunResult r;
  r.throughput = static_cast<double>(measured_samples) / wall;
  r.control_fraction = control_max / wall;
  if (emu.virtual_seconds_per_sample > 0) {
    for (int i = 0; i < world; ++i) r.ideal += SpeedEmulator(emu, i, world).virtual_throughput();
  }
  if (emu.virtual_seconds_per_sample <= 0) r.ideal = 0;  // stretch mode: only the measured x_i exist
  if (rank == 0) {
    r.dds_fraction = s.dds_seconds() / s.elapsed_seconds();
    // Stretch mode: the ideal from the steps' own measured speeds, step by step (the summary's
    // ideal_throughput, docs/controller.md "Efficiency"); the window medians only without timing.
    const RunTotals totals = s.totals();
    const auto xs = s.rank_throughput();
    r.ideal_measured = totals.ideal_seconds > 0 ? static_cast<double>(totals.samples) / totals.ideal_seconds
                                                : std::accumulate(xs.begin(), xs.end(), 0.0);
    r.plan_changes = static_cast<std::int64_t>(s.plan_history().size()) - 1;
    r.split = s.plan().batch;
    r.x = xs;
    for (const auto& c : s.coverage()) r.duplicated += c.duplicated, r.missing += c.missing;
  }
  MPI_Bcast(&r.ideal_measured, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(&r.dds_fraction, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (r.ideal <= 0) r.ideal = r.ideal_measured;
  MPI_Bcast(&r.plan_changes, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  r.reply_bytes = bytes;
  r.pooled_steps = pooled_steps;
  r.timed_steps = timed_steps;
  double pool[2] = {1e6 * s.pool_cost().seconds / static_cast<double>(o.steps),
                    static_cast<double>(s.pool_cost().atomics) / static_cast<double>(o.steps)};
  MPI_Allreduce(MPI_IN_PLACE, pool, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.pool_us_per_step = pool[0];
  r.atomics_per_step = pool[1];
  return r;
}

// Same kernels, fixed equal batches of consecutive indices, one plain MPI_Allreduce.
double run_bare(const Options& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MlpConfig mc;
  mc.layers = parse_layers(o.layers);
  auto model = make_mlp(mc, select_device(0, DevicePreference::host));
  const auto dim = mc.layers.front(), classes = mc.layers.back();
  const std::int64_t b = o.global_batch / world + (rank < o.global_batch % world ? 1 : 0);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(b));
  double t0 = 0;
  for (std::int64_t step = 0; step < o.steps; ++step) {
    if (step == o.warmup) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    const std::int64_t first = (step * o.global_batch + rank * b) % (o.dataset - b);
    std::iota(idx.begin(), idx.end(), first);
    fill(idx, dim, classes, x, y);
    model->zero_gradients();
    model->accumulate(x.data(), y.data(), b);
    MPI_Allreduce(MPI_IN_PLACE, model->gradient_buffer(), static_cast<int>(model->gradient_count()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    model->apply_update();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return static_cast<double>(o.global_batch * (o.steps - o.warmup)) / (MPI_Wtime() - t0);
}

// Microseconds past the deadline of each of `n` waits of `ms`, on a new thread (a thread
// inherits its creator's timer slack, and antdt::wait_for sets its own thread's).
std::vector<double> lateness(int n, double ms, bool through_antdt) {
  std::vector<double> late;
  std::thread t([&] {
    using clock = std::chrono::steady_clock;
    const auto length = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::milli>(ms));
    for (int k = 0; k < n; ++k) {
      const auto start = clock::now();
      if (through_antdt) {
        wait_for(std::chrono::duration<double>(length).count());
      } else {
        std::this_thread::sleep_until(start + length);
      }
      late.push_back(std::chrono::duration<double, std::micro>(clock::now() - (start + length)).count());
    }
  });
  t.join();
  return late;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

std::string join_x(const std::vector<double>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(static_cast<long long>(x));
  return s;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  CLI::App app{
      "antdt-bench-session: Session-loop benchmarks (efficiency vs sum x_i, overhead vs a bare loop, transient "
      "stability)"};
  Options o;
  app.add_option("--mode", o.mode, "efficiency, overhead, transient or wait")
      ->check(CLI::IsMember({"efficiency", "overhead", "transient", "wait"}));
  app.add_option("--speeds", o.speeds, "Emulated per-rank speeds (efficiency mode; default 1,..,1,0.33)");
  app.add_option("--transient", o.transient,
                 "P,FACTOR,STEPS slowdowns (transient mode: default 0.1,3,1; efficiency mode: none unless given)");
  app.add_option("--policies", o.policies,
                 "Policies compared in efficiency mode (static, dd, nd, auto, and fixed: static with --fixed-split)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Steps per run")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Steps excluded from timing")->capture_default_str();
  app.add_option("--repeats", o.repeats, "Runs per configuration (the median is reported)")->capture_default_str();
  app.add_option("--global-batch", o.global_batch, "Global batch B")->capture_default_str();
  app.add_option("--virtual-device", o.virtual_device, "Seconds per sample at speed 1 (efficiency/transient)")
      ->capture_default_str();
  app.add_option("--layers", o.layers, "MLP widths")->capture_default_str();
  app.add_option("--step-timeout", o.step_timeout,
                 "Seconds any wait of the job lasts before rank 0 names a stalled rank (0: blocking collectives, "
                 "waits unguarded)")
      ->capture_default_str();
  app.add_option("--fixed-split", o.fixed_split,
                 "Batches per rank, comma separated, for the policy 'fixed' (static with this split)");
  app.add_option(
         "--seconds", o.seconds,
         "Efficiency mode: each run's timed part lasts this many seconds instead of --steps steps (0: by steps)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--reply-lag", o.reply_lag,
                 "1: rank 0 decides a step while the ranks compute the next; 0: every step waits for its decision")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("--nd-chunks", o.nd_chunks, "Policy nd: a micro-chunk is about b_i / this (as antdt-train's)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--nd-first-chunk", o.nd_first_chunk,
                 "Policy nd: a step's first chunk is at least this part of b_i (0: off; as antdt-train's)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--wait-spin", o.wait_spin, "Seconds a waiting rank polls before it naps (as antdt-train's)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--wait-ms", o.wait_ms, "Length of each wait in wait mode, milliseconds (0.001 to 10000)")
      ->check(CLI::Range(0.001, 10000.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int rank = env.world_rank(), world = env.world_size();
  if (std::getenv("ANTDT_LOG_LEVEL") == nullptr) log::set_level(log::Level::warn);  // else as it says

  if (o.mode == "wait") {
    if (rank != 0) return 0;
    std::printf("# wait: %d x 200 waits of %.3g ms, interleaved; microseconds past the deadline\n", o.repeats,
                o.wait_ms);
    std::vector<double> plain, antdt_wait;
    for (int r = 0; r < o.repeats; ++r) {
      for (const double v : lateness(200, o.wait_ms, false)) plain.push_back(v);
      for (const double v : lateness(200, o.wait_ms, true)) antdt_wait.push_back(v);
    }
    std::printf(
        "RESULT wait plain_sleep_median_us=%.1f p90_us=%.1f antdt_wait_for_median_us=%.1f p90_us=%.1f "
        "(lateness of a %.3g ms wait: %.2f%% / %.2f%%)\n",
        percentile(plain, 0.5), percentile(plain, 0.9), percentile(antdt_wait, 0.5), percentile(antdt_wait, 0.9),
        o.wait_ms, 0.1 * percentile(plain, 0.5) / o.wait_ms, 0.1 * percentile(antdt_wait, 0.5) / o.wait_ms);
    return 0;
  }

  if (o.mode == "overhead") {
    if (rank == 0) {
      std::printf(
          "# overhead: %d ranks, equal speeds, REAL compute, MLP %s, B=%lld, %lld steps (%lld warm-up), %d repeats\n",
          world, o.layers.c_str(), static_cast<long long>(o.global_batch), static_cast<long long>(o.steps),
          static_cast<long long>(o.warmup), o.repeats);
      std::printf("%-7s %14s %14s %10s %10s\n", "repeat", "bare samples/s", "antdt samples/s", "ratio", "control");
    }
    std::vector<double> ratios, controls;
    for (int r = 0; r < o.repeats; ++r) {
      const double bare = run_bare(o);
      const RunResult a = run_session(o, "static", {});
      ratios.push_back(a.throughput / bare);
      controls.push_back(a.control_fraction);
      if (rank == 0)
        std::printf("%-7d %14.0f %14.0f %10.3f %9.2f%%\n", r, bare, a.throughput, a.throughput / bare,
                    100 * a.control_fraction);
    }
    if (rank == 0) {
      std::printf(
          "RESULT overhead ranks=%d median_ratio=%.3f (antdt/bare; goal >= 0.97) median_control_fraction=%.4f\n", world,
          median(ratios), median(controls));
    }
    return 0;
  }

  EmulationOptions emu;
  emu.virtual_seconds_per_sample = o.virtual_device;
  if (o.mode == "transient") {
    parse_transient(o.transient.empty() ? "0.1,3,1" : o.transient, emu);
    emu.seed = 11;
    std::vector<double> per100;
    for (int r = 0; r < o.repeats; ++r) {
      emu.seed = 11 + static_cast<std::uint64_t>(r);
      const RunResult a = run_session(o, "dd", emu);
      per100.push_back(100.0 * static_cast<double>(a.plan_changes) / static_cast<double>(o.steps));
      if (rank == 0)
        std::printf("repeat %d: %lld plan changes in %lld steps\n", r, static_cast<long long>(a.plan_changes),
                    static_cast<long long>(o.steps));
    }
    if (rank == 0) {
      std::printf("# transient: %d ranks, equal speeds, EMULATED %s\n", world, emu.describe().c_str());
      std::printf("RESULT transient ranks=%d median_plan_changes_per_100_steps=%.2f (goal <= 1)\n", world,
                  median(per100));
    }
    return 0;
  }

  if (o.speeds.empty()) {
    std::vector<std::string> parts(static_cast<std::size_t>(world), "1");
    if (world > 1) parts.back() = "0.33";
    for (const auto& p : parts) o.speeds += (o.speeds.empty() ? "" : ",") + p;
  }
  emu.speeds = parse_speeds(o.speeds);
  if (!o.transient.empty()) {
    parse_transient(o.transient, emu);
    emu.seed = 11;
  }
  std::vector<std::string> policies;
  for (std::size_t a = 0, b; a <= o.policies.size(); a = b + 1) {
    b = o.policies.find(',', a);
    if (b == std::string::npos) b = o.policies.size();
    policies.push_back(o.policies.substr(a, b - a));
  }
  double min_speed = 1e30, sum_speed = 0;
  for (int i = 0; i < world; ++i) {
    const double sp = emu.speeds.size() == 1 ? emu.speeds[0] : emu.speeds[static_cast<std::size_t>(i)];
    min_speed = std::min(min_speed, sp);
    sum_speed += sp;
  }
  if (rank == 0) {
    if (o.virtual_device <= 0) {
      std::printf(
          "# stretch mode (--virtual-device 0): REAL compute stretched to compute/speed_i; the ideal is the\n"
          "# Monitor's measured sum x_i. Use at most one rank per core.\n");
    }
    std::printf(
        "# efficiency: %d ranks, EMULATED speeds %s on a virtual device (%.2g s/sample at speed 1), tiny MLP %s,\n"
        "# B=%lld, %lld steps (%lld warm-up), %d repeats; static limit N*min(x)/sum(x) = %.3f%s%s\n",
        world, o.speeds.c_str(), o.virtual_device, o.layers.c_str(), static_cast<long long>(o.global_batch),
        static_cast<long long>(o.steps), static_cast<long long>(o.warmup), o.repeats, world * min_speed / sum_speed,
        o.transient.empty() ? "" : "; transient slowdowns ", o.transient.c_str());
    std::printf("%-8s %-6s %12s %12s %10s %12s %8s %8s %s\n", "policy", "repeat", "samples/s", "ideal", "efficiency",
                "eff(meas.x)", "control", "dds", "final split");
  }
  std::vector<std::vector<double>> eff(policies.size()), thr(policies.size()), ctrl(policies.size()),
      dds(policies.size());
  std::size_t reply_bytes = 0;
  for (int r = 0; r < o.repeats; ++r) {
    for (std::size_t p = 0; p < policies.size(); ++p) {  // policies interleaved within each repeat
      const RunResult a = run_session(o, policies[p], emu);
      reply_bytes = std::max(reply_bytes, a.reply_bytes);
      eff[p].push_back(a.throughput / a.ideal);
      thr[p].push_back(a.throughput);
      ctrl[p].push_back(a.control_fraction);
      dds[p].push_back(a.dds_fraction);
      if (rank == 0) {
        std::printf("%-8s %-6d %12.0f %12.0f %10.3f %12.3f %7.2f%% %7.3f%% %s (%lld plan changes)", policies[p].c_str(),
                    r, a.throughput, a.ideal, a.throughput / a.ideal, a.throughput / a.ideal_measured,
                    100 * a.control_fraction, 100 * a.dds_fraction, join(a.split).c_str(),
                    static_cast<long long>(a.plan_changes));
        if (a.atomics_per_step > 0)
          std::printf(" pool: %.1f atomics, %.1f us per step (most of any rank)", a.atomics_per_step,
                      a.pool_us_per_step);
        std::printf("\n");
        // One line per run for scripts (perf/controller/auto-virtual.sh).
        std::printf(
            "RUN policy=%s repeat=%d throughput=%.1f efficiency=%.5f plan_changes=%lld pooled_steps=%lld of %lld "
            "duplicated=%lld missing=%lld split=%s x=%s\n",
            policies[p].c_str(), r, a.throughput, a.throughput / a.ideal, static_cast<long long>(a.plan_changes),
            static_cast<long long>(a.pooled_steps), static_cast<long long>(a.timed_steps),
            static_cast<long long>(a.duplicated), static_cast<long long>(a.missing), join(a.split).c_str(),
            join_x(a.x).c_str());
      }
    }
  }
  if (rank == 0) {
    for (std::size_t p = 0; p < policies.size(); ++p) {
      std::printf(
          "RESULT efficiency ranks=%d speeds=%s policy=%s median_efficiency=%.3f median_throughput=%.0f "
          "median_control_fraction=%.4f median_dds_fraction=%.5f\n",
          world, o.speeds.c_str(), policies[p].c_str(), median(eff[p]), median(thr[p]), median(ctrl[p]),
          median(dds[p]));
    }
    std::printf(
        "RESULT control ranks=%d bytes_received_per_rank_per_step=%zu (the largest, steps without a new plan; "
        "report sent: 69)\n",
        world, reply_bytes);
    if (policies.size() == 2) {
      std::vector<double> ratio;
      for (std::size_t r = 0; r < thr[0].size(); ++r) ratio.push_back(thr[1][r] / thr[0][r]);
      std::printf("RESULT speedup %s/%s median=%.2fx\n", policies[1].c_str(), policies[0].c_str(), median(ratio));
    }
  }
  return 0;
}
