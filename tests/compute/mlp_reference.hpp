// The compute tests' synthetic data and double-precision reference MLP, with no GoogleTest:
// perf/compute/gpu_bench.cpp (antdt-bench-gpu, built by hand on GPU machines) uses them too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "comm/sample_count.hpp"

namespace antdt::test {

// The sample count in a gradient snapshot's trailing slots (src/comm/sample_count.hpp).
inline std::int64_t count_of(const std::vector<float>& g) {
  return g.size() < static_cast<std::size_t>(kSampleCountSlots)
             ? -1
             : decode_sample_count(g.data() + g.size() - kSampleCountSlots);
}
// The gradient sums of a snapshot: everything before the count slots.
inline std::vector<float> sums_of(const std::vector<float>& g) {
  return {g.begin(), g.end() - std::min<std::ptrdiff_t>(kSampleCountSlots, static_cast<std::ptrdiff_t>(g.size()))};
}

struct Samples {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  std::int64_t dim = 0;
  [[nodiscard]] std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  [[nodiscard]] const float* x(std::int64_t i) const { return features.data() + i * dim; }
  [[nodiscard]] const std::int32_t* y(std::int64_t i) const { return labels.data() + i; }
};

// Gaussian clusters: class c has a random centre (norm ~ separation) in `dim` dimensions, and
// unit-variance noise. Learnable, not linearly trivial for small separation.
inline Samples gaussian_clusters(std::int64_t n, std::int64_t dim, std::int32_t classes, double separation,
                                 std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> centres(static_cast<std::size_t>(classes * dim));
  std::mt19937_64 centre_rng(12345);  // the same centres for every draw of samples
  for (double& c : centres) c = normal(centre_rng) * separation / std::sqrt(static_cast<double>(dim));
  Samples s;
  s.dim = dim;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(classes));
    s.labels.push_back(label);
    for (std::int64_t d = 0; d < dim; ++d) {
      s.features.push_back(static_cast<float>(centres[static_cast<std::size_t>(label * dim + d)] + normal(rng)));
    }
  }
  return s;
}

// Summed cross-entropy of the MLP in double precision, straight from the definition
// (independent of the library's code paths).
inline double reference_loss_sum(const std::vector<std::int64_t>& layers, const std::vector<double>& params,
                                 const Samples& data) {
  double total = 0.0;
  for (std::int64_t i = 0; i < data.size(); ++i) {
    std::vector<double> a(data.x(i), data.x(i) + data.dim);
    std::size_t offset = 0;
    for (std::size_t l = 0; l + 1 < layers.size(); ++l) {
      const auto in = static_cast<std::size_t>(layers[l]), out = static_cast<std::size_t>(layers[l + 1]);
      std::vector<double> z(out);
      for (std::size_t o = 0; o < out; ++o) {
        double acc = params[offset + in * out + o];
        for (std::size_t k = 0; k < in; ++k) acc += params[offset + o * in + k] * a[k];
        z[o] = (l + 2 < layers.size()) ? std::max(acc, 0.0) : acc;
      }
      offset += in * out + out;
      a = std::move(z);
    }
    const double zmax = *std::max_element(a.begin(), a.end());
    double denom = 0.0;
    for (double v : a) denom += std::exp(v - zmax);
    total += std::log(denom) + zmax - a[static_cast<std::size_t>(data.labels[static_cast<std::size_t>(i)])];
  }
  return total;
}

// Gradient of reference_loss_sum by central differences with step h, one parameter at a time.
inline std::vector<float> central_difference_gradient(const std::vector<std::int64_t>& layers,
                                                      std::vector<double> params, const Samples& data,
                                                      double h = 1e-6) {
  std::vector<float> fd(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double saved = params[i];
    params[i] = saved + h;
    const double up = reference_loss_sum(layers, params, data);
    params[i] = saved - h;
    const double down = reference_loss_sum(layers, params, data);
    params[i] = saved;
    fd[i] = static_cast<float>((up - down) / (2 * h));
  }
  return fd;
}

// ||a - b|| / max(||b||, floor): the norm-wise relative error.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-12) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

// Largest |a-b| / max(|b|, scale): elementwise, relative to the vector's typical magnitude for
// entries near zero.
inline double max_elementwise_error(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  scale = std::max(scale * 1e-3, 1e-12);
  double worst = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(
        worst, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(std::fabs(static_cast<double>(b[i])), scale));
  }
  return worst;
}

}  // namespace antdt::test
