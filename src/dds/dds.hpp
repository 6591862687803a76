// Dynamic data sharding (DDS): rank 0 hands out the data set as index-range pieces of
// shards, at fine granularity, so fast ranks take more, and every piece has a state so the
// job knows exactly what was trained on. Exactly once per epoch (docs/dds.md):
//
//   In every epoch each sample index is committed exactly once. A range is committed only
//   after the reduction of the step that used it. When a rank fails, is dropped as a backup,
//   or the job restarts, only the uncommitted tails go back to TODO.
//   Identity for every open epoch, after every operation: done + doing_remaining + todo == N.
//
// Everything here is pure C++ (no MPI): the Ledger is the state machine, the Coordinator is
// rank 0's service logic on top of it, and the Client is every rank's mirror of its own
// grants. The step protocol (docs/protocol.md) carries them over MPI.
//
// Position space: N samples are cut into S = ceil(N / shard_size) shards; shard s holds the
// indices [s*shard_size, min(N, (s+1)*shard_size)). Each epoch visits the shards in its own
// order and, optionally, the samples of a shard in its own order. All bookkeeping is in
// positions (epoch, shard, [begin,end) in that shard's order); ShardMap turns positions into
// sample indices. It is a bijection, so exactly once in positions is exactly once in indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

namespace antdt::dds {

struct LedgerOptions {
  std::int64_t dataset_size = 0;  // 1 <= N <= kMaxDatasetSize
  std::int64_t shard_size = 0;    // 0: default_shard_size(N, kDefaultMicroBatch)
  std::uint64_t seed = 0;
  bool shuffle_shards = true;         // each epoch visits the shards in its own seeded order
  bool shuffle_within_shard = false;  // each (epoch, shard) has its own seeded sample order
  std::int64_t max_epochs = 0;        // 0 = unlimited; otherwise no epoch >= max_epochs is opened
};

// The largest data set (samples) a ledger accepts: 2^36, about 6.9e10. It keeps every
// position sum far from int64 overflow and bounds the Coordinator's coverage bitmap (one bit
// per sample per open epoch, 8 GiB at the limit), so a corrupt checkpoint cannot ask for more.
inline constexpr std::int64_t kMaxDatasetSize = std::int64_t{1} << 36;

// The micro-batch assumed when LedgerOptions::shard_size is 0. The Session passes its real
// micro-batch through default_shard_size instead.
inline constexpr std::int64_t kDefaultMicroBatch = 32;

// About 10 typical micro-batches, at least 1, at most N: large enough that a rank touches
// rank 0 rarely, small enough that fast ranks can take more. Throws UsageError for N < 1.
[[nodiscard]] std::int64_t default_shard_size(std::int64_t dataset_size, std::int64_t typical_micro_batch);

// A run of positions handed to (or consumed by) one rank, in order of consumption.
struct Grant {
  std::int64_t epoch = 0;
  std::int64_t shard = 0;
  std::int64_t begin = 0;  // positions in the shard's order for this epoch, [begin, end)
  std::int64_t end = 0;
  std::int32_t rank = 0;

  [[nodiscard]] std::int64_t size() const noexcept { return end - begin; }
  friend bool operator==(const Grant&, const Grant&) = default;
};

// Sample indices [begin, end), consecutive.
struct IndexRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  friend bool operator==(const IndexRange&, const IndexRange&) = default;
};

// Pure function of LedgerOptions: shard geometry and the per-epoch orders. The orders come
// from a keyed Feistel permutation (cycle-walked to the exact domain), so any position maps
// to its index in O(1) without storing a permutation. Throws UsageError on bad options.
class ShardMap {
 public:
  explicit ShardMap(const LedgerOptions& options);

