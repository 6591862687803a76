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
#include <algorithm>
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

std::int64_t local_shard_size(std::int64_t dataset_size, std::int64_t global_batch) {
  if (dataset_size < 1) throw UsageError("dds: dataset size must be at least 1, got " + std::to_string(dataset_size));
  const std::int64_t batch = global_batch < 1 ? 1 : global_batch;
  return batch > dataset_size / 10 ? dataset_size : 10 * batch;  // 10 * batch may overflow
}

std::int64_t default_shard_size(std::int64_t dataset_size, std::int64_t global_batch, bool shuffle_within_shard) {
  const std::int64_t local = local_shard_size(dataset_size, global_batch);  // checks N
  return shuffle_within_shard ? dataset_size : local;
}

std::int64_t StepBatch::size() const noexcept {
  std::int64_t n = 0;
  for (const auto& r : ranges) n += r.size();
  return n;
}

void StepBatch::slice(std::int64_t from, std::int64_t to, std::vector<StreamRange>& out) const {
  std::int64_t at = 0;  // the batch offset where the current range starts
  for (const auto& r : ranges) {
    if (at >= to) break;
    const std::int64_t b = std::max(from, at), e = std::min(to, at + r.size());
    if (b < e) out.push_back(StreamRange{r.begin + (b - at), r.begin + (e - at)});
    at += r.size();
  }
}

BatchRange share_of(std::span<const std::int64_t> shares, int rank, std::int64_t batch_size) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= shares.size()) return {};
  std::int64_t begin = 0;
  for (int j = 0; j < rank; ++j) begin += shares[static_cast<std::size_t>(j)];
  return slice_at(begin, shares[static_cast<std::size_t>(rank)], batch_size);
}

BatchRange slice_at(std::int64_t begin, std::int64_t size, std::int64_t batch_size) {
  return BatchRange{std::clamp<std::int64_t>(begin, 0, batch_size),
                    std::clamp<std::int64_t>(begin + size, 0, batch_size)};
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
  if (shard_size_ == 0) shard_size_ = default_shard_size(dataset_size_, kDefaultBatch, shuffle_within_shard_);
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

Piece ShardMap::piece_at(std::int64_t position, std::int64_t limit) const {
  if (position < 0 || position >= limit) {
    throw UsageError("dds: stream position " + std::to_string(position) + " is not before the limit " +
                     std::to_string(limit));
  }
  const std::int64_t epoch = position / dataset_size_, offset = position % dataset_size_;
  const std::int64_t size = shard_size_, last = num_shards_ - 1, last_length = shard_length(last);
  std::int64_t order = 0, at = 0;  // the shard's place in the epoch's order, and the position in it
  if (last_length == size) {
    order = offset / size;
    at = offset % size;
  } else {
    // Every shard has shard_size positions but the last, which comes `short_order`-th.
    const std::int64_t short_order = order_of(epoch, last), before = short_order * size;
    if (offset < before) {
      order = offset / size;
      at = offset % size;
    } else if (offset < before + last_length) {
      order = short_order;
      at = offset - before;
    } else {
      const std::int64_t rest = offset - before - last_length;
      order = short_order + 1 + rest / size;
      at = rest % size;
    }
  }
  const std::int64_t shard = shard_at(epoch, order);
  return Piece{epoch, shard, at, std::min(shard_length(shard), at + (limit - position))};
}

std::int64_t ShardMap::index_at(std::int64_t position) const {
  const Piece p = piece_at(position, position + 1);
  return sample_index(p.epoch, p.shard, p.begin);
}

void ShardMap::append_indices(StreamRange range, std::vector<std::int64_t>& out) const {
  for_each_piece(range, [&](const Piece& piece) { append_indices(piece, out); });
}

std::vector<std::int64_t> ShardMap::indices(const StepBatch& batch, std::int64_t from, std::int64_t to) const {
  std::vector<StreamRange> ranges;
  batch.slice(from, to, ranges);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(std::max<std::int64_t>(0, to - from)));
  for (const auto& r : ranges) append_indices(r, out);
  return out;
}

void ShardMap::check_piece(const Piece& piece) const {
  const std::int64_t length = shard_length(piece.shard);
  if (piece.begin < 0 || piece.end > length || piece.begin > piece.end) {
    throw UsageError("dds: piece [" + std::to_string(piece.begin) + ", " + std::to_string(piece.end) +
                     ") out of range for shard " + std::to_string(piece.shard));
  }
}

void ShardMap::append_indices(const Piece& run, std::vector<std::int64_t>& out) const {
  check_piece(run);
  const std::int64_t base = run.shard * shard_size_;
  if (!shuffle_within_shard_) {
    for (std::int64_t p = run.begin; p < run.end; ++p) out.push_back(base + p);
    return;
  }
  const Feistel permutation(shard_length(run.shard), within_key(seed_, run.epoch, run.shard));
  for (std::int64_t p = run.begin; p < run.end; ++p) out.push_back(base + permutation.forward(p));
}

void ShardMap::append_index_ranges(const Piece& run, std::vector<IndexRange>& out) const {
  check_piece(run);
  const std::int64_t length = shard_length(run.shard);
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
