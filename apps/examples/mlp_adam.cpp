// A model of your own on antdt::Job: an MLP classifier (8 -> 32 tanh -> 4, softmax
// cross-entropy) with its own forward, backward and Adam. Adam's moments and step count are
// the program's state: registered with the Job, they go into every checkpoint with the
// parameters and come back on --resume, on any number of ranks.
//
//   mpirun -np 4 antdt-example-mlp-adam --epochs 3 --checkpoint-dir ck --checkpoint-every 50
//   kill -USR1 <mpirun's pid>        # stops after the step under way: checkpoint, exit code 76
//   mpirun -np 2 antdt-example-mlp-adam --epochs 3 --checkpoint-dir ck --resume
//
// The data are generated from the sample index: features in [-1, 1), and a label no linear
// model can learn (two XOR-like bits of the features). Gradients are summed in fixed point, so
// a step's update depends only on which samples it holds, not on how many ranks shared them.
//
// Every line that deals with antdt ends with the marker "// antdt" (docs/job.md counts them):
// the model, the optimizer and the data know nothing of antdt.
#include <antdt/cli.hpp>
#include <antdt/job.hpp>
#include <antdt/report.hpp>
#include <antdt/runtime.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr int kIn = 8, kHidden = 32, kClasses = 4;

// splitmix64 of (a, b): the generator of the data and of the initial weights.
std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + (b + 1) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
double uniform(std::uint64_t a, std::uint64_t b) {  // in [-1, 1)
  return static_cast<double>(mix(a, b) >> 11) / static_cast<double>(1ULL << 52) - 1.0;
}

// Sample i: its features, and its class from the signs of x0*x1 and x2+x3 (XOR-like).
std::array<double, kIn> features(std::int64_t i) {
  std::array<double, kIn> x{};
  for (int j = 0; j < kIn; ++j) x[static_cast<std::size_t>(j)] = uniform(static_cast<std::uint64_t>(i), j);
  return x;
}
int label(const std::array<double, kIn>& x) { return 2 * (x[0] * x[1] > 0 ? 1 : 0) + (x[2] + x[3] > 0 ? 1 : 0); }

// Gradients in fixed point, 32 bits after the binary point: integer sums are exact and the
// same in any order. A step's sum stays far below 2^31 in magnitude.
constexpr double kFixedOne = 4294967296.0;  // 2^32
std::int64_t to_fixed(double g) { return std::llround(g * kFixedOne); }

// The parameters, in one vector: W1 [kHidden x kIn], b1 [kHidden], W2 [kClasses x kHidden], b2.
struct Mlp {
  static constexpr std::size_t kW1 = 0, kB1 = kW1 + kHidden * kIn, kW2 = kB1 + kHidden, kB2 = kW2 + kClasses * kHidden,
                               kCount = kB2 + kClasses;
  std::vector<float> p = std::vector<float>(kCount);

  explicit Mlp(std::uint64_t seed) {  // uniform in +-1/sqrt(fan-in), biases 0
    for (std::size_t k = kW1; k < kB1; ++k) p[k] = static_cast<float>(uniform(seed, k) / std::sqrt(double{kIn}));
    for (std::size_t k = kW2; k < kB2; ++k) p[k] = static_cast<float>(uniform(seed, k) / std::sqrt(double{kHidden}));
  }

  // Forward and backward of sample i: adds its gradient to `sums` (fixed point), returns its
  // loss, and counts it in `correct` when the prediction is right.
  double backward(std::int64_t i, std::span<std::int64_t> sums, std::int64_t& correct) const {
    const auto x = features(i);
    std::array<double, kHidden> h{};
    for (int u = 0; u < kHidden; ++u) {
      double a = p[kB1 + u];
      for (int j = 0; j < kIn; ++j) a += p[kW1 + u * kIn + j] * x[static_cast<std::size_t>(j)];
      h[static_cast<std::size_t>(u)] = std::tanh(a);
    }
    std::array<double, kClasses> z{};
    for (int c = 0; c < kClasses; ++c) {
      double a = p[kB2 + c];
      for (int u = 0; u < kHidden; ++u) a += p[kW2 + c * kHidden + u] * h[static_cast<std::size_t>(u)];
      z[static_cast<std::size_t>(c)] = a;
    }
    const int y = label(x);
    const double top = *std::max_element(z.begin(), z.end());
    double norm = 0;
    for (double& a : z) norm += (a = std::exp(a - top));
    for (double& a : z) a /= norm;  // z is now softmax(z)
    correct += std::max_element(z.begin(), z.end()) - z.begin() == y ? 1 : 0;
    std::array<double, kHidden> dh{};
    for (int c = 0; c < kClasses; ++c) {
      const double dz = z[static_cast<std::size_t>(c)] - (c == y ? 1.0 : 0.0);
      sums[kB2 + c] += to_fixed(dz);
      for (int u = 0; u < kHidden; ++u) {
        sums[kW2 + c * kHidden + u] += to_fixed(dz * h[static_cast<std::size_t>(u)]);
        dh[static_cast<std::size_t>(u)] += dz * p[kW2 + c * kHidden + u];
      }
    }
    for (int u = 0; u < kHidden; ++u) {
      const double da =
          dh[static_cast<std::size_t>(u)] * (1 - h[static_cast<std::size_t>(u)] * h[static_cast<std::size_t>(u)]);
      sums[kB1 + u] += to_fixed(da);
      for (int j = 0; j < kIn; ++j) sums[kW1 + u * kIn + j] += to_fixed(da * x[static_cast<std::size_t>(j)]);
    }
    return -std::log(std::max(z[static_cast<std::size_t>(y)], 1e-300));
  }
};

