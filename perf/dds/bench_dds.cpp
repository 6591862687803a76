// antdt-bench-dds: what the data sharding service costs.
//   1. Rank 0's steps per second (Coordinator::commit_step, pure, no MPI) at the global
//      batches of 1..8 ranks with uneven shares, with and without a part of each step undone.
//   2. Control bytes each rank receives per step of the Session's exchange, over MPI.
//   3. HDF5 read throughput through the DDS, independent (sec2) vs collective (MPI-IO
//      driver, independent transfers), measured in the same run on the same file.
//   4. Checkpoint of a large ledger (rank 0, pure): serialize + restore of a Ledger and of a
//      Coordinator (coverage bitmaps included) with 10^6 shards in a realistic mid-run state.
//   5. What shuffling within shards costs the reads: each rank's slice of every step read from
//      HDF5, shuffled within its shard or contiguous, at shards of 10 B or B / 64.
//   6. (opt-in, --read-data FILE) What the data order costs the reads of an existing file: each
//      rank reads its slice of the first --read-steps steps under one order (--read-order):
//      `default` (a full permutation per epoch), `local` (shards of 10 B, shuffled within) or
//      `contiguous` (shards of 10 B, not shuffled within). One order per run, so that a script
//      can drop the page cache between runs and interleave them (perf/dds/read-order.sh).
// Protocol: warm up, barrier, clock, loop, barrier, max over ranks; configuration printed
// with the figures. Run with e.g. `mpirun -np 4 antdt-bench-dds`.
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "antdt/runtime.hpp"
#include "dds/dds.hpp"
#include "session/session.hpp"
#include "transport/comm.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double max_over_ranks(const antdt::Communicator& comm, double value) {
  double out = 0;
  MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm.get());
  return out;
}

