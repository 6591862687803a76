// antdt-bench-gpu: a standalone GPU self-check and benchmark of the CUDA MLP backend that
// needs only nvcc, the CUDA runtime and cuBLAS (no MPI, HDF5, Kokkos, GoogleTest), so that it
// runs on a GPU machine that has nothing else (perf/gpu-check.sh builds it there by hand; the
// CMake build compiles it everywhere CUDA is on, so it never rots).
//
// Checks (exit 1 on failure): backward vs central finite differences of a double-precision
// reference; one SGD-momentum step vs a hand-written reference; learning Gaussian clusters.
// Bench: step throughput (zero, accumulate incl. the host->device copy of the batch, update)
// and the model's GEMM TFLOP/s vs bare cuBLAS sgemm on identical shapes (goal >= 0.6).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "host/mlp_common.hpp"
#include "mlp_reference.hpp"  // tests/compute: the tests' data and reference MLP
#include "model/model.hpp"

// ANTDT_BENCH_HOST_BACKEND: 1 when kernels/host/mlp_host.cpp and a BLAS are linked in (the
// CMake targets and perf/gpu-bundle.sh), so the host/CUDA agreement check runs; 0 when
// perf/gpu-check.sh builds this by hand on a GPU machine that has no BLAS.
#ifndef ANTDT_BENCH_HOST_BACKEND
#define ANTDT_BENCH_HOST_BACKEND 0
#endif

// The bench links the CUDA model and the backend-independent MLP code only; these are the
// library symbols that code refers to and that live elsewhere in libantdt.
namespace antdt::detail {
#if !ANTDT_BENCH_HOST_BACKEND
std::unique_ptr<Model> make_host_mlp(const MlpConfig&) { throw Error("antdt-bench-gpu has no host backend"); }
#endif
void assertion_failed(const char* cond, const char* msg, const char* file, int line) noexcept {
  std::fprintf(stderr, "assertion failed: %s (%s) at %s:%d\n", cond, msg, file, line);
  std::abort();
}
}  // namespace antdt::detail

