// Dynamic data sharding (DDS): a step's global batch is fixed by the data order alone, and the
// job knows exactly what was trained on (docs/dds.md).
//
//   The order. N samples are cut into S = ceil(N / shard_size) shards; shard s holds the
//   indices [s*shard_size, min(N, (s+1)*shard_size)). Each epoch visits the shards in its own
//   seeded order and the samples of each shard in its own seeded order. By default there is one
//   shard, the whole data set: each epoch is a full seeded permutation of it. The epochs follow
//   one another in one STREAM of positions: epoch e is the stream positions [e*N, (e+1)*N).
//
//   The steps. Step t trains on the next B positions of the stream, [t*B, (t+1)*B) while no
//   step has left positions undone. The plan only divides them: rank i trains on the
//   contiguous slice [sum_{j<i} b_j, sum_{j<=i} b_j) of the step's batch. So the samples of
//   every step depend on the data, the seed and B, and never on the policy, the plan, the
//   world size or the timing. Positions a step did not train (a deadline pool's slowed rank)
//   are carried: they come first in the next step's batch, in the order they were left.
//
//   Exactly once per epoch. Every position of the stream is committed once, after the
//   reduction of the step that trained it; an independent coverage counter checks each epoch's
//   indices. Identity for every open epoch, between steps: todo + done == N.
//
// Everything here is pure C++ (no MPI, no clock): the Ledger is rank 0's state, the
// Coordinator adds the coverage counter, and every rank mirrors the StepStream (where the next
// batch comes from) to compute its own samples for any step without asking rank 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace antdt::dds {

struct LedgerOptions {
  std::int64_t dataset_size = 0;  // 1 <= N <= kMaxDatasetSize
  std::int64_t shard_size = 0;    // 0: default_shard_size(N, kDefaultBatch, shuffle_within_shard)
  std::uint64_t seed = 0;
  bool shuffle_shards = true;        // each epoch visits the shards in its own seeded order
  bool shuffle_within_shard = true;  // each (epoch, shard) has its own seeded sample order
  std::int64_t max_epochs = 0;       // 0 = unlimited; otherwise the stream ends after max_epochs * N
};

// The largest data set (samples) a ledger accepts: 2^36, about 6.9e10. It keeps every
// position sum far from int64 overflow and bounds the Coordinator's coverage bitmap (one bit
// per sample per open epoch, 8 GiB at the limit), so a corrupt checkpoint cannot ask for more.
inline constexpr std::int64_t kMaxDatasetSize = std::int64_t{1} << 36;

// The end of an unlimited stream: far from overflow, never reached (2^62 positions).
inline constexpr std::int64_t kMaxStreamPosition = std::int64_t{1} << 62;

// The global batch assumed when LedgerOptions::shard_size is 0. The Session passes its B.
inline constexpr std::int64_t kDefaultBatch = 256;

// Shards of about 10 global batches, at least 1, at most N: the shard-local order, for read
// locality. A step reads from one shard or two, and a shuffle within shards mixes only ten
// steps' worth of samples (a file stored in class order gives steps of one or two classes).
// Independent of the world size, so that the order (and every step's samples) is too. Throws
// UsageError for N < 1.
[[nodiscard]] std::int64_t local_shard_size(std::int64_t dataset_size, std::int64_t global_batch);

// What shard_size 0 stands for. Shuffled within shards (the default): N, one shard, so every
// epoch is a full seeded permutation of the data set and every step a uniform sample of it,
// however the file is sorted (as PyTorch's DistributedSampler). Not shuffled within shards:
// local_shard_size, each step's slices contiguous runs of the file (one shard in N would read
// the file in its stored order every epoch). Throws UsageError for N < 1.
[[nodiscard]] std::int64_t default_shard_size(std::int64_t dataset_size, std::int64_t global_batch,
                                              bool shuffle_within_shard);

