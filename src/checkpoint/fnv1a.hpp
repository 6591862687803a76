// Private: FNV-1a 64-bit hash, the checksum stored with every checkpoint data set.
// Chosen for being tiny, dependency-free and exactly specified (the reference values in
// tests/checkpoint come from the FNV specification); it detects any single flipped byte.
// It is not cryptographic and not meant to resist deliberate tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace antdt::checkpoint {

inline constexpr std::uint64_t kFnv1a64Offset = 14695981039346656037ULL;
inline constexpr std::uint64_t kFnv1a64Prime = 1099511628211ULL;

// `seed` lets a caller hash a value in pieces: fnv1a64(b, fnv1a64(a)) == fnv1a64(a ++ b).
[[nodiscard]] constexpr std::uint64_t fnv1a64(std::span<const std::byte> bytes,
                                              std::uint64_t seed = kFnv1a64Offset) noexcept {
  std::uint64_t hash = seed;
  for (const std::byte b : bytes) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= kFnv1a64Prime;
  }
  return hash;
}

}  // namespace antdt::checkpoint