  [[nodiscard]] std::int64_t dataset_size() const noexcept { return dataset_size_; }
  [[nodiscard]] std::int64_t shard_size() const noexcept { return shard_size_; }
  [[nodiscard]] std::int64_t num_shards() const noexcept { return num_shards_; }
  [[nodiscard]] std::int64_t shard_length(std::int64_t shard) const;
  // The shard visited `order`-th in `epoch`.
  [[nodiscard]] std::int64_t shard_at(std::int64_t epoch, std::int64_t order) const;
  // Inverse of shard_at: where `shard` comes in `epoch`'s order.
  [[nodiscard]] std::int64_t order_of(std::int64_t epoch, std::int64_t shard) const;
  // The sample index at `position` of `shard` in `epoch`.
  [[nodiscard]] std::int64_t sample_index(std::int64_t epoch, std::int64_t shard, std::int64_t position) const;
  // Appends the indices of every position of `run`, in order.
  void append_indices(const Grant& run, std::vector<std::int64_t>& out) const;
  // Appends disjoint ranges that together hold exactly the indices of `run`, each once (not in
  // position order). A run of a shard not shuffled within, or a whole shard (its order is a
  // bijection onto the shard's range), is one range; a part of a shuffled shard is one range
  // per index. Counting by ranges is what lets the coverage counter keep up with 10^5 ranks.
  void append_index_ranges(const Grant& run, std::vector<IndexRange>& out) const;

 private:
  std::int64_t dataset_size_;
  std::int64_t shard_size_;
  std::int64_t num_shards_;
  std::uint64_t seed_;
  bool shuffle_shards_;
  bool shuffle_within_shard_;
};

// The authoritative state machine. A piece of a shard is TODO, DOING (owner, consumed and
// committed offsets) or DONE. Epochs overlap: when the open epochs have no TODO left,
// acquire opens the next epoch, so no rank starves at an epoch boundary.
// Not thread-safe; rank 0 owns it. Rank arguments outside [0, world_size) throw UsageError.
class Ledger {
 public:
  Ledger(const LedgerOptions& options, int world_size);

  // Next TODO piece for `rank` -> DOING(rank). Order: the rank's own tails restored from a
  // checkpoint (see restore), then the lowest open epoch's TODO (returned tails first, then
  // shards in the epoch's order), then tails reserved for other ranks, then a new epoch.
  // nullopt when nothing is left (max_epochs reached).
  // `max_positions` > 0 caps the grant: a longer TODO piece is split and its remainder stays
  // first in line, so the next grant continues the same shard. Reserved tails are not split.
  std::optional<Grant> acquire(int rank, std::int64_t max_positions = 0);
  // The next k positions of the rank's DOING pieces, in acquisition order; runs may span
  // pieces; fewer if the rank holds fewer.
  std::vector<Grant> consume(int rank, std::int64_t k);
  // The same, appending the runs to `runs` (no allocation once `runs` has grown).
  void consume(int rank, std::int64_t k, std::vector<Grant>& runs);
  // Everything the rank consumed and has not committed becomes DONE. Returns the count.
  std::int64_t commit(int rank);
  // The uncommitted tails of every piece the rank holds (consumed or not) -> TODO, at the
  // front of their epoch's TODO order. Returns the count.
  std::int64_t fail_rank(int rank);
  // A backup's step is dropped: its consumed-uncommitted positions -> TODO; the rank keeps
  // its unconsumed remainder. Returns the count.
  std::int64_t drop(int rank);
  // Unconsumed positions the rank holds. O(1): a running count, which check_identity recounts.
  [[nodiscard]] std::int64_t held(int rank) const;
  // TODO positions restore reserved for `rank` (its own tails); acquire serves them first.
  [[nodiscard]] std::int64_t reserved(int rank) const;
  // Whether any tail is still reserved for `rank`. O(1).
  [[nodiscard]] bool has_reserved(int rank) const;