// A run of positions of one shard in one epoch: [begin, end) in that shard's order.
struct Piece {
  std::int64_t epoch = 0;
  std::int64_t shard = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;

  [[nodiscard]] std::int64_t size() const noexcept { return end - begin; }
  friend bool operator==(const Piece&, const Piece&) = default;
};

// Sample indices [begin, end), consecutive.
struct IndexRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  friend bool operator==(const IndexRange&, const IndexRange&) = default;
};

// Stream positions [begin, end): epoch e holds [e*N, (e+1)*N).
struct StreamRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  [[nodiscard]] std::int64_t size() const noexcept { return end - begin; }
  friend bool operator==(const StreamRange&, const StreamRange&) = default;
  template <class Self, class F>
  static void fields(Self& m, F&& f) {  // its checkpoint form (core/blob_fields.hpp)
    f(m.begin), f(m.end);
  }
};

// Offsets [begin, end) into one step's batch (0 is its first position): a rank's slice, a
// chunk, a part the step did not train.
struct BatchRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  [[nodiscard]] std::int64_t size() const noexcept { return end - begin; }
  friend bool operator==(const BatchRange&, const BatchRange&) = default;
};

// The positions one step trains on, in the order its slices are cut: the carried ranges first,
// then one run from the stream's cursor. Usually one range.
struct StepBatch {
  std::vector<StreamRange> ranges;

  [[nodiscard]] std::int64_t size() const noexcept;
  // Appends the stream ranges of the batch's offsets [from, to) (clipped to the batch), in order.
  void slice(std::int64_t from, std::int64_t to, std::vector<StreamRange>& out) const;
  friend bool operator==(const StepBatch&, const StepBatch&) = default;
};

// Rank `rank`'s slice of a batch of `batch_size` positions under shares b_0..b_{P-1}: offsets
// [sum_{j<rank} b_j, sum_{j<=rank} b_j), clipped to the batch (a short final step gives the
// last ranks less, or nothing). Empty for a rank outside the shares.
[[nodiscard]] BatchRange share_of(std::span<const std::int64_t> shares, int rank, std::int64_t batch_size);
// The slice of `size` positions from offset `begin`, clipped to the batch (share_of, for a
// caller that walks the ranks in order and keeps the running offset).
[[nodiscard]] BatchRange slice_at(std::int64_t begin, std::int64_t size, std::int64_t batch_size);

// Pure function of LedgerOptions: shard geometry, the per-epoch orders, and the stream. The
// orders come from a keyed Feistel permutation (cycle-walked to the exact domain), so any
// position maps to its index in O(1) without storing a permutation. UsageError on bad options.
class ShardMap {
 public:
  explicit ShardMap(const LedgerOptions& options);

