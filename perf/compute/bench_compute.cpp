// antdt-bench-compute: host MLP step throughput, and how close the model's GEMMs get to bare
// cblas_sgemm on identical shapes, measured in the same run.
//
// Protocol: for each shape, warm up, then time whole training steps (zero_gradients,
// accumulate, apply_update) for at least --seconds, and time the same GEMM sequence issued
// bare (forward Z = A W^T, backward dW += dZ^T A, dA = dZ W; the first layer has no dA).
// GEMM efficiency = (model GEMM FLOPs / model step time) / (same FLOPs / bare GEMM time):
// everything the model does besides those GEMMs (bias, ReLU, softmax, bias gradients,
// zeroing, optimizer) counts against it. Goal: >= 0.7.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "antdt/config.hpp"
#include "antdt/runtime.hpp"
#include "model/model.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 4;

struct Shape {
  std::vector<std::int64_t> layers;
  std::int64_t batch;
};

// Runs body repeatedly for at least `seconds` (and 3 times), returns seconds per call.
template <class Body>
double time_per_call(double seconds, const Body& body) {
  for (int i = 0; i < 2; ++i) body();  // warm-up: buffers allocated, caches and BLAS threads up
  int calls = 0;
  const auto t0 = Clock::now();
  double elapsed = 0.0;
  do {
    body();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < seconds || calls < 3);
  return elapsed / calls;
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv, antdt::without_jobs);
  double seconds = 0.5;
  if (argc > 1) {
    const std::string a = argv[1];
    const bool help = a == "-h" || a == "--help";
    char* end = nullptr;
    seconds = std::strtod(a.c_str(), &end);
    if (help || end == a.c_str() || *end != '\0' || !(seconds > 0.0)) {
      std::fprintf(help ? stdout : stderr,
                   "usage: antdt-bench-compute [SECONDS]   (seconds per figure, default 0.5)\n");
      return help ? 0 : 2;
    }
  }
  const std::vector<Shape> shapes = {
      {{64, 128, 128, 10}, 512},
      {{784, 256, 256, 10}, 256},
      {{784, 1024, 1024, 10}, 256},
      {{1024, 2048, 2048, 10}, 128},
  };
  std::printf(
      "antdt-bench-compute: host backend, BLAS sgemm (OpenBLAS, %d threads) + %s, SGD, fp32, %.2f s per figure in %d "
      "alternating rounds (best round)\n",
      openblas_get_num_threads(), ANTDT_HAVE_KOKKOS ? "Kokkos (DefaultHostExecutionSpace)" : "plain loops", seconds,
      kRounds);
  std::printf("%-26s %6s %14s %12s %12s %12s %8s\n", "layers", "batch", "samples/s", "step_ms", "model_GF/s",
              "sgemm_GF/s", "ratio");
  for (const Shape& shape : shapes) {
    antdt::MlpConfig cfg;
    cfg.layers = shape.layers;
    auto model = antdt::make_mlp(cfg, antdt::DeviceInfo{});
    const std::int64_t n = shape.batch;
    std::vector<float> x(static_cast<std::size_t>(n * cfg.layers.front()));
    std::vector<std::int32_t> y(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(cfg.layers.back()));

    auto model_step = [&] {
      model->zero_gradients();
      (void)model->accumulate(x.data(), y.data(), n);
      model->apply_update();
    };

    // The same GEMMs, bare, on buffers of the same shapes.
    double flops = 0.0;
    std::int64_t widest = 0;
    for (auto w : cfg.layers) widest = std::max(widest, w);
    std::vector<float> a(static_cast<std::size_t>(n * widest), 0.01f), b(static_cast<std::size_t>(n * widest), 0.02f);
    std::vector<float> w(static_cast<std::size_t>(widest * widest), 0.03f), dw(w.size(), 0.0f);
    for (std::size_t l = 0; l + 1 < cfg.layers.size(); ++l) {
      const double in = static_cast<double>(cfg.layers[l]), out = static_cast<double>(cfg.layers[l + 1]);
      flops += 2.0 * static_cast<double>(n) * in * out * (l == 0 ? 2.0 : 3.0);
    }
    const int rows = static_cast<int>(n);
    auto bare_gemms = [&] {
      for (std::size_t l = 0; l + 1 < cfg.layers.size(); ++l) {
        const int in = static_cast<int>(cfg.layers[l]), out = static_cast<int>(cfg.layers[l + 1]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, a.data(), in, w.data(), in, 0.0f,
                    b.data(), out);
      }
      for (std::size_t l = cfg.layers.size() - 1; l-- > 0;) {
        const int in = static_cast<int>(cfg.layers[l]), out = static_cast<int>(cfg.layers[l + 1]);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1.0f, b.data(), out, a.data(), in, 1.0f,
                    dw.data(), in);
        if (l > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f, b.data(), out, w.data(), in, 0.0f,
                      a.data(), in);
        }
      }
    };
    // Alternating rounds, best of each: on a shared machine the minimum is the least
    // disturbed figure, and alternation exposes both variants to the same load.
    double step = 1e30, bare = 1e30;
    for (int round = 0; round < kRounds; ++round) {
      step = std::min(step, time_per_call(seconds / kRounds, model_step));
      bare = std::min(bare, time_per_call(seconds / kRounds, bare_gemms));
    }
    std::string name;
    for (auto v : cfg.layers) name += (name.empty() ? "" : ",") + std::to_string(v);
    const double model_gflops = flops / step * 1e-9, bare_gflops = flops / bare * 1e-9;
    std::printf("%-26s %6lld %14.0f %12.3f %12.2f %12.2f %8.2f\n", name.c_str(), static_cast<long long>(n),
                static_cast<double>(n) / step, step * 1e3, model_gflops, bare_gflops, model_gflops / bare_gflops);
  }
  std::printf(
      "ratio = model GEMM GFLOP/s within whole steps / bare sgemm GFLOP/s on identical shapes (goal >= 0.70)\n");
  return 0;
}