struct Config {
  std::int64_t samples = 1'000'000;
  std::int64_t shard_size = 320;
  std::int64_t batch = 32;
  int coordinator_steps = 200000;
  int exchange_steps = 5000;
  std::int64_t h5_samples = 200'000;
  std::int64_t h5_dim = 64;
  std::string file;
  std::string sections = "1,2,3,5";  // [4] is opt-in: it builds a 10^6-shard ledger
  std::int64_t ckpt_shards = 1'000'000;
  std::int64_t ckpt_shard_size = 100;
  int ckpt_repeats = 5;
  std::string read_data;
  std::string read_order = "default";
  std::int64_t read_steps = 50;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

void bench_coordinator(const Config& cfg) {
  std::printf(
      "\n[1] coordinator (rank 0, pure): N=%lld shard_size=%lld, B = %lld x {1,2,3} summed over the ranks (uneven "
      "shares), %d steps; 'undone': each step leaves half its last rank's share undone (carried); 'within': "
      "shuffled within shards (the default), else contiguous\n",
      static_cast<long long>(cfg.samples), static_cast<long long>(cfg.shard_size), static_cast<long long>(cfg.batch),
      cfg.coordinator_steps);
  std::printf("%8s %8s %8s %12s %14s %12s\n", "ranks", "within", "undone", "steps/s", "pieces/s", "us/step");
  for (int world = 1; world <= 8; world *= 2) {
    for (const bool within : {false, true}) {
      for (const bool carry : {false, true}) {
        antdt::dds::LedgerOptions o;
        o.dataset_size = cfg.samples;
        o.shard_size = cfg.shard_size;
        o.seed = 1;
        o.shuffle_within_shard = within;
        antdt::dds::Coordinator coordinator(o);
        std::int64_t batch = 0, last = 0;
        for (int r = 0; r < world; ++r) batch += last = cfg.batch * (1 + r % 3);
        const std::vector<antdt::dds::BatchRange> undone{{batch - last / 2, batch}};
        std::int64_t pieces = 0;
        auto step = [&] {
          const auto r =
              coordinator.commit_step(batch, carry ? std::span(undone) : std::span<const antdt::dds::BatchRange>());
          pieces += r.pieces;
        };
        for (int i = 0; i < 200; ++i) step();
        pieces = 0;
        const auto t0 = Clock::now();
        for (int i = 0; i < cfg.coordinator_steps; ++i) step();
        const double t = seconds_since(t0);
        std::printf("%8d %8s %8s %12.0f %14.0f %12.2f\n", world, within ? "yes" : "no", carry ? "yes" : "no",
                    cfg.coordinator_steps / t, static_cast<double>(pieces) / t, 1e6 * t / cfg.coordinator_steps);
        for (const auto& c : coordinator.coverage()) {
          if (c.missing != 0 || c.duplicated != 0)
            std::printf("  COVERAGE ERROR in epoch %lld\n", static_cast<long long>(c.epoch));
        }
      }
    }
  }
  // What every rank pays in begin_step: the indices of its slice, from the order alone.
  for (const std::int64_t slice : {std::int64_t{256}, std::int64_t{32768}}) {
    double us[2] = {0, 0};
    for (const bool within : {false, true}) {
      antdt::dds::LedgerOptions o;
      o.dataset_size = cfg.samples;
      o.shard_size = antdt::dds::local_shard_size(cfg.samples, 4 * slice);  // 4 ranks' batch
      o.seed = 1;
      o.shuffle_within_shard = within;
      const antdt::dds::ShardMap map(o);
      antdt::dds::StepStream stream(o.dataset_size, 0);
      std::vector<double> times;
      volatile std::int64_t sink = 0;  // keeps the indices computed
      for (int i = 0; i < 200; ++i) {
        const auto batch = stream.next(4 * slice);
        const auto t0 = Clock::now();
        const auto indices = map.indices(batch, slice, 2 * slice);  // rank 1's slice
        times.push_back(seconds_since(t0));
        sink = sink + (indices.empty() ? 0 : indices.back());
        stream.advance(batch);
      }
      us[within ? 1 : 0] = 1e6 * median(times);
    }
    std::printf(
        "    a rank's indices of a slice of %lld (4 ranks, shard size 10 B): %.1f us contiguous, %.1f us shuffled "
        "within shards (median of 200 steps)\n",
        static_cast<long long>(slice), us[0], us[1]);
  }
}

// Runs `steps` steps of a Session with no model (equal shares of `demand` per rank) and calls
// `each(work)` between begin_step and end_step.
// `shard_size` 0: the Session's default. Steps read contiguous slices unless `within`.
template <class F>
void run_session_steps(const antdt::Communicator& comm, std::int64_t samples, std::int64_t shard_size,
                       std::int64_t demand, std::int64_t epochs, std::int64_t steps, F&& each, bool within = false) {
  antdt::SessionOptions o;
  o.dataset_size = samples;
  o.shard_size = shard_size;
  o.shuffle_within_shard = within;
  o.global_batch = demand * comm.size();
  o.max_epochs = epochs;
  o.max_steps = steps;
  o.controller.policy = "static";
  antdt::Session session(comm.get(), o);
  while (!session.finished()) {
    const antdt::StepWork w = session.begin_step();
    each(w, session);
    session.end_step();
  }
}

void bench_control(const antdt::Communicator& comm, const Config& cfg) {
  double bytes_sum = 0;
  std::size_t bytes_max = 0;
  double t0 = 0;
  std::int64_t timed = 0;
  run_session_steps(comm, cfg.samples, cfg.shard_size, cfg.batch, 0, 50 + cfg.exchange_steps,
                    [&](const antdt::StepWork& w, const antdt::Session& s) {
                      if (w.step == 50) {
                        comm.barrier();
                        t0 = MPI_Wtime();
                      }
                      if (w.step <= 50) return;  // the previous step's exchange is timed from here on
                      bytes_sum += static_cast<double>(s.control_bytes_received());
                      bytes_max = std::max(bytes_max, s.control_bytes_received());
                      ++timed;
                    });
  const double t = max_over_ranks(comm, MPI_Wtime() - t0);
  MPI_Allreduce(MPI_IN_PLACE, &bytes_sum, 1, MPI_DOUBLE, MPI_MAX, comm.get());
  unsigned long long max_all = bytes_max;
  MPI_Allreduce(MPI_IN_PLACE, &max_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm.get());
  if (comm.is_root()) {
    std::printf(
        "\n[2] the Session's control exchange over MPI: %d ranks, %lld samples per rank per step, shard_size "
        "%lld, %d steps, no model\n",
        comm.size(), static_cast<long long>(cfg.batch), static_cast<long long>(cfg.shard_size), cfg.exchange_steps);
    std::printf(
        "    bytes received per rank per step: mean %.1f, max %llu (one reply slot; it does not grow with "
        "the ranks)\n",
        bytes_sum / static_cast<double>(std::max<std::int64_t>(1, timed)), max_all);
    std::printf(
        "    step latency with no compute: %.1f us/step (max over ranks; ranks oversubscribed if more than "
        "cores)\n",
        1e6 * t / cfg.exchange_steps);
  }
}

// --file, or a temporary file named for rank 0's pid; written by rank 0, on every rank once written.
std::string bench_file(const antdt::Communicator& comm, const Config& cfg, const std::string& what) {
  std::string path = cfg.file;
  if (path.empty()) {
    long long id = comm.is_root() ? static_cast<long long>(::getpid()) : 0;
    MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, comm.get());
    path =
        (std::filesystem::temp_directory_path() / ("antdt-bench-" + what + "-" + std::to_string(id) + ".h5")).string();
  }
  if (comm.is_root()) {
    antdt::data::write_hdf5(path, antdt::data::make_synthetic({cfg.h5_samples, cfg.h5_dim, 10, 3, 1.0f}));
  }
  comm.barrier();
  return path;
}

