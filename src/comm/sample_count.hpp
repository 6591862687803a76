// The exact sample count that rides in the fused gradient reduction (model.hpp, "Gradient
// buffer layout"): what a model writes into its buffer's count slots, and what it reads back
// after the reduction.
//
// Each rank's buffer ends with kSampleCountSlots floats holding its sample count as base-16
// digits, least significant first; the last slot holds what is left above the first ten
// digits. The reduction sums every float of the buffer across ranks, so afterwards slot j holds
// the sum over ranks of digit j, and decode_sample_count recombines sum_j slot_j * 16^j in
// integers: the global count. A float sum of whole numbers is exact, in any order (ring, tree,
// NCCL), as long as no partial sum exceeds 2^24. A digit is at most 15, so the digit slots stay
// exact up to kExactCountMaxRanks = 1,118,481 ranks; the last slot sums to at most
// total / 2^40 < 2^23 for any total below 2^63; and every slot is exact whatever the number of
// ranks while the total is at most 2^24. The single float slot of the earlier layout was exact
// only up to 2^24 = 16.7M samples per step, which 10,000 ranks at 2,048 samples each pass.
//
// Why digits rather than the Session passing the count to apply_update: the count stays in
// the one collective with the sums, with no second source of truth to keep in step, and it is
// exact for counts known only at reduction time (a rank that stops early), on any reducer.
//
// Plain C++ usable in CUDA device code: nvcc compiles these for host and device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ANTDT_SAMPLE_COUNT_FN __host__ __device__ inline
#else
#define ANTDT_SAMPLE_COUNT_FN inline
#endif

namespace antdt {

// Floats at the end of a gradient buffer that carry the sample count.
inline constexpr int kSampleCountSlots = 11;
// Bits per digit slot (the last slot holds the rest).
inline constexpr int kSampleCountDigitBits = 4;
// The most ranks whose summed counts above 2^24 stay exact: 15 x 1,118,481 = 2^24 - 1.
inline constexpr std::int64_t kExactCountMaxRanks = ((std::int64_t{1} << 24) - 1) / 15;

// Writes n (negative counts as 0) into slots[0, kSampleCountSlots).
ANTDT_SAMPLE_COUNT_FN void encode_sample_count(std::int64_t n, float* slots) noexcept {
  auto rest = static_cast<std::uint64_t>(n < 0 ? 0 : n);
  for (int j = 0; j + 1 < kSampleCountSlots; ++j) {
    slots[j] = static_cast<float>(rest & 15U);
    rest >>= kSampleCountDigitBits;
  }
  slots[kSampleCountSlots - 1] = static_cast<float>(rest);  // below 2^23 for any int64 n: exact
}

// The count the slots hold: sum_j slots[j] * 16^j, in integers. Every slot must hold a whole
// number in [0, 2^24] and the total must fit in int64, which is true of summed encodings;
// otherwise (a NaN, a negative or fractional value, an overflow) the result is -1.
ANTDT_SAMPLE_COUNT_FN std::int64_t decode_sample_count(const float* slots) noexcept {
  constexpr float kMaxExact = 16777216.0f;  // 2^24
  constexpr std::uint64_t kMaxTotal = (std::uint64_t{1} << 63) - 1;
  std::uint64_t total = 0;
  for (int j = kSampleCountSlots; j-- > 0;) {
    const float v = slots[j];
    if (!(v >= 0.0f && v <= kMaxExact)) return -1;
    const auto digit = static_cast<std::uint64_t>(v);
    if (static_cast<float>(digit) != v) return -1;
    if (total > (kMaxTotal - digit) >> kSampleCountDigitBits) return -1;
    total = (total << kSampleCountDigitBits) + digit;
  }
  return static_cast<std::int64_t>(total);
}

// Adds n samples to a rank's own (not yet reduced) count.
ANTDT_SAMPLE_COUNT_FN void add_sample_count(float* slots, std::int64_t n) noexcept {
  encode_sample_count(decode_sample_count(slots) + n, slots);
}

}  // namespace antdt

#undef ANTDT_SAMPLE_COUNT_FN