namespace {

using antdt::BatchResult;
using antdt::Model;
using antdt::test::central_difference_gradient;
using antdt::test::gaussian_clusters;
using antdt::test::reference_loss_sum;
using antdt::test::relative_error;
using antdt::test::Samples;

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

bool report(const char* what, bool ok, const std::string& detail) {
  std::printf("  [%s] %s: %s\n", ok ? "PASS" : "FAIL", what, detail.c_str());
  return ok;
}

bool self_checks(const antdt::DeviceInfo& dev, bool learning) {
  bool ok = true;
  {  // gradient check
    antdt::MlpConfig cfg;
    cfg.layers = {5, 7, 6, 3};
    auto m = antdt::make_mlp(cfg, dev);
    std::vector<float> p = m->parameters();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] += 0.05f * static_cast<float>(static_cast<int>(i % 7) - 3);
    m->set_parameters(p);
    const Samples d = gaussian_clusters(6, 5, 3, 2.0, 99);
    m->zero_gradients();
    const BatchResult r = m->accumulate(d.features.data(), d.labels.data(), 6);
    const std::vector<float> g = antdt::gradient_snapshot(*m);
    const std::vector<double> pd(p.begin(), p.end());
    const std::vector<float> fd = central_difference_gradient(cfg.layers, pd, d);
    const double e = relative_error(antdt::test::sums_of(g), fd);
    const double loss = reference_loss_sum(cfg.layers, pd, d);
    ok &= report("gradient vs central differences", e < 1e-4 && antdt::test::count_of(g) == 6, "rel err " + sci(e));
    ok &= report("loss vs double reference", std::fabs(r.loss_sum - loss) < 1e-5 * std::fabs(loss),
                 std::to_string(r.loss_sum) + " vs " + std::to_string(loss));
  }
  {  // one SGD momentum step, twice
    antdt::MlpConfig cfg;
    cfg.layers = {4, 8, 3};
    cfg.learning_rate = 0.1f;
    cfg.weight_decay = 0.01f;
    auto m = antdt::make_mlp(cfg, dev);
    std::vector<float> p = m->parameters(), v(p.size(), 0.0f);
    for (int step = 0; step < 2; ++step) {
      const Samples d = gaussian_clusters(10, 4, 3, 2.0, 50 + static_cast<std::uint64_t>(step));
      m->zero_gradients();
      (void)m->accumulate(d.features.data(), d.labels.data(), 10);
      const std::vector<float> g = antdt::gradient_snapshot(*m);
      for (std::size_t i = 0; i < p.size(); ++i) {
        v[i] = cfg.momentum * v[i] + g[i] / static_cast<float>(antdt::test::count_of(g)) + cfg.weight_decay * p[i];
        p[i] -= cfg.learning_rate * v[i];
      }
      m->apply_update();
    }
    const double e = relative_error(m->parameters(), p);
    ok &= report("SGD momentum steps vs reference", e < 1e-6, "rel err " + sci(e));
  }
  {  // host and CUDA agree (the same check as tests/compute ModelAgreement.HostAndCudaAgreeWithin1e4)
    if (!ANTDT_BENCH_HOST_BACKEND) {
      std::printf(
          "  [SKIP] host/CUDA agreement: built without the host backend (no BLAS here); "
          "perf/gpu-bundle.sh builds a binary that has it\n");
    } else {
      antdt::MlpConfig cfg;
      cfg.layers = {16, 64, 32, 5};
      cfg.optimizer = antdt::OptimizerKind::adam;
      cfg.learning_rate = 0.01f;
      auto host = antdt::make_mlp(cfg, antdt::DeviceInfo{});
      auto gpu = antdt::make_mlp(cfg, dev);
      const Samples d = gaussian_clusters(300, 16, 5, 3.0, 3);
      double worst_loss = 0.0, worst_grad = 0.0;
      for (int step = 0; step < 3; ++step) {
        host->zero_gradients();
        gpu->zero_gradients();
        const float* x = d.features.data() + step * 100 * 16;
        const std::int32_t* y = d.labels.data() + step * 100;
        const BatchResult a = antdt::accumulate_micro_batches(*host, x, y, 100, 37);
        const BatchResult b = antdt::accumulate_micro_batches(*gpu, x, y, 100, 37);
        worst_loss = std::max(worst_loss, std::fabs(a.loss_sum - b.loss_sum) / std::fabs(a.loss_sum));
        worst_grad =
            std::max(worst_grad, relative_error(antdt::gradient_snapshot(*gpu), antdt::gradient_snapshot(*host)));
        host->apply_update();
        gpu->apply_update();
      }
      const double params = relative_error(gpu->parameters(), host->parameters());
      const double state = relative_error(gpu->optimizer_state(), host->optimizer_state());
      ok &= report("host/CUDA agreement, 3 Adam steps with micro-batches (<= 1e-4)",
                   worst_loss <= 1e-4 && worst_grad <= 1e-4 && params <= 1e-4 && state <= 1e-4,
                   "loss " + sci(worst_loss) + ", gradients " + sci(worst_grad) + ", parameters " + sci(params) +
                       ", Adam state " + sci(state));
    }
  }
  if (learning) {  // learning
    antdt::MlpConfig cfg;
    cfg.layers = {8, 32, 32, 4};
    auto m = antdt::make_mlp(cfg, dev);
    const Samples train = gaussian_clusters(4096, 8, 4, 6.0, 1), test = gaussian_clusters(1024, 8, 4, 6.0, 2);
    for (std::int64_t s = 0; s < 120; ++s) {
      const std::int64_t first = (s * 32) % 4096;
      m->zero_gradients();
      (void)m->accumulate(train.features.data() + first * 8, train.labels.data() + first, 32);
      m->apply_update();
    }
    const double acc =
        static_cast<double>(m->evaluate(test.features.data(), test.labels.data(), 1024).correct) / 1024.0;
    ok &= report("learns Gaussian clusters (>= 0.9 in 120 steps)", acc >= 0.9, "accuracy " + std::to_string(acc));
  }
  return ok;
}