  struct EpochCounts {
    std::int64_t epoch, todo, doing_remaining, done;
    friend bool operator==(const EpochCounts&, const EpochCounts&) = default;
  };
  // One entry per open (started, not complete) epoch, lowest first.
  [[nodiscard]] std::vector<EpochCounts> counts() const;
  // Recounts every open epoch from the pieces themselves (independently of the running
  // counters) and throws antdt::Error naming the epoch if todo + doing + done != N, or a rank
  // whose held() disagrees with its pieces. One pass over every piece: O(pieces + ranks).
  void check_identity() const;
  [[nodiscard]] std::int64_t current_epoch() const;  // lowest epoch not yet complete
  [[nodiscard]] std::int64_t completed_epochs() const noexcept { return static_cast<std::int64_t>(completed_.size()); }
  // Epoch numbers in the order they completed (epochs can complete out of order).
  [[nodiscard]] const std::vector<std::int64_t>& completed_list() const noexcept { return completed_; }
  [[nodiscard]] bool exhausted() const;  // max_epochs reached and nothing TODO/DOING
  // Changes where the ledger stops (a resumed run may train for more epochs, or fewer). 0 is
  // unlimited; otherwise it must not be below the epochs already opened (UsageError).
  void set_max_epochs(std::int64_t max_epochs);
  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  [[nodiscard]] const ShardMap& map() const noexcept { return map_; }
  [[nodiscard]] const LedgerOptions& options() const noexcept { return options_; }

  // The exact state, versioned.
  [[nodiscard]] std::vector<std::byte> serialize() const;
  // Rebuilds a ledger for `world_size` ranks. DOING tails (uncommitted) come back as TODO,
  // at the FRONT of the TODO order. On the same world size each tail stays reserved for
  // its previous owner (acquire hands it back to that rank first, in the old order); on
  // another world size they are free. Throws CheckpointError on bad bytes.
  static Ledger restore(std::span<const std::byte> bytes, int world_size);

 private:
  struct Piece {  // a DOING piece: [committed, end) uncommitted, [consumed, end) unconsumed
    std::int64_t epoch, shard, committed, consumed, end;
  };
  struct TodoPiece {
    std::int64_t shard, begin, end;
  };
  struct Reserved {  // a TODO tail reserved for its previous owner
    std::int64_t epoch, shard, begin, end;
  };
  struct Epoch {
    std::int64_t epoch = 0;
    std::int64_t next_order = 0;     // shards before this order were already handed out
    std::deque<TodoPiece> returned;  // tails back in TODO, served before new shards
    std::int64_t todo = 0, doing = 0, done = 0;
  };

  void check_rank(int rank, const char* what) const;
  Epoch& epoch_state(std::int64_t epoch);
  Epoch* find_epoch(std::int64_t epoch);
  Grant take_piece(int rank, Epoch& e, std::int64_t max_positions);
  Grant hand_out(int rank, std::int64_t epoch, std::int64_t shard, std::int64_t begin, std::int64_t end);
  void return_tails(std::vector<Reserved> tails);
  void close_complete_epochs();

  // Per-rank lists are vectors, not deques: a libstdc++ deque allocates about 600 bytes even
  // when empty, 120 MB for the two lists of 100,000 ranks, and most lists hold 1 to 3 pieces.
  LedgerOptions options_;
  ShardMap map_;
  int world_size_;
  std::int64_t next_epoch_ = 0;                  // the next epoch acquire may open
  std::deque<Epoch> open_;                       // open epochs, ascending
  std::vector<std::vector<Piece>> doing_;        // per rank, in acquisition order
  std::vector<std::vector<Reserved>> reserved_;  // per rank, restored tails, the NEXT ONE LAST (old order reversed)
  std::vector<std::int64_t> held_;               // per rank: unconsumed positions of its DOING pieces
  std::int64_t reserved_pieces_ = 0;             // reserved tails over all ranks
  std::vector<std::int64_t> completed_;
};

// Rank 0's service logic: a Ledger plus an independent coverage counter. Pure.
class Coordinator {
 public:
  Coordinator(const LedgerOptions& options, int world_size, int prefetch_steps = 2);

  // Tops up every rank r until held(r) >= prefetch_steps * demand[r] (demand: its samples
  // per step under the plan that will be in force), one piece at a time, lowest rank first.
  // Before that, each rank gets back all tails reserved for it by restore, in their old
  // order, so a run resumed on the same world size consumes exactly what the uninterrupted
  // run would have. Returns the new grants of all ranks. UsageError on a bad demand vector.
  std::vector<Grant> grant(const std::vector<std::int64_t>& demand);