void remove_bench_file(const antdt::Communicator& comm, const Config& cfg, const std::string& path) {
  comm.barrier();
  if (comm.is_root() && cfg.file.empty()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
}

void bench_hdf5(const antdt::Communicator& comm, const Config& cfg) {
  const std::string path = bench_file(comm, cfg, "dds");
  const double row_bytes = static_cast<double>(cfg.h5_dim) * 4.0 + 4.0;
  struct Result {
    double wall_mbps, read_mbps;
    long long calls;
  };
  auto run = [&](antdt::data::ReadMode mode) {
    antdt::data::Hdf5Dataset data(path, {}, mode, comm.get());
    const std::int64_t demand = 4 * cfg.batch;
    std::vector<float> features(static_cast<std::size_t>(demand * cfg.h5_dim));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(demand));
    double read_time = 0;
    std::int64_t rows = 0;
    comm.barrier();
    const auto t0 = Clock::now();
    run_session_steps(comm, data.size(), cfg.shard_size, demand, 1, 0,
                      [&](const antdt::StepWork& w, const antdt::Session&) {
                        const auto r0 = Clock::now();
                        data.read(w.samples, features.data(), labels.data());
                        read_time += seconds_since(r0);
                        rows += static_cast<std::int64_t>(w.samples.size());
                      });
    const double wall = max_over_ranks(comm, seconds_since(t0));
    const double read_max = max_over_ranks(comm, read_time);
    std::int64_t total_rows = 0;
    MPI_Allreduce(&rows, &total_rows, 1, MPI_INT64_T, MPI_SUM, comm.get());
    long long calls = data.read_calls();
    MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_LONG_LONG, MPI_SUM, comm.get());
    const double mb = static_cast<double>(total_rows) * row_bytes / 1e6;
    return Result{mb / wall, mb / read_max, calls};
  };
  (void)run(antdt::data::ReadMode::independent);  // warm the page cache so both modes see the same state
  Result best[2] = {{0, 0, 0}, {0, 0, 0}};
  for (int rep = 0; rep < 3; ++rep) {  // alternate, keep the best of each
    for (int m = 0; m < 2; ++m) {
      const auto r = run(m == 0 ? antdt::data::ReadMode::independent : antdt::data::ReadMode::collective);
      if (r.read_mbps > best[m].read_mbps) best[m] = r;
    }
  }
  if (comm.is_root()) {
    std::printf(
        "\n[3] HDF5 reads through the DDS: %d ranks, %lld x %lld float32 (%.1f MB), one epoch, shard_size %lld, "
        "%lld samples per rank per step, best of 3 (page cache warm)\n",
        comm.size(), static_cast<long long>(cfg.h5_samples), static_cast<long long>(cfg.h5_dim),
        static_cast<double>(cfg.h5_samples) * row_bytes / 1e6, static_cast<long long>(cfg.shard_size),
        static_cast<long long>(4 * cfg.batch));
    std::printf("%14s %16s %22s %12s\n", "mode", "epoch MB/s", "read-only MB/s (max)", "H5Dread calls");
    const char* names[2] = {"independent", "collective"};
    for (int m = 0; m < 2; ++m)
      std::printf("%14s %16.0f %22.0f %12lld\n", names[m], best[m].wall_mbps, best[m].read_mbps, best[m].calls);
    const double ratio = best[0].read_mbps / best[1].read_mbps;
    std::printf("    faster: %s (independent / collective read throughput = %.2f)\n",
                ratio >= 1.0 ? "independent" : "collective", ratio);
  }
  remove_bench_file(comm, cfg, path);
}