  [[nodiscard]] std::int64_t dataset_size() const noexcept { return dataset_size_; }
  [[nodiscard]] std::int64_t shard_size() const noexcept { return shard_size_; }
  [[nodiscard]] std::int64_t num_shards() const noexcept { return num_shards_; }
  [[nodiscard]] bool shuffles_within_shard() const noexcept { return shuffle_within_shard_; }
  [[nodiscard]] std::int64_t shard_length(std::int64_t shard) const;
  // The shard visited `order`-th in `epoch`.
  [[nodiscard]] std::int64_t shard_at(std::int64_t epoch, std::int64_t order) const;
  // Inverse of shard_at: where `shard` comes in `epoch`'s order.
  [[nodiscard]] std::int64_t order_of(std::int64_t epoch, std::int64_t shard) const;
  // The sample index at `position` of `shard` in `epoch`.
  [[nodiscard]] std::int64_t sample_index(std::int64_t epoch, std::int64_t shard, std::int64_t position) const;
  // The piece that holds stream position `position`: its epoch, its shard, and the positions
  // from there to the end of that shard, or to `limit` (a stream position) if that is sooner.
  [[nodiscard]] Piece piece_at(std::int64_t position, std::int64_t limit) const;
  // The sample index at a stream position.
  [[nodiscard]] std::int64_t index_at(std::int64_t position) const;
  // Calls f(piece) for the pieces of `range`, in stream order: one per shard it touches.
  template <class F>
  void for_each_piece(StreamRange range, F&& f) const {
    for (std::int64_t p = range.begin; p < range.end;) {
      const Piece piece = piece_at(p, range.end);
      f(piece);
      p += piece.size();
    }
  }
  // Appends the indices of every position of `piece`, in order.
  void append_indices(const Piece& piece, std::vector<std::int64_t>& out) const;
  // Appends the indices of the stream positions of `range`, in order.
  void append_indices(StreamRange range, std::vector<std::int64_t>& out) const;
  // The indices of offsets [from, to) of `batch` (a rank's slice or a chunk), in order.
  [[nodiscard]] std::vector<std::int64_t> indices(const StepBatch& batch, std::int64_t from, std::int64_t to) const;
  // Appends disjoint ranges that together hold exactly the indices of `piece`, each once (not in
  // position order). A piece of a shard not shuffled within, or a whole shard (its order is a
  // bijection onto the shard's range), is one range; a part of a shuffled shard is one range
  // per index. Counting by ranges is what lets the coverage counter keep up.
  void append_index_ranges(const Piece& piece, std::vector<IndexRange>& out) const;

 private:
  void check_piece(const Piece& piece) const;

  std::int64_t dataset_size_;
  std::int64_t shard_size_;
  std::int64_t num_shards_;
  std::uint64_t seed_;
  bool shuffle_shards_;
  bool shuffle_within_shard_;
};

// Where the next step's batch comes from: a cursor into the stream and the ranges carried
// from steps that did not train all of their batch (served first, in order). Pure and small:
// rank 0's Ledger and every rank's Agent each keep one and advance it alike, so every rank
// knows every coming batch without a message, unless a step carries positions (then the
// step's reply says which).
class StepStream {
 public:
  StepStream() = default;
  // UsageError on a data set size outside [1, kMaxDatasetSize] or max_epochs < 0.
  StepStream(std::int64_t dataset_size, std::int64_t max_epochs);
  // A stream restored where it stood. UsageError on a cursor outside [0, end()] or carried
  // ranges that are empty, overlap, or are not below the cursor.
  StepStream(std::int64_t dataset_size, std::int64_t max_epochs, std::int64_t cursor, std::vector<StreamRange> carried);

  // The next batch of up to `global_batch` (>= 1) positions: the carried ranges first, then
  // from the cursor; fewer only where the stream ends (max_epochs).
  [[nodiscard]] StepBatch next(std::int64_t global_batch) const;
  // Moves past `batch` (the last next()), except its offsets `undone` (ascending, disjoint,
  // inside the batch), which go to the front of the carried ranges, in order. UsageError on an
  // undone list that is not so, or a batch that is not next(batch.size()).
  void advance(const StepBatch& batch, std::span<const BatchRange> undone = {});

  [[nodiscard]] std::int64_t dataset_size() const noexcept { return dataset_size_; }
  [[nodiscard]] std::int64_t cursor() const noexcept { return cursor_; }
  [[nodiscard]] const std::vector<StreamRange>& carried() const noexcept { return carried_; }
  [[nodiscard]] std::int64_t carried_positions() const noexcept { return carried_positions_; }
  // The first position the stream does not hold: max_epochs * N, or kMaxStreamPosition.
  [[nodiscard]] std::int64_t end() const noexcept { return end_; }
  [[nodiscard]] std::int64_t max_epochs() const noexcept { return max_epochs_; }
  // Nothing left: the cursor is at the end and nothing is carried.
  [[nodiscard]] bool exhausted() const noexcept { return cursor_ == end_ && carried_.empty(); }
  // Epochs the cursor has entered (started): ceil(cursor / N).
  [[nodiscard]] std::int64_t started_epochs() const noexcept;
  // Where the stream ends. 0 is unlimited; otherwise it must not be below started_epochs()
  // (UsageError).
  void set_max_epochs(std::int64_t max_epochs);

