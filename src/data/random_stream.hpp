// Private: the fully specified generator of the synthetic data sets (splitmix64), so that a
// data set made from a seed is the same on every platform and compiler.
#pragma once

#include <cmath>
#include <cstdint>

namespace antdt::data::synth {

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

class Stream {
 public:
  explicit Stream(std::uint64_t key) noexcept : state_(key) {}
  std::uint64_t next() noexcept { return mix(state_++ * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL); }
  double uniform() noexcept { return static_cast<double>(next() >> 11U) * 0x1.0p-53; }  // [0, 1)
  double uniform(double low, double high) noexcept { return low + (high - low) * uniform(); }
  // Box-Muller; one draw per call keeps the stream position a simple function of the count.
  double normal() noexcept {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace antdt::data::synth
