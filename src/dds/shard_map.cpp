// Shard geometry and per-epoch orders.
//
// Orders are keyed pseudo-random permutations rather than stored shuffles: a 4-round
// Feistel network on the smallest even-bit power-of-two domain that covers n, cycle-walked
// until the value falls inside [0, n). Each round is a bijection, so the network is one,
// and cycle-walking a bijection restricted to [0, n) is again a bijection on [0, n). The
// domain is at most 4n, so a walk takes at most a few steps on average. This keeps
// ShardMap a pure O(1) function of (options, epoch, shard, position): the coordinator, every
// client and the tests compute the same index without sharing or storing a permutation.
// The round function is splitmix64's finaliser, which is fully specified (unlike
// std::uniform_int_distribution), so orders are identical on every platform and compiler.
#include <bit>
#include <string>

#include "antdt/error.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += kGolden;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

struct Feistel {
  std::uint64_t n;
  unsigned half;
  std::uint64_t mask;
  std::uint64_t key;

  Feistel(std::int64_t size, std::uint64_t k) noexcept : n(static_cast<std::uint64_t>(size)), key(k) {
    const auto bits = static_cast<unsigned>(std::bit_width(n > 1 ? n - 1 : 1));
    half = (bits + 1U) / 2U;
    mask = (std::uint64_t{1} << half) - 1U;
  }
  [[nodiscard]] std::uint64_t round(std::uint64_t r, unsigned i) const noexcept {
    return mix(r ^ key ^ (kGolden * (i + 1U))) & mask;
  }
  [[nodiscard]] std::uint64_t forward_once(std::uint64_t v) const noexcept {
    std::uint64_t l = v >> half, r = v & mask;
    for (unsigned i = 0; i < 4; ++i) {
      const std::uint64_t next_r = l ^ round(r, i);
      l = r;
      r = next_r;
    }
    return (l << half) | r;
  }
  [[nodiscard]] std::uint64_t backward_once(std::uint64_t v) const noexcept {
    std::uint64_t l = v >> half, r = v & mask;
    for (unsigned i = 4; i-- > 0;) {
      const std::uint64_t prev_l = r ^ round(l, i);
      r = l;
      l = prev_l;
    }
    return (l << half) | r;
  }
  [[nodiscard]] std::int64_t forward(std::int64_t x) const noexcept {
    if (n <= 1) return x;
    auto v = static_cast<std::uint64_t>(x);
    do v = forward_once(v);
    while (v >= n);
    return static_cast<std::int64_t>(v);
  }
  [[nodiscard]] std::int64_t backward(std::int64_t x) const noexcept {
    if (n <= 1) return x;
    auto v = static_cast<std::uint64_t>(x);
    do v = backward_once(v);
    while (v >= n);
    return static_cast<std::int64_t>(v);
  }
};

std::uint64_t shard_order_key(std::uint64_t seed, std::int64_t epoch) noexcept {
  return mix(seed ^ mix(static_cast<std::uint64_t>(epoch) ^ 0x5348415244ULL));
}
std::uint64_t within_key(std::uint64_t seed, std::int64_t epoch, std::int64_t shard) noexcept {
  return mix(seed ^
             mix(static_cast<std::uint64_t>(epoch) * 0xD1B54A32D192ED03ULL ^ mix(static_cast<std::uint64_t>(shard))));
}

}  // namespace

std::int64_t default_shard_size(std::int64_t dataset_size, std::int64_t typical_micro_batch) {
  if (dataset_size < 1) throw UsageError("dds: dataset size must be at least 1, got " + std::to_string(dataset_size));
  const std::int64_t micro = typical_micro_batch < 1 ? 1 : typical_micro_batch;
  return micro > dataset_size / 10 ? dataset_size : 10 * micro;  // 10 * micro may overflow
}

