// Rank 0's DDS logic: the Ledger and the coverage counter.
//
// The coverage counter is deliberately independent of the ledger: it sees only the sample
// indices of committed runs (through ShardMap) and keeps one bit per index per open epoch,
// so a ledger bug that commits a range twice or declares an epoch complete too early shows
// up as duplicated or missing indices, not as a silently consistent ledger.
#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

namespace {
constexpr std::uint64_t kCoordinatorMagic = 0x5244524F4F435344ULL;  // "DSCOORDR"
// Each open epoch's coverage bitmap is stored either as its maximal runs of set bits
// (IndexRange pairs, 16 bytes a run) or as the raw N/8 bytes, whichever is smaller: committed
// samples come in runs of whole shards, so a 2.56e9-sample epoch usually saves in kilobytes to
// megabytes instead of 320 MB, and tiny shards in a shuffled order never cost more than the
// bitmap. The choice depends only on the bits, so the encoding is canonical.
// 3: the ledger inside is a version-2 ledger (the stream). Versions 1 and 2 held a version-1
// ledger, which cannot be resumed (Ledger::restore says so).
constexpr std::uint32_t kCoordinatorVersion = 3;
constexpr std::uint8_t kCoverageBitmap = 0, kCoverageRuns = 1;

std::size_t words_for(std::int64_t n) { return static_cast<std::size_t>((n + 63) / 64); }
// Runs are the smaller encoding of a bitmap of `words` words when 16 x runs < 8 x words.
bool runs_are_smaller(std::size_t runs, std::size_t words) { return 2 * runs < words; }

// The maximal runs of set bits of `bits`, in order, or nullopt as soon as there are too many to
// be the smaller encoding. O(words + runs): zero and all-one words are skipped a word at a time.
std::optional<std::vector<IndexRange>> runs_of(const std::vector<std::uint64_t>& bits) {
  std::vector<IndexRange> runs;
  const std::size_t words = bits.size();
  // The first bit at or after `from` that is set (want_set) or clear, or words * 64.
  const auto next = [&](std::int64_t from, bool want_set) {
    auto w = static_cast<std::size_t>(from >> 6);
    if (w >= words) return static_cast<std::int64_t>(words * 64);
    std::uint64_t word = (want_set ? bits[w] : ~bits[w]) & (~std::uint64_t{0} << static_cast<unsigned>(from & 63));
    while (word == 0) {
      if (++w == words) return static_cast<std::int64_t>(words * 64);
      word = want_set ? bits[w] : ~bits[w];
    }
    return static_cast<std::int64_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(word)));
  };
  const auto limit = static_cast<std::int64_t>(words * 64);
  for (std::int64_t at = next(0, true); at < limit;) {
    if (!runs_are_smaller(runs.size() + 1, words)) return std::nullopt;
    const std::int64_t end = next(at, false);
    runs.push_back(IndexRange{at, end});
    at = next(end, true);
  }
  return runs;
}

// Sets bits [begin, end) of `bits` a word at a time; returns how many were set already.
std::int64_t mark(std::vector<std::uint64_t>& bits, std::int64_t begin, std::int64_t end) {
  const auto first = static_cast<std::size_t>(begin >> 6), last = static_cast<std::size_t>((end - 1) >> 6);
  const std::uint64_t head = ~std::uint64_t{0} << static_cast<unsigned>(begin & 63);
  const std::uint64_t tail = ~std::uint64_t{0} >> static_cast<unsigned>(63 - ((end - 1) & 63));
  std::int64_t already = 0;
  const auto set = [&](std::size_t i, std::uint64_t mask) {
    already += std::popcount(bits[i] & mask);
    bits[i] |= mask;
  };
  if (first == last) {
    set(first, head & tail);
    return already;
  }
  set(first, head);
  for (std::size_t i = first + 1; i < last; ++i) set(i, ~std::uint64_t{0});
  set(last, tail);
  return already;
}
}  // namespace

Coordinator::Coordinator(const LedgerOptions& options) : Coordinator(Ledger(options)) {}

Coordinator::Coordinator(Ledger ledger) : ledger_(std::move(ledger)) {}

