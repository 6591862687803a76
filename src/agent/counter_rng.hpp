// Private: counter-based random numbers. A draw is a pure function of (seed, stream, a, b),
// so emulated noise does not depend on call order, thread or how many draws came before:
// a restarted or re-run job sees the same slowdowns at the same steps.
#pragma once

#include <cstdint>

namespace antdt::detail {

constexpr std::uint64_t splitmix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
constexpr double counter_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ stream);
  h = splitmix64(h ^ a);
  h = splitmix64(h ^ b);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace antdt::detail