const antdt::dds::Ledger& ledger_of(const antdt::dds::Ledger& l) { return l; }
const antdt::dds::Ledger& ledger_of(const antdt::dds::Coordinator& c) { return c.ledger(); }

// A mid-run state of a big job: two open epochs, the first nearly done. Steps of N/150 (an epoch
// in about 150 steps) run 1.2 % into the second epoch (as in the state measured before this
// design: 31 of 2,560 M), and every step leaves the last 35,672 positions of the first epoch
// undone (as that state had them TODO): carried, taken first by every batch and left again, as
// by a deadline pool whose slowest ranks keep falling short. The ledger holds no rank: the state
// is the same on any world size.
void bench_checkpoint(const Config& cfg) {
  for (const bool within : {false, true}) {
    antdt::dds::LedgerOptions o;
    o.dataset_size = cfg.ckpt_shards * cfg.ckpt_shard_size;
    o.shard_size = cfg.ckpt_shard_size;
    o.seed = 7;
    o.shuffle_within_shard = within;
    const std::int64_t n = o.dataset_size;
    const std::int64_t batch = std::max<std::int64_t>(8, n / 150);
    const std::int64_t kept = std::min<std::int64_t>(n / 2, 35672);  // [n - kept, n) stays TODO
    std::printf(
        "\n[4] checkpoint of a large DDS state (rank 0, pure): %lld shards x %lld = %lld samples, %s within shards, "
        "B = %lld, median of %d\n",
        static_cast<long long>(cfg.ckpt_shards), static_cast<long long>(cfg.ckpt_shard_size), static_cast<long long>(n),
        within ? "shuffled" : "not shuffled", static_cast<long long>(batch), cfg.ckpt_repeats);
    const auto t_build = Clock::now();
    antdt::dds::Coordinator coordinator(o);
    // The offsets of a batch whose positions fall in [n - kept, n).
    const auto kept_of = [&](const antdt::dds::StepBatch& b) {
      std::vector<antdt::dds::BatchRange> out;
      std::int64_t at = 0;
      for (const auto& r : b.ranges) {
        const std::int64_t from = std::max(r.begin, n - kept), to = std::min(r.end, n);
        if (from < to) out.push_back({at + from - r.begin, at + to - r.begin});
        at += r.size();
      }
      return out;
    };
    int steps = 0;
    while (coordinator.ledger().stream().cursor() < n + n / 80) {
      (void)coordinator.commit_step(batch, kept_of(coordinator.next_batch(batch)));
      ++steps;
    }
    const auto first = kept_of(coordinator.next_batch(batch));
    const antdt::dds::Ledger& ledger = coordinator.ledger();
    std::printf("    state after %d steps (built in %.1f s): open epochs", steps, seconds_since(t_build));
    for (const auto& c : ledger.counts()) {
      std::printf(" [e%lld todo %lld done %lld]", static_cast<long long>(c.epoch), static_cast<long long>(c.todo),
                  static_cast<long long>(c.done));
    }
    std::printf("; %zu carried ranges\n", ledger.stream().carried().size());
    std::printf("%14s %12s %14s %12s %12s %12s\n", "object", "bytes", "serialize ms", "restore ms", "total ms",
                "exact");
    auto time_round_trip = [&](const char* name, auto&& save, auto&& load) {
      std::vector<double> ser, res;
      std::size_t bytes = 0;
      bool exact = true;
      for (int i = 0; i < cfg.ckpt_repeats; ++i) {
        auto t0 = Clock::now();
        const std::vector<std::byte> blob = save();
        ser.push_back(seconds_since(t0));
        bytes = blob.size();
        t0 = Clock::now();
        const auto back = load(blob);
        res.push_back(seconds_since(t0));
        if (i == 0) {  // untimed: what was restored saves to the same bytes, and counts the same
          exact = back.serialize() == blob && ledger_of(back).counts() == ledger.counts();
        }
      }
      std::printf("%14s %12zu %14.2f %12.2f %12.2f %12s\n", name, bytes, 1e3 * median(ser), 1e3 * median(res),
                  1e3 * (median(ser) + median(res)), exact ? "yes" : "NO");
      std::printf("RESULT dds_checkpoint_%s_%s_ms %.2f\n", name, within ? "within" : "contiguous",
                  1e3 * (median(ser) + median(res)));
    };
    time_round_trip(
        "ledger", [&] { return ledger.serialize(); },
        [&](const std::vector<std::byte>& b) { return antdt::dds::Ledger::restore(b); });
    time_round_trip(
        "coordinator", [&] { return coordinator.serialize(); },
        [&](const std::vector<std::byte>& b) { return antdt::dds::Coordinator::restore(b); });
    // What the restore defers: the first commit rebuilds each open epoch's bitmap from its runs.
    antdt::dds::Coordinator back = antdt::dds::Coordinator::restore(coordinator.serialize());
    std::vector<double> step_ms;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      (void)back.commit_step(batch, std::span(first));
      step_ms.push_back(1e3 * seconds_since(t0));
    }
    std::printf(
        "    steps after a restore (commit_step): first %.1f ms (rebuilds the open epochs' bitmaps, N/8 bytes each), "
        "then %.1f, %.1f ms\n",
        step_ms[0], step_ms[1], step_ms[2]);
  }
}