Coordinator::StepResult Coordinator::commit_step(std::int64_t global_batch, std::span<const BatchRange> undone) {
  StepResult result;
  const std::size_t completed_before = ledger_.completed_list().size();
  scratch_pieces_.clear();
  result.committed = ledger_.commit(global_batch, undone, &scratch_pieces_);  // changes nothing if it throws
  for (const auto& u : undone) result.carried += u.size();
  result.pieces = static_cast<std::int64_t>(scratch_pieces_.size());
  for (const auto& piece : scratch_pieces_) count(piece);
  const auto& completed = ledger_.completed_list();
  for (std::size_t i = completed_before; i < completed.size(); ++i) {
    finish_epoch(completed[i]);
    result.completed_epochs.push_back(completed[i]);
  }
  ledger_.check_identity();
  return result;
}

void Coordinator::count(const Piece& run) {
  const std::int64_t n = ledger_.map().dataset_size();
  auto open = std::find_if(open_coverage_.begin(), open_coverage_.end(),
                           [&](const OpenCoverage& c) { return c.epoch == run.epoch; });
  if (open == open_coverage_.end()) {
    for (auto& done : coverage_) {
      if (done.epoch == run.epoch) {  // a commit after the epoch completed: all of it is extra
        done.committed += run.size();
        done.duplicated += run.size();
        return;
      }
    }
    OpenCoverage fresh;
    fresh.epoch = run.epoch;
    fresh.seen.assign(words_for(n), 0);
    open_coverage_.push_back(std::move(fresh));
    open = open_coverage_.end() - 1;
  }
  if (open->seen.empty()) {  // restored: build the bitmap from the checkpoint's runs
    open->seen.assign(words_for(n), 0);
    for (const IndexRange& r : open->restored) (void)mark(open->seen, r.begin, r.end);
    open->restored = {};
  }
  const ShardMap& map = ledger_.map();
  if (map.shuffles_within_shard() && run.size() < map.shard_length(run.shard)) {
    count_part(*open, run);
    return;
  }
  scratch_ranges_.clear();
  map.append_index_ranges(run, scratch_ranges_);
  std::int64_t counted = 0;
  for (const IndexRange& range : scratch_ranges_) {
    ANTDT_ASSERT(0 <= range.begin && range.begin < range.end && range.end <= n,
                 "ShardMap produced an index outside the data set");
    open->duplicated += mark(open->seen, range.begin, range.end);
    counted += range.end - range.begin;
  }
  ANTDT_ASSERT(counted == run.size(), "ShardMap's index ranges do not hold one index per position");
  open->committed += run.size();
}

// Adds the piece's positions to its shard's pending parts; any already there are duplicated.
// When the parts make the whole shard, its index range is marked at once.
void Coordinator::count_part(OpenCoverage& open, const Piece& piece) {
  open.committed += piece.size();
  if (piece.size() == 0) return;
  auto it = std::find_if(open.pending.begin(), open.pending.end(),
                         [&](const PendingShard& p) { return p.shard == piece.shard; });
  if (it == open.pending.end()) {
    open.pending.push_back(PendingShard{piece.shard, 0, {}});
    it = open.pending.end() - 1;
  }
  // Union of the parts with [begin, end): the overlap is duplicated; touching parts are joined.
  std::vector<IndexRange>& parts = it->positions;
  std::vector<IndexRange> joined;
  joined.reserve(parts.size() + 1);
  IndexRange add{piece.begin, piece.end};
  std::int64_t overlap = 0;
  bool placed = false;
  for (const IndexRange& p : parts) {
    if (p.end < add.begin) {
      joined.push_back(p);
    } else if (add.end < p.begin) {
      if (!placed) joined.push_back(add), placed = true;
      joined.push_back(p);
    } else {  // overlaps or touches: merge into `add`
      overlap += std::max<std::int64_t>(0, std::min(p.end, piece.end) - std::max(p.begin, piece.begin));
      add = IndexRange{std::min(add.begin, p.begin), std::max(add.end, p.end)};
    }
  }
  if (!placed) joined.push_back(add);
  parts = std::move(joined);
  open.duplicated += overlap;
  it->count += piece.size() - overlap;
  const std::int64_t length = ledger_.map().shard_length(piece.shard);
  if (it->count == length) {  // the whole shard: all of its indices, once
    const std::int64_t base = piece.shard * ledger_.map().shard_size();
    open.duplicated += mark(open.seen, base, base + length);
    open.pending.erase(it);
  }
}

void Coordinator::finish_epoch(std::int64_t epoch) {
  const std::int64_t n = ledger_.map().dataset_size();
  auto open = std::find_if(open_coverage_.begin(), open_coverage_.end(),
                           [&](const OpenCoverage& c) { return c.epoch == epoch; });
  if (open == open_coverage_.end()) {  // nothing was ever counted for it
    coverage_.push_back(EpochCoverage{epoch, 0, n, 0});
    return;
  }
  std::int64_t seen = 0;
  for (const std::uint64_t word : open->seen) seen += std::popcount(word);
  for (const IndexRange& r : open->restored) seen += r.end - r.begin;  // never counted since a restore
  for (const PendingShard& p : open->pending) seen += p.count;         // distinct positions: distinct indices
  coverage_.push_back(EpochCoverage{epoch, open->committed, n - seen, open->duplicated});
  open_coverage_.erase(open);
}