// Adam (Kingma & Ba), with bias correction.
struct Adam {
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::vector<float> m = std::vector<float>(Mlp::kCount), v = std::vector<float>(Mlp::kCount);
  std::int64_t t = 0;

  // `sums`: the gradient over `total` samples, in fixed point.
  void update(std::vector<float>& p, std::span<const std::int64_t> sums, std::int64_t total) {
    ++t;
    const double c1 = 1 - std::pow(beta1, static_cast<double>(t)), c2 = 1 - std::pow(beta2, static_cast<double>(t));
    for (std::size_t k = 0; k < p.size(); ++k) {
      const double g = static_cast<double>(sums[k]) / kFixedOne / static_cast<double>(total);
      m[k] = static_cast<float>(beta1 * m[k] + (1 - beta1) * g);
      v[k] = static_cast<float>(beta2 * v[k] + (1 - beta2) * g * g);
      p[k] -= static_cast<float>(lr * (m[k] / c1) / (std::sqrt(v[k] / c2) + eps));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);  // antdt
  CLI::App app{"An MLP classifier with its own Adam on antdt::Job (an example)", "antdt-example-mlp-adam"};
  antdt::JobOptions opt;             // antdt
  opt.session.global_batch = 64;     // antdt
  opt.session.max_epochs = 4;        // antdt
  antdt::add_job_options(app, opt);  // antdt
  std::int64_t samples = 2048;
  double lr = 0.01;
  std::uint64_t init_seed = 1;
  app.add_option("--samples", samples, "Samples in the generated data set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", lr, "Adam's learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--init-seed", init_seed, "Seed of the initial weights")->capture_default_str();
  if (const int code = antdt::parse(app, argc, argv, opt); code >= 0) return code;  // antdt

  return antdt::run_main("antdt-example-mlp-adam", [&] {                                 // antdt
    opt.session.dataset_size = samples;                                                  // antdt
    opt.identity = {{"model", "mlp-8-32-4"}, {"init_seed", std::to_string(init_seed)}};  // antdt
    antdt::Job job(opt);                                                                 // antdt
    Mlp model(init_seed);
    Adam adam{lr};
    job.add_state("model/params", model.p);                                                     // antdt
    job.add_state("adam/m", adam.m);                                                            // antdt
    job.add_state("adam/v", adam.v);                                                            // antdt
    job.add_state("adam/t", std::span<std::int64_t>(&adam.t, 1));                               // antdt
    job.on_report([&](antdt::RunSummary& s) {                                                   // antdt
      s.parameter_checksum = antdt::fnv1a_hex(model.p.data(), model.p.size() * sizeof(float));  // antdt
    });                                                                                         // antdt
    std::vector<std::int64_t> sums(Mlp::kCount);
    job.set_probe([&](std::int64_t n) {  // antdt: a micro-step of n samples, timed before a dd run
      std::int64_t ignored = 0;
      for (std::int64_t i = 0; i < n; ++i) (void)model.backward(i % samples, sums, ignored);
    });  // antdt

    while (job.next_step()) {  // antdt
      std::fill(sums.begin(), sums.end(), 0);
      double loss = 0;
      std::int64_t correct = 0;
      for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch()) {  // antdt
        for (const std::int64_t i : batch) loss += model.backward(i, sums, correct);
      }
      const std::int64_t total = job.reduce(sums);  // antdt: exact integer sums over the ranks
      adam.update(model.p, sums, total);
      job.add_loss(loss, correct);  // antdt
    }                               // antdt
    return job.exit_code();         // antdt
  });                               // antdt
}