 private:
  std::int64_t dataset_size_ = 1;
  std::int64_t max_epochs_ = 0;
  std::int64_t end_ = kMaxStreamPosition;
  std::int64_t cursor_ = 0;
  std::vector<StreamRange> carried_;
  std::int64_t carried_positions_ = 0;
};

// The authoritative state, rank 0's: the stream, and what every open epoch has committed.
// A position is TODO (at or after the cursor, or carried) or DONE; between steps nothing else.
// Not thread-safe.
class Ledger {
 public:
  explicit Ledger(const LedgerOptions& options);

  // The next step's batch of up to `global_batch` positions (StepStream::next).
  [[nodiscard]] StepBatch next_batch(std::int64_t global_batch) const { return stream_.next(global_batch); }
  // The step trained next_batch(global_batch) except its offsets `undone` (carried to later
  // steps, StepStream::advance): every other position becomes DONE, after the step's
  // reduction. `committed` (optional) gets the committed pieces. Returns the count committed.
  // UsageError, changing nothing, on a bad undone list.
  std::int64_t commit(std::int64_t global_batch, std::span<const BatchRange> undone = {},
                      std::vector<Piece>* committed = nullptr);

  struct EpochCounts {
    std::int64_t epoch, todo, done;
    friend bool operator==(const EpochCounts&, const EpochCounts&) = default;
  };
  // One entry per open (started, not complete) epoch, lowest first.
  [[nodiscard]] std::vector<EpochCounts> counts() const;
  // Recounts every open epoch's TODO from the stream (positions at or after the cursor, and
  // carried) and throws antdt::Error naming the epoch if todo + done != N, if a carried
  // position lies in an epoch that is not open, or if a complete epoch is not wholly behind the
  // cursor; and if the open and complete epochs are not the epochs started.
  void check_identity() const;
  [[nodiscard]] std::int64_t current_epoch() const;  // lowest epoch not yet complete
  [[nodiscard]] std::int64_t completed_epochs() const noexcept { return static_cast<std::int64_t>(completed_.size()); }
  // Epoch numbers in the order they completed (epochs can complete out of order).
  [[nodiscard]] const std::vector<std::int64_t>& completed_list() const noexcept { return completed_; }
  [[nodiscard]] bool exhausted() const { return stream_.exhausted(); }  // max_epochs reached, all DONE
  // Changes where the stream ends (a resumed run may train for more epochs, or fewer).
  void set_max_epochs(std::int64_t max_epochs);
  [[nodiscard]] const StepStream& stream() const noexcept { return stream_; }
  [[nodiscard]] const ShardMap& map() const noexcept { return map_; }
  [[nodiscard]] const LedgerOptions& options() const noexcept { return options_; }

  // The exact state (between steps), versioned: tens of bytes plus 16 per carried range.
  [[nodiscard]] std::vector<std::byte> serialize() const;
  // Any world size: the state holds no rank. CheckpointError on bad bytes.
  static Ledger restore(std::span<const std::byte> bytes);

 private:
  struct OpenEpoch {
    std::int64_t epoch = 0;
    std::int64_t done = 0;
    template <class Self, class F>
    static void fields(Self& m, F&& f) {
      f(m.epoch), f(m.done);
    }
  };
  struct Saved;
  OpenEpoch& open_epoch(std::int64_t epoch);
  void close_complete_epochs();

  LedgerOptions options_;
  ShardMap map_;
  StepStream stream_;
  std::vector<OpenEpoch> open_;  // ascending
  std::vector<std::int64_t> completed_;
  std::vector<Piece> scratch_;
};