// This rank's reads of its slices over `max_steps` steps (0: one epoch) of a Session with equal
// shares: seconds spent in read(), rows read, steps.
struct TimedReads {
  double seconds = 0;
  std::int64_t rows = 0, steps = 0;
};
TimedReads timed_reads(const antdt::Communicator& comm, antdt::data::Hdf5Dataset& data, std::int64_t shard,
                       std::int64_t per_rank, std::int64_t max_steps, bool within) {
  std::vector<float> features(static_cast<std::size_t>(per_rank * data.dim()));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(per_rank));
  TimedReads t;
  run_session_steps(
      comm, data.size(), shard, per_rank, 1, max_steps,
      [&](const antdt::StepWork& work, const antdt::Session&) {
        const auto r0 = Clock::now();
        data.read(work.samples, features.data(), labels.data());
        t.seconds += seconds_since(r0);
        t.rows += static_cast<std::int64_t>(work.samples.size());
        ++t.steps;
      },
      within);
  return t;
}

// Each rank reads its slice of every step of one epoch from HDF5 (independent mode, page cache
// warm), its slice shuffled within its shard or contiguous, at the Session's default shard size
// (10 global batches). Reads only: the cost of the shuffle on the reader, not on a step.
void bench_shuffle(const antdt::Communicator& comm, const Config& cfg) {
  const std::string path = bench_file(comm, cfg, "shuffle");
  const double row_bytes = static_cast<double>(cfg.h5_dim) * 4.0 + 4.0;
  if (comm.is_root()) {
    std::printf(
        "\n[5] reading each step's slice, shuffled within its shard or contiguous: %d ranks, %lld x %lld float32, "
        "shards of 10 B or of B / 64, independent reads, best of 3 (page cache warm)\n",
        comm.size(), static_cast<long long>(cfg.h5_samples), static_cast<long long>(cfg.h5_dim));
    std::printf("%10s %10s %10s %14s %14s %14s\n", "per rank", "shard", "within", "read MB/s", "us per step",
                "H5Dread/step");
  }
  for (const std::int64_t per_rank : {cfg.batch, 8 * cfg.batch}) {
    const std::int64_t batch = per_rank * comm.size();
    for (const std::int64_t shard : {std::min<std::int64_t>(cfg.h5_samples, 10 * batch), (batch + 63) / 64}) {
      double best[2] = {0, 0}, step_us[2] = {0, 0};
      long long calls_per_step[2] = {0, 0};
      for (int rep = 0; rep < 4; ++rep) {  // the first round warms the cache and is not kept
        for (int w = 0; w < 2; ++w) {
          antdt::data::Hdf5Dataset data(path, {}, antdt::data::ReadMode::independent, comm.get());
          const auto [read_time, rows, steps] = timed_reads(comm, data, shard, per_rank, 0, w == 1);
          const double read_max = max_over_ranks(comm, read_time);
          std::int64_t total_rows = 0;
          MPI_Allreduce(&rows, &total_rows, 1, MPI_INT64_T, MPI_SUM, comm.get());
          long long calls = data.read_calls();
          MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_LONG_LONG, MPI_MAX, comm.get());
          const double mbps = static_cast<double>(total_rows) * row_bytes / 1e6 / read_max;
          if (rep > 0 && mbps > best[w]) {
            best[w] = mbps;
            step_us[w] = 1e6 * read_max / static_cast<double>(std::max<std::int64_t>(1, steps));
            calls_per_step[w] = calls / std::max<std::int64_t>(1, steps);
          }
        }
      }
      if (comm.is_root()) {
        for (int w = 0; w < 2; ++w) {
          std::printf("%10lld %10lld %10s %14.0f %14.1f %14lld\n", static_cast<long long>(per_rank),
                      static_cast<long long>(shard), w ? "shuffled" : "off", best[w], step_us[w], calls_per_step[w]);
        }
      }
    }
  }
  remove_bench_file(comm, cfg, path);
}

