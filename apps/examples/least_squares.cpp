// Your own model on antdt::Job: linear least squares, y = w.x + b, fitted by SGD.
// Nothing here is antdt's built-in MLP. antdt decides which samples each rank trains on and
// sums the gradients; the Job gives the program a production run's life: checkpoints and
// --resume on any number of ranks, SIGTERM/SIGUSR1 -> a checkpoint and exit code 76, outputs
// (docs/job.md walks through it).
//
//   mpirun -np 4 antdt-example-least-squares --steps 150 --emulate-speed 1,1,1,0.5
//   mpirun -np 4 antdt-example-least-squares --checkpoint-dir ck --checkpoint-every 20
//   mpirun -np 3 antdt-example-least-squares --checkpoint-dir ck --resume     # after a stop
//
// The data are generated from the sample index, so every rank can "load" any sample. The
// gradients are summed in fixed point (Job::reduce on integers): a step's update depends only
// on which samples it holds, not on how they were split between ranks, so a resumed run is
// bit-identical to an uninterrupted one. At the end (not after a stop) rank 0 says how far the
// fit is from the true weights.
#include <antdt/cli.hpp>
#include <antdt/job.hpp>
#include <antdt/report.hpp>
#include <antdt/runtime.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kDim = 4;
const double kTrueW[kDim] = {0.5, -1.0, 2.0, 0.25};
constexpr double kTrueB = 0.75;

// Deterministic pseudo-random features in [-1, 1) from (index, j).
double feature(std::int64_t i, int j) {
  std::uint64_t z =
      static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(j + 1) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ULL << 52) - 1.0;
}

double target(std::int64_t i) {
  double y = kTrueB;
  for (int j = 0; j < kDim; ++j) y += kTrueW[j] * feature(i, j);
  return y;
}

// Gradients in fixed point, 32 bits after the binary point: integer sums are exact, so they do
// not depend on the order of the samples or on the ranks that computed them. A sum over a step
// stays below 2^31 in magnitude (here a few hundred at most).
constexpr double kFixedOne = 4294967296.0;  // 2^32
std::int64_t to_fixed(double g) { return std::llround(g * kFixedOne); }
double from_fixed(std::int64_t g) { return static_cast<double>(g) / kFixedOne; }

// Adds sample i's gradient of 0.5 (w.x + b - y)^2 to `sums` (w then b); returns its loss.
double add_gradient(const std::vector<double>& wb, std::int64_t i, std::vector<std::int64_t>& sums) {
  double pred = wb[kDim];
  for (int j = 0; j < kDim; ++j) pred += wb[static_cast<std::size_t>(j)] * feature(i, j);
  const double err = pred - target(i);
  for (int j = 0; j < kDim; ++j) sums[static_cast<std::size_t>(j)] += to_fixed(err * feature(i, j));
  sums[kDim] += to_fixed(err);
  return 0.5 * err * err;
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  CLI::App app{"Linear least squares on antdt::Job (an example of a training code of your own)",
               "antdt-example-least-squares"};
  antdt::JobOptions opt;  // this program's defaults; every option below can change them
  opt.session.global_batch = 64;
  opt.session.max_steps = 120;
  opt.session.controller.min_interval = 5;
  antdt::add_job_options(app, opt);
  std::int64_t samples = 1000;
  double lr = 0.2;
  app.add_option("--samples", samples, "Samples in the generated data set")
      ->check(antdt::cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--lr", lr, "SGD learning rate")->check(antdt::cli::positive<double>())->capture_default_str();
  if (const int code = antdt::parse(app, argc, argv, opt); code >= 0) return code;

  return antdt::run_main("antdt-example-least-squares", [&] {
    opt.session.dataset_size = samples;
    opt.identity = {{"model", "least-squares-" + std::to_string(kDim)}};  // a resume checks it
    antdt::Job job(opt);
    std::vector<double> wb(kDim + 1, 0.0);  // w, then b: the same on every rank
    job.add_state("model/wb", wb);
    job.on_report(
        [&](antdt::RunSummary& s) { s.parameter_checksum = antdt::fnv1a_hex(wb.data(), wb.size() * sizeof(double)); });

    std::vector<std::int64_t> sums(wb.size());
    while (job.next_step()) {
      std::fill(sums.begin(), sums.end(), 0);
      double loss = 0;
      for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch()) {
        for (const std::int64_t i : batch) loss += add_gradient(wb, i, sums);
      }
      const auto total = static_cast<double>(job.reduce(sums));  // summed over ranks; B samples
      for (std::size_t k = 0; k < wb.size(); ++k) wb[k] -= lr * from_fixed(sums[k]) / total;
      job.add_loss(loss);
    }

    if (job.exit_code() == 0 && job.rank() == 0) {
      double max_err = std::abs(wb[kDim] - kTrueB);
      for (int j = 0; j < kDim; ++j) max_err = std::max(max_err, std::abs(wb[static_cast<std::size_t>(j)] - kTrueW[j]));
      std::printf("least squares: %d ranks, step %lld, max |w - w*| %.2e: %s\n", job.size(),
                  static_cast<long long>(job.step()), max_err,
                  max_err < 1e-2 ? "the true weights recovered" : "not yet converged (train longer)");
    }
    return job.exit_code();
  });
}