std::vector<std::byte> Coordinator::serialize() const {
  detail::ByteWriter w;
  w.put(kCoordinatorMagic);
  w.put(kCoordinatorVersion);
  w.put_vector(ledger_.serialize());
  w.put_vector(coverage_);
  w.put<std::uint64_t>(open_coverage_.size());
  const std::size_t words = words_for(ledger_.map().dataset_size());
  for (const auto& c : open_coverage_) {
    w.put(c.epoch);
    w.put(c.committed);
    w.put(c.duplicated);
    if (c.seen.empty()) {  // restored and not counted since: its runs, or the bitmap they make
      if (runs_are_smaller(c.restored.size(), words)) {
        w.put(kCoverageRuns);
        w.put_vector(c.restored);
      } else {
        std::vector<std::uint64_t> bits(words, 0);
        for (const IndexRange& r : c.restored) (void)mark(bits, r.begin, r.end);
        w.put(kCoverageBitmap);
        w.put_vector(bits);
      }
    } else if (const auto runs = runs_of(c.seen)) {
      w.put(kCoverageRuns);
      w.put_vector(*runs);
    } else {
      w.put(kCoverageBitmap);
      w.put_vector(c.seen);
    }
    w.put<std::uint64_t>(c.pending.size());
    for (const auto& p : c.pending) {
      w.put(p.shard);
      w.put_vector(p.positions);
    }
  }
  return w.take();
}

// The coverage counter's own invariants, so that a corrupt checkpoint cannot make later
// counting overflow. It is deliberately not compared with the ledger: it exists to catch a
// ledger (or a replayed checkpoint) that disagrees with it.
void Coordinator::check_coverage(const ShardMap& map, const std::vector<EpochCoverage>& coverage,
                                 const std::vector<OpenCoverage>& open) {
  const std::int64_t n = map.dataset_size();
  const auto fail = [](std::int64_t epoch, const std::string& what) {
    throw CheckpointError("DDS coordinator checkpoint: coverage of epoch " + std::to_string(epoch) + ": " + what);
  };
  for (const auto& c : coverage) {
    // committed = distinct indices seen (n - missing) + duplicated.
    if (c.missing < 0 || c.missing > n || c.duplicated < 0 || c.duplicated > kMaxCoverageCount ||
        c.committed != n - c.missing + c.duplicated) {
      fail(c.epoch, "committed " + std::to_string(c.committed) + ", missing " + std::to_string(c.missing) +
                        " and duplicated " + std::to_string(c.duplicated) +
                        " break committed == dataset size - missing + duplicated, missing in [0, " + std::to_string(n) +
                        "], duplicated in [0, 2^62]");
    }
  }
  for (std::size_t i = 0; i < open.size(); ++i) {
    const auto& c = open[i];
    std::int64_t seen = 0;
    if (!c.seen.empty()) {  // a raw bitmap
      if (c.seen.size() != words_for(n)) fail(c.epoch, "the bitmap does not match the data set size");
      if (n % 64 != 0 && (c.seen.back() >> static_cast<unsigned>(n % 64)) != 0)
        fail(c.epoch, "the bitmap marks indices past the data set");
      for (const std::uint64_t word : c.seen) seen += std::popcount(word);
    } else {  // runs: each inside [0, N), in order, disjoint and not touching (maximal runs)
      std::int64_t previous_end = -1;
      for (const IndexRange& r : c.restored) {
        if (r.begin < 0 || r.begin >= r.end || r.end > n || r.begin <= previous_end) {
          fail(c.epoch, "the run [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                            ") of covered indices is empty, outside [0, " + std::to_string(n) +
                            "), or not after the previous run with a gap");
        }
        seen += r.end - r.begin;
        previous_end = r.end;
      }
    }
    // Pending parts: shards of the map, each once, shuffled within, its parts in order, disjoint,
    // not touching and not the whole shard.
    for (std::size_t k = 0; k < c.pending.size(); ++k) {
      const PendingShard& p = c.pending[k];
      if (!map.shuffles_within_shard() || p.shard < 0 || p.shard >= map.num_shards() || p.positions.empty()) {
        fail(c.epoch,
             "a pending shard " + std::to_string(p.shard) + " is not a shard shuffled within, or has no parts");
      }
      for (std::size_t j = 0; j < k; ++j) {
        if (c.pending[j].shard == p.shard) fail(c.epoch, "shard " + std::to_string(p.shard) + " is pending twice");
      }
      const std::int64_t length = map.shard_length(p.shard);
      std::int64_t previous_end = -1, count = 0;
      for (const IndexRange& r : p.positions) {
        if (r.begin < 0 || r.begin >= r.end || r.end > length || r.begin <= previous_end) {
          fail(c.epoch, "a pending part of shard " + std::to_string(p.shard) +
                            " is empty, outside the shard, or not after the previous part with a gap");
        }
        count += r.end - r.begin;
        previous_end = r.end;
      }
      if (count == length) fail(c.epoch, "pending shard " + std::to_string(p.shard) + " is whole");
      seen += count;
    }
    if (c.duplicated < 0 || c.duplicated > kMaxCoverageCount || c.committed != seen + c.duplicated) {
      fail(c.epoch, "committed " + std::to_string(c.committed) + " and duplicated " + std::to_string(c.duplicated) +
                        " break committed == " + std::to_string(seen) + " indices covered + duplicated" +
                        " (duplicated in [0, 2^62])");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (open[j].epoch == c.epoch) fail(c.epoch, "the epoch has two bitmaps");
    }
  }
}