// One run of section 6: the first `read_steps` steps of one epoch of an existing file under one
// data order, each rank reading its slice (independent mode); times only the reads.
void bench_read_order(const antdt::Communicator& comm, const Config& cfg) {
  antdt::data::Hdf5Dataset data(cfg.read_data, {}, antdt::data::ReadMode::independent, comm.get());
  const std::int64_t per_rank = cfg.batch, dim = data.dim();
  const std::int64_t local = antdt::dds::local_shard_size(data.size(), per_rank * comm.size());
  std::int64_t shard = 0;
  bool within = true;
  if (cfg.read_order == "local") {
    shard = local;
  } else if (cfg.read_order == "contiguous") {
    shard = local;
    within = false;
  } else if (cfg.read_order != "default") {
    throw antdt::UsageError("--read-order must be default, local or contiguous, got '" + cfg.read_order + "'");
  }
  const auto [read_time, rows, steps] = timed_reads(comm, data, shard, per_rank, cfg.read_steps, within);
  const double read_max = max_over_ranks(comm, read_time);
  std::int64_t total_rows = 0;
  MPI_Allreduce(&rows, &total_rows, 1, MPI_INT64_T, MPI_SUM, comm.get());
  long long calls = data.read_calls();
  MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_LONG_LONG, MPI_SUM, comm.get());
  if (comm.is_root()) {
    const double mb = static_cast<double>(total_rows) * static_cast<double>(dim) * 4.0 / 1e6;
    std::printf("\n[6] read order %s: %d ranks x %lld rows a step of %lld x %lld float32, shard %lld%s, %lld steps\n",
                cfg.read_order.c_str(), comm.size(), static_cast<long long>(per_rank),
                static_cast<long long>(data.size()), static_cast<long long>(dim),
                static_cast<long long>(shard == 0 ? data.size() : shard), within ? " shuffled within" : " contiguous",
                static_cast<long long>(steps));
    std::printf("read-order\t%s\tseconds\t%.4f\tms_per_step\t%.3f\tMB_per_s\t%.1f\treads_per_step\t%.1f\n",
                cfg.read_order.c_str(), read_max,
                1e3 * read_max / static_cast<double>(std::max<std::int64_t>(1, steps)), mb / read_max,
                static_cast<double>(calls) / static_cast<double>(std::max<std::int64_t>(1, steps)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  Config cfg;
  CLI::App app{"antdt-bench-dds: DDS coordinator throughput, control bytes per step, HDF5 read throughput"};
  app.add_option("--samples", cfg.samples, "data set size for [1] and [2]");
  app.add_option("--shard-size", cfg.shard_size, "positions per shard");
  app.add_option("--batch", cfg.batch, "base per-rank demand per step");
  app.add_option("--coordinator-steps", cfg.coordinator_steps, "timed steps per client count in [1]");
  app.add_option("--exchange-steps", cfg.exchange_steps, "timed steps in [2]");
  app.add_option("--h5-samples", cfg.h5_samples, "rows of the HDF5 file in [3]");
  app.add_option("--h5-dim", cfg.h5_dim, "features per row in [3]");
  app.add_option("--file", cfg.file, "HDF5 file to write and read in [3] (default: a temporary file)");
  app.add_option("--sections", cfg.sections, "which sections to run, e.g. 1,2,3,5 (default) or 4")
      ->capture_default_str();
  app.add_option("--ckpt-shards", cfg.ckpt_shards, "shards of the ledger checkpointed in [4]")->capture_default_str();
  app.add_option("--ckpt-shard-size", cfg.ckpt_shard_size, "samples per shard in [4]")->capture_default_str();
  app.add_option("--ckpt-repeats", cfg.ckpt_repeats, "repeats in [4] (the median is printed)")->capture_default_str();
  app.add_option("--read-data", cfg.read_data, "existing HDF5 file read in [6] (giving it runs [6] only)");
  app.add_option("--read-order", cfg.read_order,
                 "[6]: default (full permutation), local (shards of 10 B) or contiguous")
      ->capture_default_str();
  app.add_option("--read-steps", cfg.read_steps, "[6]: steps read (--batch rows per rank each)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!cfg.read_data.empty()) cfg.sections = "6";
  const auto run_section = [&](int k) { return cfg.sections.find(std::to_string(k)) != std::string::npos; };
  try {
    auto comm = antdt::Communicator::duplicate(MPI_COMM_WORLD);
    if (comm.is_root()) {
      std::printf("antdt-bench-dds: %d MPI ranks on %ld online cores (no emulation; real compute of the DDS only)\n",
                  comm.size(), ::sysconf(_SC_NPROCESSORS_ONLN));
      if (run_section(1)) bench_coordinator(cfg);
      if (run_section(4)) bench_checkpoint(cfg);
    }
    comm.barrier();
    if (run_section(2)) bench_control(comm, cfg);
    if (run_section(3)) bench_hdf5(comm, cfg);
    if (run_section(5)) bench_shuffle(comm, cfg);
    if (run_section(6)) bench_read_order(comm, cfg);
  } catch (const antdt::Error& e) {
    std::fprintf(stderr, "antdt-bench-dds: %s\n", e.what());
    return 1;
  }
  return 0;
}