  struct StepResult {
    std::int64_t committed = 0;                  // positions committed this step
    std::int64_t returned = 0;                   // positions of dropped ranks sent back to TODO
    std::vector<std::int64_t> completed_epochs;  // epochs that became complete
  };
  // Mirrors what every rank consumed this step (consumed[r]: samples rank r used, reported
  // in the step's control collective) and commits it, after the step's reduction. Ranks in
  // `dropped` (backups whose work was not used) have their consumption returned to TODO
  // instead. Feeds the coverage counter with the committed indices and checks the identity.
  // Throws antdt::Error, changing nothing, if a rank reports more than it held.
  StepResult commit_step(const std::vector<std::int64_t>& consumed, const std::vector<int>& dropped = {});
  std::int64_t fail_rank(int rank);
  // Ledger::drop between steps (commit_step with `dropped` is the usual path).
  std::int64_t drop(int rank);

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
  [[nodiscard]] int prefetch_steps() const noexcept { return prefetch_steps_; }

  // Ledger + coverage of completed epochs + coverage of open epochs, each bitmap as its runs of
  // set bits or raw, whichever is smaller (version 2; version 1, always raw, is still read).
  [[nodiscard]] std::vector<std::byte> serialize() const;
  static Coordinator restore(std::span<const std::byte> bytes, int world_size, int prefetch_steps = 2);

 private:
  struct OpenCoverage {
    std::int64_t epoch = 0;
    std::int64_t committed = 0;
    std::int64_t duplicated = 0;
    // One bit per sample index. Empty after a restore until the epoch is next counted: the
    // checkpoint's runs of set bits wait in `restored`, so restore costs what the checkpoint
    // holds, not N/8 bytes per epoch, and saving again costs no scan of a bitmap.
    std::vector<std::uint64_t> seen;
    std::vector<IndexRange> restored;  // sorted, disjoint, not adjacent; only while `seen` is empty
  };
  // The most duplicated commits one epoch's coverage may record (2^62): its counters cannot
  // overflow, and a checkpoint claiming more is corrupt.
  static constexpr std::int64_t kMaxCoverageCount = std::int64_t{1} << 62;
  Coordinator(Ledger ledger, int prefetch_steps);
  static void check_coverage(std::int64_t dataset_size, const std::vector<EpochCoverage>& coverage,
                             const std::vector<OpenCoverage>& open);
  void count(const Grant& run);
  void finish_epoch(std::int64_t epoch);

  Ledger ledger_;
  int prefetch_steps_;
  std::vector<EpochCoverage> coverage_;
  std::vector<OpenCoverage> open_coverage_;
  // Reused every step, so that a step allocates nothing in proportion to the ranks.
  std::vector<Grant> scratch_runs_;
  std::vector<IndexRange> scratch_ranges_;
  std::vector<int> scratch_ranks_;
  std::vector<char> scratch_dropped_;
};

// One rank's mirror of its own grants. It consumes exactly as Ledger::consume does for that
// rank, so the indices take() returns are the ones the Coordinator will commit.
class Client {
 public:
  explicit Client(const LedgerOptions& options);
  // Keeps only the grants for my_rank, in order. Throws antdt::Error, adding nothing, if one
  // of them is outside the data set (a corrupt control reply).
  void add(const std::vector<Grant>& grants, int my_rank);
  // Sample indices of the next k positions (fewer if it holds fewer).
  std::vector<std::int64_t> take(std::int64_t k);
  // What take(k) would return now, without taking it (a read-ahead's guess of a later step).
  [[nodiscard]] std::vector<std::int64_t> peek(std::int64_t k) const;
  [[nodiscard]] std::int64_t held() const noexcept { return held_; }
  void clear();

 private:
  ShardMap map_;
  // Grants not yet used up are grants_[first_, end): the first one's begin advances as positions
  // are taken. A vector rather than a deque (whose empty size, ~600 B, is 60 MB over the
  // Clients of 100,000 simulated ranks); the used prefix is dropped once it is half the vector.
  std::vector<Grant> grants_;
  std::size_t first_ = 0;
  std::int64_t held_ = 0;
};

}  // namespace antdt::dds