Coordinator Coordinator::restore(std::span<const std::byte> bytes) {
  std::vector<std::byte> ledger_bytes;
  std::vector<EpochCoverage> coverage;
  std::vector<OpenCoverage> open;
  try {
    detail::ByteReader r(bytes);
    if (r.get<std::uint64_t>() != kCoordinatorMagic) throw CheckpointError("DDS coordinator checkpoint: bad magic");
    const auto version = r.get<std::uint32_t>();
    if (version != kCoordinatorVersion) {
      throw CheckpointError("DDS coordinator checkpoint version " + std::to_string(version) +
                            ", this build reads version " + std::to_string(kCoordinatorVersion) +
                            (version < kCoordinatorVersion ? " (an older antdt wrote it, which composed steps from "
                                                             "per-rank grants; resume it with that antdt, or start "
                                                             "the run afresh)"
                                                           : std::string()));
    }
    ledger_bytes = r.get_vector<std::byte>();
    coverage = r.get_vector<EpochCoverage>();
    const auto open_count = r.get<std::uint64_t>();
    if (open_count > r.remaining()) throw CheckpointError("DDS coordinator checkpoint: bad coverage count");
    for (std::uint64_t i = 0; i < open_count; ++i) {
      OpenCoverage c;
      c.epoch = r.get<std::int64_t>();
      c.committed = r.get<std::int64_t>();
      c.duplicated = r.get<std::int64_t>();
      const auto encoding = r.get<std::uint8_t>();
      if (encoding == kCoverageBitmap) {
        c.seen = r.get_vector<std::uint64_t>();
        if (c.seen.empty()) throw CheckpointError("DDS coordinator checkpoint: an empty coverage bitmap");
      } else if (encoding == kCoverageRuns) {
        c.restored = r.get_vector<IndexRange>();
      } else {
        throw CheckpointError("DDS coordinator checkpoint: unknown coverage encoding " + std::to_string(encoding));
      }
      const auto pending = r.get<std::uint64_t>();
      if (pending > r.remaining() / 16) throw CheckpointError("DDS coordinator checkpoint: bad pending count");
      for (std::uint64_t k = 0; k < pending; ++k) {
        PendingShard p;
        p.shard = r.get<std::int64_t>();
        p.positions = r.get_vector<IndexRange>();
        c.pending.push_back(std::move(p));
      }
      open.push_back(std::move(c));
    }
    if (!r.done()) throw CheckpointError("DDS coordinator checkpoint: trailing bytes");
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(std::string("DDS coordinator checkpoint is corrupt or truncated: ") + e.what());
  }
  Coordinator coordinator(Ledger::restore(ledger_bytes));
  check_coverage(coordinator.ledger_.map(), coverage, open);
  for (auto& c : open) {  // the parts are valid now: count them
    for (auto& p : c.pending) {
      for (const auto& part : p.positions) p.count += part.end - part.begin;
    }
  }
  coordinator.coverage_ = std::move(coverage);
  coordinator.open_coverage_ = std::move(open);
  return coordinator;
}

}  // namespace antdt::dds