void bench(const antdt::DeviceInfo& dev, const std::vector<std::int64_t>& layers, std::int64_t n, double seconds) {
  antdt::MlpConfig cfg;
  cfg.layers = layers;
  auto m = antdt::make_mlp(cfg, dev);
  std::vector<float> x(static_cast<std::size_t>(n * layers.front()));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(layers.back()));
  auto step = [&] {
    m->zero_gradients();
    (void)m->accumulate(x.data(), y.data(), n);
    m->apply_update();
  };
  for (int i = 0; i < 3; ++i) step();
  m->synchronize();
  // Whole steps for `seconds` (5 at least): the wall time per step, the CUDA-event time of
  // accumulate() per step (H2D batch copy, forward, loss, backward), and the step count.
  struct Timing {
    double t_step, device_ms;
    int steps;
  };
  auto time_steps = [&] {
    int steps = 0;
    double device_seconds = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    double wall = 0.0;
    do {
      m->zero_gradients();
      device_seconds += m->accumulate(x.data(), y.data(), n).device_seconds;
      m->apply_update();
      ++steps;
      wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (wall < seconds || steps < 5);
    m->synchronize();
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return Timing{wall / steps, device_seconds / steps * 1e3, steps};
  };
  const Timing pageable = time_steps();
  // The same steps with the batch in page-locked memory (antdt-train's default, --pin-memory):
  // the H2D copy then runs at DMA speed instead of through the driver's bounce buffer.
  ANTDT_CHECK_CUDA(cudaHostRegister(x.data(), x.size() * sizeof(float), cudaHostRegisterDefault));
  ANTDT_CHECK_CUDA(cudaHostRegister(y.data(), y.size() * sizeof(std::int32_t), cudaHostRegisterDefault));
  const Timing pinned = time_steps();
  ANTDT_CHECK_CUDA(cudaHostUnregister(x.data()));
  ANTDT_CHECK_CUDA(cudaHostUnregister(y.data()));
  const int steps = std::max(pageable.steps, pinned.steps);

  // Bare cuBLAS: the same GEMM sequence on device buffers of the same shapes.
  double flops = 0.0;
  std::int64_t widest = 0;
  for (auto w : layers) widest = std::max(widest, w);
  for (std::size_t l = 0; l + 1 < layers.size(); ++l) {
    flops += 2.0 * static_cast<double>(n) * static_cast<double>(layers[l]) * static_cast<double>(layers[l + 1]) *
             (l == 0 ? 2.0 : 3.0);
  }
  float *a = nullptr, *b = nullptr, *w = nullptr, *dw = nullptr;
  const std::size_t act = static_cast<std::size_t>(n * widest) * sizeof(float);
  const std::size_t wts = static_cast<std::size_t>(widest * widest) * sizeof(float);
  ANTDT_CHECK_CUDA(cudaMalloc(&a, act));
  ANTDT_CHECK_CUDA(cudaMalloc(&b, act));
  ANTDT_CHECK_CUDA(cudaMalloc(&w, wts));
  ANTDT_CHECK_CUDA(cudaMalloc(&dw, wts));
  ANTDT_CHECK_CUDA(cudaMemset(a, 0, act));
  ANTDT_CHECK_CUDA(cudaMemset(b, 0, act));
  ANTDT_CHECK_CUDA(cudaMemset(w, 0, wts));
  ANTDT_CHECK_CUDA(cudaMemset(dw, 0, wts));
  cublasHandle_t h = nullptr;
  ANTDT_CHECK_CUBLAS(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f;
  const int rows = static_cast<int>(n);
  auto gemms = [&] {
    for (std::size_t l = 0; l + 1 < layers.size(); ++l) {
      const int in = static_cast<int>(layers[l]), out = static_cast<int>(layers[l + 1]);
      ANTDT_CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, in, a, in, &zero, b, out));
    }
    for (std::size_t l = layers.size() - 1; l-- > 0;) {
      const int in = static_cast<int>(layers[l]), out = static_cast<int>(layers[l + 1]);
      ANTDT_CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one, a, in, b, out, &one, dw, in));
      if (l > 0)
        ANTDT_CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, &one, w, in, b, out, &zero, a, in));
    }
  };
  for (int i = 0; i < 3; ++i) gemms();
  ANTDT_CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  ANTDT_CHECK_CUDA(cudaEventCreate(&e0));
  ANTDT_CHECK_CUDA(cudaEventCreate(&e1));
  const int reps = std::max(5, steps);
  ANTDT_CHECK_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) gemms();
  ANTDT_CHECK_CUDA(cudaEventRecord(e1));
  ANTDT_CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0.0f;
  ANTDT_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  const double t_bare = static_cast<double>(ms) * 1e-3 / reps;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(w);
  cudaFree(dw);

  std::string name;
  for (auto v : layers) name += (name.empty() ? "" : ",") + std::to_string(v);
  const double model_tf = flops / pageable.t_step * 1e-12, bare_tf = flops / t_bare * 1e-12;
  const double pinned_tf = flops / pinned.t_step * 1e-12;
  std::printf("%-22s %6lld %12.0f %8.3f %8.3f %10.2f %11.2f %6.2f | %8.3f %8.3f %6.2f\n", name.c_str(),
              static_cast<long long>(n), static_cast<double>(n) / pageable.t_step, pageable.t_step * 1e3,
              pageable.device_ms, model_tf, bare_tf, model_tf / bare_tf, pinned.t_step * 1e3, pinned.device_ms,
              pinned_tf / bare_tf);
}

}  // namespace