ShardMap::ShardMap(const LedgerOptions& options)
    : dataset_size_(options.dataset_size),
      shard_size_(options.shard_size),
      num_shards_(0),
      seed_(options.seed),
      shuffle_shards_(options.shuffle_shards),
      shuffle_within_shard_(options.shuffle_within_shard) {
  if (dataset_size_ < 1) {
    throw UsageError("dds: dataset_size must be at least 1, got " + std::to_string(dataset_size_) +
                     "; an empty data set cannot be sharded");
  }
  if (dataset_size_ > kMaxDatasetSize) {
    throw UsageError("dds: dataset_size " + std::to_string(dataset_size_) + " exceeds the limit of " +
                     std::to_string(kMaxDatasetSize) + " samples (kMaxDatasetSize)");
  }
  if (shard_size_ < 0)
    throw UsageError("dds: shard_size must be >= 0 (0 = automatic), got " + std::to_string(shard_size_));
  if (options.max_epochs < 0) {
    throw UsageError("dds: max_epochs must be >= 0 (0 = unlimited), got " + std::to_string(options.max_epochs));
  }
  if (shard_size_ == 0) shard_size_ = default_shard_size(dataset_size_, kDefaultMicroBatch);
  if (shard_size_ > dataset_size_) shard_size_ = dataset_size_;
  num_shards_ = dataset_size_ / shard_size_ + (dataset_size_ % shard_size_ != 0 ? 1 : 0);
}

std::int64_t ShardMap::shard_length(std::int64_t shard) const {
  if (shard < 0 || shard >= num_shards_) {
    throw UsageError("dds: shard " + std::to_string(shard) + " out of range [0, " + std::to_string(num_shards_) + ")");
  }
  return shard == num_shards_ - 1 ? dataset_size_ - shard * shard_size_ : shard_size_;
}

std::int64_t ShardMap::shard_at(std::int64_t epoch, std::int64_t order) const {
  if (order < 0 || order >= num_shards_) {
    throw UsageError("dds: shard order " + std::to_string(order) + " out of range [0, " + std::to_string(num_shards_) +
                     ")");
  }
  if (!shuffle_shards_) return order;
  return Feistel(num_shards_, shard_order_key(seed_, epoch)).forward(order);
}

std::int64_t ShardMap::order_of(std::int64_t epoch, std::int64_t shard) const {
  (void)shard_length(shard);  // range check
  if (!shuffle_shards_) return shard;
  return Feistel(num_shards_, shard_order_key(seed_, epoch)).backward(shard);
}

std::int64_t ShardMap::sample_index(std::int64_t epoch, std::int64_t shard, std::int64_t position) const {
  const std::int64_t length = shard_length(shard);
  if (position < 0 || position >= length) {
    throw UsageError("dds: position " + std::to_string(position) + " out of range for shard " + std::to_string(shard));
  }
  const std::int64_t base = shard * shard_size_;
  if (!shuffle_within_shard_) return base + position;
  return base + Feistel(length, within_key(seed_, epoch, shard)).forward(position);
}

void ShardMap::append_indices(const Grant& run, std::vector<std::int64_t>& out) const {
  const std::int64_t length = shard_length(run.shard);
  if (run.begin < 0 || run.end > length || run.begin > run.end) {
    throw UsageError("dds: run [" + std::to_string(run.begin) + ", " + std::to_string(run.end) +
                     ") out of range for shard " + std::to_string(run.shard));
  }
  const std::int64_t base = run.shard * shard_size_;
  out.reserve(out.size() + static_cast<std::size_t>(run.end - run.begin));
  if (!shuffle_within_shard_) {
    for (std::int64_t p = run.begin; p < run.end; ++p) out.push_back(base + p);
    return;
  }
  const Feistel permutation(length, within_key(seed_, run.epoch, run.shard));
  for (std::int64_t p = run.begin; p < run.end; ++p) out.push_back(base + permutation.forward(p));
}

void ShardMap::append_index_ranges(const Grant& run, std::vector<IndexRange>& out) const {
  const std::int64_t length = shard_length(run.shard);
  if (run.begin < 0 || run.end > length || run.begin > run.end) {
    throw UsageError("dds: run [" + std::to_string(run.begin) + ", " + std::to_string(run.end) +
                     ") out of range for shard " + std::to_string(run.shard));
  }
  if (run.begin == run.end) return;
  const std::int64_t base = run.shard * shard_size_;
  if (!shuffle_within_shard_) {
    out.push_back(IndexRange{base + run.begin, base + run.end});
    return;
  }
  if (run.begin == 0 && run.end == length) {  // every position of the shard: all of its indices
    out.push_back(IndexRange{base, base + length});
    return;
  }
  const Feistel permutation(length, within_key(seed_, run.epoch, run.shard));
  for (std::int64_t p = run.begin; p < run.end; ++p) {
    const std::int64_t index = base + permutation.forward(p);
    out.push_back(IndexRange{index, index + 1});
  }
}

}  // namespace antdt::dds