// Rank 0's service logic: a Ledger plus an independent coverage counter. Pure.
class Coordinator {
 public:
  explicit Coordinator(const LedgerOptions& options);

  [[nodiscard]] StepBatch next_batch(std::int64_t global_batch) const { return ledger_.next_batch(global_batch); }

  struct StepResult {
    std::int64_t committed = 0;                  // positions committed this step
    std::int64_t carried = 0;                    // positions left undone, carried to later steps
    std::int64_t pieces = 0;                     // pieces committed (one per shard touched)
    std::vector<std::int64_t> completed_epochs;  // epochs that became complete
  };
  // Commits the step that trained next_batch(global_batch) except `undone` (Ledger::commit),
  // after the step's reduction. Feeds the coverage counter with the committed indices and
  // checks the identity. UsageError, changing nothing, on a bad undone list.
  StepResult commit_step(std::int64_t global_batch, std::span<const BatchRange> undone = {});

  // Counted independently of the ledger: per completed epoch, indices committed 0 times
  // (missing) and extra times (duplicated). Both must be 0. A commit that arrives for an
  // epoch already complete is counted as duplicated in its entry.
  struct EpochCoverage {
    std::int64_t epoch, committed, missing, duplicated;
    friend bool operator==(const EpochCoverage&, const EpochCoverage&) = default;
  };
  [[nodiscard]] const std::vector<EpochCoverage>& coverage() const noexcept { return coverage_; }
  [[nodiscard]] const Ledger& ledger() const noexcept { return ledger_; }
  void set_max_epochs(std::int64_t max_epochs) { ledger_.set_max_epochs(max_epochs); }

  // Ledger + coverage of completed epochs + coverage of open epochs, each bitmap as its runs of
  // set bits or raw, whichever is smaller.
  [[nodiscard]] std::vector<std::byte> serialize() const;
  static Coordinator restore(std::span<const std::byte> bytes);

 private:
  // A shard shuffled within whose positions are committed in parts (a step's batch ends inside
  // it): the parts wait here, as positions, until they make the whole shard, whose indices are
  // then one range (its order is a bijection onto it). Marking each index of a part would cost
  // a permutation and a bit per sample, every step; this costs one interval per part.
  struct PendingShard {
    std::int64_t shard = 0;
    std::int64_t count = 0;             // positions held
    std::vector<IndexRange> positions;  // in the shard's order: sorted, disjoint, not adjacent
  };
  struct OpenCoverage {
    std::int64_t epoch = 0;
    std::int64_t committed = 0;
    std::int64_t duplicated = 0;
    // One bit per sample index. Empty after a restore until the epoch is next counted: the
    // checkpoint's runs of set bits wait in `restored`, so restore costs what the checkpoint
    // holds, not N/8 bytes per epoch, and saving again costs no scan of a bitmap.
    std::vector<std::uint64_t> seen;
    std::vector<IndexRange> restored;   // sorted, disjoint, not adjacent; only while `seen` is empty
    std::vector<PendingShard> pending;  // shards committed in part; their indices are not in `seen`
  };
  // The most duplicated commits one epoch's coverage may record (2^62): its counters cannot
  // overflow, and a checkpoint claiming more is corrupt.
  static constexpr std::int64_t kMaxCoverageCount = std::int64_t{1} << 62;
  explicit Coordinator(Ledger ledger);
  static void check_coverage(const ShardMap& map, const std::vector<EpochCoverage>& coverage,
                             const std::vector<OpenCoverage>& open);
  void count(const Piece& piece);
  void count_part(OpenCoverage& open, const Piece& piece);
  void finish_epoch(std::int64_t epoch);

  Ledger ledger_;
  std::vector<EpochCoverage> coverage_;
  std::vector<OpenCoverage> open_coverage_;
  // Reused every step.
  std::vector<Piece> scratch_pieces_;
  std::vector<IndexRange> scratch_ranges_;
};

}  // namespace antdt::dds