// antdt-bench-gpu [seconds per shape, default 1] [smoke|sanitize]
// "smoke" runs small shapes only: the ctest on the emulated device (tests/compute/
// cuda_emulation) uses it to run this program's every path on machines without a GPU.
// "sanitize" runs the short self-checks only (no learning run, no benchmark), for
// compute-sanitizer, which slows every kernel down many times.
int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  const std::string mode = argc > 2 ? argv[2] : "";
  const bool smoke = mode == "smoke";
  if (!mode.empty() && mode != "smoke" && mode != "sanitize") {
    std::fprintf(stderr, "usage: antdt-bench-gpu [seconds] [smoke|sanitize]\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("antdt-bench-gpu: SKIPPED: no usable CUDA device (cudaGetDeviceCount failed or returned 0)\n");
    return 0;
  }
  try {
    antdt::DeviceInfo dev;
    cudaDeviceProp prop{};
    ANTDT_CHECK_CUDA(cudaSetDevice(0));
    ANTDT_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    dev.backend = antdt::Backend::cuda;
    dev.device_id = 0;
    dev.device_count = count;
    dev.name = prop.name;
    dev.compute_capability = prop.major * 10 + prop.minor;
    ANTDT_CHECK_CUDA(cudaMemGetInfo(&dev.free_memory, &dev.total_memory));
    std::printf("antdt-bench-gpu: %s (sm_%d), %.1f GiB free of %.1f GiB, fp32 (cuBLAS default math, no TF32)\n",
                prop.name, dev.compute_capability, static_cast<double>(dev.free_memory) / (1 << 30),
                static_cast<double>(dev.total_memory) / (1 << 30));
    std::printf("self-checks:\n");
    const bool ok = self_checks(dev, mode != "sanitize");
    if (mode == "sanitize") {
      std::printf("GPU-CHECK %s\n", ok ? "PASS" : "FAIL");
      return ok ? 0 : 1;
    }
    {
      antdt::MlpConfig cfg;
      cfg.layers = smoke ? std::vector<std::int64_t>{64, 128, 10} : std::vector<std::int64_t>{4096, 8192, 8192, 10};
      auto m = antdt::make_mlp(cfg, dev);
      std::printf("micro-batch cap for layers %s at 0.8 of free memory: %lld samples\n",
                  smoke ? "64,128,10" : "4096,8192,8192,10", static_cast<long long>(antdt::micro_batch_cap(*m, dev)));
    }
    std::printf("\n%-22s %6s %12s %8s %8s %10s %11s %6s | %-24s\n", "", "", "", "", "", "", "", "", "batch pinned:");
    std::printf("%-22s %6s %12s %8s %8s %10s %11s %6s | %8s %8s %6s\n", "layers", "batch", "samples/s", "step_ms",
                "dev_ms", "model_TF/s", "cublas_TF/s", "ratio", "step_ms", "dev_ms", "ratio");
    if (smoke) {
      bench(dev, {32, 64, 64, 10}, 128, seconds);
      bench(dev, {64, 128, 10}, 256, seconds);
    } else {
      bench(dev, {784, 1024, 1024, 10}, 1024, seconds);
      bench(dev, {1024, 4096, 4096, 10}, 2048, seconds);
      bench(dev, {4096, 8192, 8192, 10}, 4096, seconds);
      bench(dev, {4096, 8192, 8192, 10}, 16384, seconds);
    }
    std::printf(
        "ratio = model GEMM TFLOP/s within whole steps (incl. H2D batch copy, loss readback, optimizer) /\n"
        "        bare cuBLAS sgemm TFLOP/s on identical shapes (goal >= 0.60); dev_ms = CUDA-event time of\n"
        "        accumulate() (H2D copy + forward + backward), batch pageable as with antdt-train\n"
        "        --no-pin-memory; pinned = the same steps with the batch page-locked (cudaHostRegister),\n"
        "        as antdt-train holds it by default\n");
    std::printf("GPU-CHECK %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("GPU-CHECK FAIL: %s\n", e.what());
    return 1;
  }
}
