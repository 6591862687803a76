// Using antdt::Session with your own model: linear least squares, y = w.x + b, fitted by SGD.
// Nothing here is antdt's built-in MLP; antdt only decides which samples each rank trains on
// (dynamic sharding, speed-proportional micro-batches) and averages the gradients exactly.
//
//   mpirun -np 4 antdt-example-least-squares [steps] [speeds, e.g. 1,1,1,0.5]
//
// The data are generated from the sample index, so every rank can "load" any sample. The
// program exits 0 and prints "antdt consumer OK" when the fit recovers the true weights and
// every sample of every completed epoch was used exactly once.
#include <antdt/antdt.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kDim = 4;
constexpr std::int64_t kSamples = 1000;
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

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  try {
    antdt::SessionOptions opt;
    opt.dataset_size = kSamples;
    opt.global_batch = 64;
    opt.max_steps = argc > 1 ? std::atoll(argv[1]) : 120;
    opt.controller.policy = "dd";
    opt.controller.min_interval = 5;
    if (argc > 2) opt.emulation.speeds = antdt::parse_speeds(argv[2]);
    antdt::Session session(MPI_COMM_WORLD, opt);

    std::vector<double> w(kDim, 0.0);
    double b = 0.0;
    const double lr = 0.2;
    std::vector<float> grad(kDim + 1);  // sums over my samples: dL/dw, dL/db
    double last_loss = 0;
    while (!session.finished()) {
      const antdt::StepWork work = session.begin_step();
      session.mark_data_ready();
      std::fill(grad.begin(), grad.end(), 0.0f);
      double loss = 0;
      for (const std::int64_t i : work.samples) {
        double pred = b;
        for (int j = 0; j < kDim; ++j) pred += w[static_cast<std::size_t>(j)] * feature(i, j);
        const double err = pred - target(i);
        loss += 0.5 * err * err;
        for (int j = 0; j < kDim; ++j) grad[static_cast<std::size_t>(j)] += static_cast<float>(err * feature(i, j));
        grad[kDim] += static_cast<float>(err);
      }
      // Exact average over every sample used this step, on all ranks, whatever the split.
      const std::int64_t used = session.reduce(grad, static_cast<std::int64_t>(work.samples.size()));
      for (int j = 0; j < kDim; ++j) w[static_cast<std::size_t>(j)] -= lr * grad[static_cast<std::size_t>(j)];
      b -= lr * grad[kDim];
      const antdt::StepSummary s = session.end_step(loss);
      if (used > 0) last_loss = s.loss_sum / static_cast<double>(used);
    }

    double max_err = std::abs(b - kTrueB);
    for (int j = 0; j < kDim; ++j) max_err = std::max(max_err, std::abs(w[static_cast<std::size_t>(j)] - kTrueW[j]));
    std::int64_t dup = 0, missing = 0, epochs = 0;
    for (const auto& c : session.coverage()) dup += c.duplicated, missing += c.missing, ++epochs;
    int ok = max_err < 1e-2 && dup == 0 && missing == 0 ? 1 : 0;
    ANTDT_CHECK_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, session.comm().get()));
    if (session.rank() == 0) {
      std::string split;
      for (auto v : session.plan().batch) split += (split.empty() ? "" : ",") + std::to_string(v);
      std::printf(
          "least squares: %d ranks, %lld steps, loss %.3g, max |w - w*| %.2e, split [%s], %lld epochs, "
          "duplicated %lld, missing %lld\n",
          session.size(), static_cast<long long>(session.step()), last_loss, max_err, split.c_str(),
          static_cast<long long>(epochs), static_cast<long long>(dup), static_cast<long long>(missing));
      std::printf(ok ? "antdt consumer OK (antdt %s)\n" : "antdt consumer FAILED (antdt %s)\n", ANTDT_VERSION_STRING);
    }
    return ok ? 0 : 1;
  } catch (const antdt::Error& e) {
    std::fprintf(stderr, "least squares: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}
