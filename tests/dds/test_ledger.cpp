// Unit tests of ShardMap, StepStream, Ledger and Coordinator (pure, no MPI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "dds/dds.hpp"
#include "dds/wire.hpp"

using namespace antdt::dds;

namespace {

LedgerOptions opts(std::int64_t n, std::int64_t shard, bool shuffle = false, std::int64_t max_epochs = 0,
                   bool within = false) {
  LedgerOptions o;
  o.dataset_size = n;
  o.shard_size = shard;
  o.seed = 42;
  o.shuffle_shards = shuffle;
  o.shuffle_within_shard = within;
  o.max_epochs = max_epochs;
  return o;
}

}  // namespace

TEST(ShardMap, GeometryWithShortLastShard) {
  const ShardMap map(opts(10, 3));
  EXPECT_EQ(map.num_shards(), 4);
  EXPECT_EQ(map.shard_length(0), 3);
  EXPECT_EQ(map.shard_length(3), 1);
  EXPECT_EQ(map.sample_index(0, 3, 0), 9);
  EXPECT_THROW((void)map.shard_length(4), antdt::UsageError);
  EXPECT_THROW((void)map.sample_index(0, 3, 1), antdt::UsageError);
}

TEST(ShardMap, TheDefaultShardIsTheWholeDataSetOrTenGlobalBatchesWhenNotShuffledWithin) {
  EXPECT_EQ(local_shard_size(100000, 256), 2560);
  EXPECT_EQ(local_shard_size(2000, 256), 2000) << "small data: one shard";
  EXPECT_EQ(local_shard_size(5, 0), 5);
  EXPECT_EQ(local_shard_size(1, 1), 1);
  EXPECT_THROW((void)local_shard_size(0, 32), antdt::UsageError);
  EXPECT_EQ(default_shard_size(100000, 256, true), 100000) << "shuffled: one shard, a full permutation";
  EXPECT_EQ(default_shard_size(100000, 256, false), 2560) << "contiguous: shard-local";
  EXPECT_THROW((void)default_shard_size(0, 32, true), antdt::UsageError);
  EXPECT_EQ(ShardMap(opts(100000, 0, true, 0, true)).shard_size(), 100000);
  EXPECT_EQ(ShardMap(opts(100000, 0, true, 0, true)).num_shards(), 1);
  EXPECT_EQ(ShardMap(opts(100000, 0, true, 0, false)).shard_size(), 10 * kDefaultBatch);
  EXPECT_EQ(ShardMap(opts(7, 100)).shard_size(), 7);
}

TEST(ShardMap, RejectsBadOptions) {
  EXPECT_THROW(ShardMap(opts(0, 1)), antdt::UsageError);
  EXPECT_THROW(ShardMap(opts(10, -1)), antdt::UsageError);
  EXPECT_THROW(ShardMap(opts(10, 1, false, -1)), antdt::UsageError);
  // The documented size limit: at it the map works, one past it is a usage error.
  EXPECT_EQ(ShardMap(opts(kMaxDatasetSize, 1 << 20)).num_shards(), kMaxDatasetSize >> 20);
  EXPECT_THROW(ShardMap(opts(kMaxDatasetSize + 1, 1 << 20)), antdt::UsageError);
}

TEST(ShardMap, ShardOrderIsAPermutationPerEpochAndVariesWithEpochAndSeed) {
  for (std::int64_t shards : {1, 2, 3, 5, 16, 17, 100, 1000}) {
    auto o = opts(shards * 2 - 1, 2, true);
    const ShardMap map(o);
    ASSERT_EQ(map.num_shards(), shards);
    std::vector<std::int64_t> e0, e1;
    for (std::int64_t epoch : {0, 1}) {
      std::vector<bool> seen(static_cast<std::size_t>(shards), false);
      for (std::int64_t k = 0; k < shards; ++k) {
        const auto s = map.shard_at(epoch, k);
        ASSERT_GE(s, 0);
        ASSERT_LT(s, shards);
        ASSERT_FALSE(seen[static_cast<std::size_t>(s)]) << "shard repeated in one epoch's order";
        seen[static_cast<std::size_t>(s)] = true;
        EXPECT_EQ(map.order_of(epoch, s), k);
        (epoch == 0 ? e0 : e1).push_back(s);
      }
    }
    if (shards >= 16) {
      EXPECT_NE(e0, e1) << "epochs should visit shards in different orders";
      std::vector<std::int64_t> identity(static_cast<std::size_t>(shards));
      std::iota(identity.begin(), identity.end(), 0);
      EXPECT_NE(e0, identity);
      o.seed = 43;
      std::vector<std::int64_t> other;
      for (std::int64_t k = 0; k < shards; ++k) other.push_back(ShardMap(o).shard_at(0, k));
      EXPECT_NE(e0, other) << "the seed must change the order";
    }
  }
}

TEST(ShardMap, WithinShardShuffleIsABijectionOnEachShard) {
  auto o = opts(103, 10, true);
  o.shuffle_within_shard = true;
  const ShardMap map(o);
  for (std::int64_t epoch : {0, 5}) {
    std::vector<int> hits(103, 0);
    bool moved = false;
    for (std::int64_t s = 0; s < map.num_shards(); ++s) {
      std::vector<std::int64_t> run;
      map.append_indices(Piece{epoch, s, 0, map.shard_length(s)}, run);
      ASSERT_EQ(static_cast<std::int64_t>(run.size()), map.shard_length(s));
      for (std::int64_t p = 0; p < map.shard_length(s); ++p) {
        const auto idx = run[static_cast<std::size_t>(p)];
        EXPECT_EQ(idx, map.sample_index(epoch, s, p));
        EXPECT_GE(idx, s * 10);
        EXPECT_LT(idx, s * 10 + map.shard_length(s));
        moved = moved || idx != s * 10 + p;
        ++hits[static_cast<std::size_t>(idx)];
      }
    }
    EXPECT_TRUE(moved);
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}

TEST(ShardMap, IndexRangesHoldExactlyTheIndicesOfARun) {
  for (bool within : {false, true}) {
    auto o = opts(103, 10, true);
    o.shuffle_within_shard = within;
    const ShardMap map(o);
    for (std::int64_t epoch : {0, 3}) {
      for (std::int64_t s = 0; s < map.num_shards(); ++s) {
        const std::int64_t length = map.shard_length(s);
        for (const auto& [begin, end] : std::vector<std::pair<std::int64_t, std::int64_t>>{
                 {0, length}, {0, 1}, {1, length}, {2, 2}, {length / 3, length - 1}}) {
          if (end < begin) continue;
          const Piece run{epoch, s, begin, end};
          std::vector<std::int64_t> indices;
          map.append_indices(run, indices);
          std::vector<IndexRange> ranges;
          map.append_index_ranges(run, ranges);
          std::vector<std::int64_t> expanded;
          for (const auto& r : ranges) {
            ASSERT_LT(r.begin, r.end);
            for (std::int64_t i = r.begin; i < r.end; ++i) expanded.push_back(i);
          }
          std::sort(indices.begin(), indices.end());
          std::sort(expanded.begin(), expanded.end());
          EXPECT_EQ(expanded, indices) << "epoch " << epoch << " shard " << s << " [" << begin << ", " << end << ")";
          if (begin < end && (!within || (begin == 0 && end == length))) {
            EXPECT_EQ(ranges.size(), 1U) << "a contiguous image is one range";
          }
        }
      }
    }
    std::vector<IndexRange> out;
    EXPECT_THROW(map.append_index_ranges(Piece{0, 0, 3, 11}, out), antdt::UsageError);
  }
}

TEST(ShardMap, TheStreamVisitsEachEpochsShardsInItsOrderAndEveryIndexOnce) {
  // Short last shard anywhere in the order, shard size 1, one shard, and N a multiple of it.
  for (const auto& [n, shard] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{103, 10}, {100, 10}, {7, 1}, {9, 9}}) {
    for (const bool within : {false, true}) {
      const ShardMap map(opts(n, shard, true, 0, within));
      for (const std::int64_t epoch : {0, 1, 4}) {
        std::vector<std::int64_t> indices;
        std::int64_t order = 0;
        map.for_each_piece(StreamRange{epoch * n, (epoch + 1) * n}, [&](const Piece& piece) {
          EXPECT_EQ(piece.epoch, epoch);
          EXPECT_EQ(piece.shard, map.shard_at(epoch, order++)) << "the epoch's shard order";
          EXPECT_EQ(piece.begin, 0);
          EXPECT_EQ(piece.end, map.shard_length(piece.shard)) << "whole shards";
          map.append_indices(piece, indices);
        });
        EXPECT_EQ(order, map.num_shards());
        std::vector<std::int64_t> by_position;
        for (std::int64_t p = epoch * n; p < (epoch + 1) * n; ++p) by_position.push_back(map.index_at(p));
        EXPECT_EQ(by_position, indices) << "index_at is the pieces' order, position by position";
        std::sort(indices.begin(), indices.end());
        std::vector<std::int64_t> all(static_cast<std::size_t>(n));
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(indices, all) << "every index once per epoch (n " << n << ", shard " << shard << ")";
      }
      // A range that starts and ends inside shards, and spans an epoch boundary.
      std::vector<std::int64_t> cut, whole;
      map.append_indices(StreamRange{n - 3, n + 5}, cut);
      for (std::int64_t p = n - 3; p < n + 5; ++p) whole.push_back(map.index_at(p));
      EXPECT_EQ(cut, whole);
      EXPECT_THROW((void)map.piece_at(5, 5), antdt::UsageError);
    }
  }
}

TEST(StepBatch, SlicesAreTheBatchsOffsetsAndSharesFollowThePlan) {
  const StepBatch batch{{{40, 43}, {10, 12}, {100, 110}}};  // 3 carried, 2 carried, then the cursor's 10
  EXPECT_EQ(batch.size(), 15);
  std::vector<StreamRange> out;
  batch.slice(2, 6, out);
  EXPECT_EQ(out, (std::vector<StreamRange>{{42, 43}, {10, 12}, {100, 101}}));
  out.clear();
  batch.slice(12, 99, out);
  EXPECT_EQ(out, (std::vector<StreamRange>{{107, 110}})) << "clipped to the batch";
  const std::vector<std::int64_t> shares{4, 0, 6, 5};
  EXPECT_EQ(share_of(shares, 0, 15), (BatchRange{0, 4}));
  EXPECT_EQ(share_of(shares, 1, 15), (BatchRange{4, 4})) << "a rank without a share";
  EXPECT_EQ(share_of(shares, 2, 15), (BatchRange{4, 10}));
  EXPECT_EQ(share_of(shares, 3, 15), (BatchRange{10, 15}));
  EXPECT_EQ(share_of(shares, 3, 12), (BatchRange{10, 12})) << "a short final step gives the last ranks less";
  EXPECT_EQ(share_of(shares, 3, 8), (BatchRange{8, 8}));
  EXPECT_EQ(share_of(shares, 4, 15), (BatchRange{0, 0}));
}

TEST(StepStream, BatchesAreTheNextBPositionsCarriedFirstAndStopAtTheEnd) {
  StepStream s(10, 2);  // 20 positions
  EXPECT_EQ(s.next(6), (StepBatch{{{0, 6}}}));
  s.advance(s.next(6));
  EXPECT_EQ(s.cursor(), 6);
  // The step left offsets [1, 3) and [5, 6) undone: positions 7, 8 and 11.
  const StepBatch b = s.next(6);
  s.advance(b, std::vector<BatchRange>{{1, 3}, {5, 6}});
  EXPECT_EQ(s.cursor(), 12);
  EXPECT_EQ(s.carried(), (std::vector<StreamRange>{{7, 9}, {11, 12}}));
  EXPECT_EQ(s.carried_positions(), 3);
  EXPECT_EQ(s.next(4), (StepBatch{{{7, 9}, {11, 12}, {12, 13}}})) << "carried first, in order, then the cursor";
  EXPECT_EQ(s.next(2), (StepBatch{{{7, 9}}}));
  // Part of the carried ranges taken, the first position of the batch left again: it stays first.
  s.advance(s.next(2), std::vector<BatchRange>{{0, 1}});
  EXPECT_EQ(s.carried(), (std::vector<StreamRange>{{7, 8}, {11, 12}}));
  s.advance(s.next(2));
  EXPECT_EQ(s.carried().size(), 0U);
  EXPECT_EQ(s.cursor(), 12);
  s.advance(s.next(5));
  EXPECT_EQ(s.next(5), (StepBatch{{{17, 20}}})) << "max_epochs cuts the last step";
  s.advance(s.next(5), std::vector<BatchRange>{{2, 3}});
  EXPECT_FALSE(s.exhausted()) << "position 19 is still to train";
  EXPECT_EQ(s.next(5), (StepBatch{{{19, 20}}}));
  s.advance(s.next(5));
  EXPECT_TRUE(s.exhausted());
  EXPECT_EQ(s.next(5).size(), 0);
}

TEST(StepStream, UndoneRangesThatTouchAreJoined) {
  StepStream s(100, 0);
  s.advance(s.next(10), std::vector<BatchRange>{{2, 4}, {4, 6}, {9, 10}});
  EXPECT_EQ(s.carried(), (std::vector<StreamRange>{{2, 6}, {9, 10}}));
}

TEST(StepStream, RejectsAnotherBatchABadUndoneListOrABadRestoredState) {
  StepStream s(10, 0);
  EXPECT_THROW(s.advance(StepBatch{{{1, 4}}}), antdt::UsageError) << "not the next batch";
  const StepBatch b = s.next(5);
  EXPECT_THROW(s.advance(b, std::vector<BatchRange>{{3, 4}, {1, 2}}), antdt::UsageError) << "out of order";
  EXPECT_THROW(s.advance(b, std::vector<BatchRange>{{1, 3}, {2, 4}}), antdt::UsageError) << "overlapping";
  EXPECT_THROW(s.advance(b, std::vector<BatchRange>{{4, 6}}), antdt::UsageError) << "past the batch";
  EXPECT_THROW(s.advance(b, std::vector<BatchRange>{{3, 2}}), antdt::UsageError) << "inside out";
  EXPECT_EQ(s.cursor(), 0) << "a rejected advance changes nothing";
  EXPECT_THROW((void)s.next(0), antdt::UsageError);
  EXPECT_THROW(StepStream(10, 1, 11, {}), antdt::UsageError) << "cursor past the end";
  EXPECT_THROW(StepStream(10, 0, 5, {{4, 6}}), antdt::UsageError) << "carried at or after the cursor";
  EXPECT_THROW(StepStream(10, 0, 9, {{1, 4}, {3, 5}}), antdt::UsageError) << "overlapping";
  EXPECT_THROW(StepStream(10, 0, 9, {{2, 2}}), antdt::UsageError) << "empty";
  EXPECT_NO_THROW(StepStream(10, 0, 9, {{5, 7}, {1, 4}}));
  EXPECT_THROW(StepStream(0, 0), antdt::UsageError);
  EXPECT_THROW(StepStream(10, -1), antdt::UsageError);
  EXPECT_THROW(StepStream(kMaxDatasetSize, kMaxStreamPosition), antdt::UsageError) << "past the stream's end";
}

TEST(StepStream, MaxEpochsCanGrowOrShrinkButNotBelowTheEpochsStarted) {
  StepStream s(10, 3);
  s.advance(s.next(12));  // inside epoch 1
  EXPECT_EQ(s.started_epochs(), 2);
  EXPECT_THROW(s.set_max_epochs(1), antdt::UsageError);
  s.set_max_epochs(2);
  EXPECT_EQ(s.end(), 20);
  s.set_max_epochs(0);
  EXPECT_EQ(s.end(), kMaxStreamPosition);
}

TEST(Ledger, StepsCommitTheirBatchesAndEpochsCompleteWhenAllIsDone) {
  Ledger l(opts(10, 3, true, 2));
  EXPECT_TRUE(l.counts().empty());
  EXPECT_EQ(l.commit(4), 4);
  EXPECT_EQ(l.counts(), (std::vector<Ledger::EpochCounts>{{0, 6, 4}}));
  // A step of 8 crosses into epoch 1 and leaves offsets [1, 3) (positions 5, 6) undone.
  EXPECT_EQ(l.commit(8, std::vector<BatchRange>{{1, 3}}), 6);
  EXPECT_EQ(l.counts(), (std::vector<Ledger::EpochCounts>{{0, 2, 8}, {1, 8, 2}}));
  l.check_identity();
  EXPECT_EQ(l.current_epoch(), 0);
  // The next step takes them first: epoch 0 completes while epoch 1 goes on.
  std::vector<Piece> pieces;
  EXPECT_EQ(l.commit(3, {}, &pieces), 3);
  std::int64_t in_epoch0 = 0;
  for (const auto& p : pieces) in_epoch0 += p.epoch == 0 ? p.size() : 0;
  EXPECT_EQ(in_epoch0, 2);
  EXPECT_EQ(l.completed_list(), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(l.counts(), (std::vector<Ledger::EpochCounts>{{1, 7, 3}}));
  while (!l.exhausted()) (void)l.commit(4);
  EXPECT_EQ(l.completed_list(), (std::vector<std::int64_t>{0, 1}));
  EXPECT_TRUE(l.counts().empty());
  EXPECT_THROW((void)l.commit(4), antdt::UsageError) << "nothing after the end";
}

TEST(Ledger, AStepLargerThanTheDataSetSpansEpochs) {
  Ledger l(opts(3, 1, true, 5));
  EXPECT_EQ(l.commit(8), 8);
  EXPECT_EQ(l.completed_list(), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(l.counts(), (std::vector<Ledger::EpochCounts>{{2, 1, 2}}));
  l.check_identity();
}

TEST(Ledger, ABadUndoneListChangesNothing) {
  Ledger l(opts(20, 4, true, 1));
  (void)l.commit(5);
  const auto before = l.serialize();
  EXPECT_THROW((void)l.commit(5, std::vector<BatchRange>{{3, 9}}), antdt::UsageError);
  EXPECT_EQ(l.serialize(), before);
}

TEST(Ledger, MaxEpochsCanChangeButNotBelowTheEpochsStarted) {
  Ledger l(opts(10, 3, false, 1));
  (void)l.commit(4);
  EXPECT_THROW(l.set_max_epochs(-1), antdt::UsageError);
  l.set_max_epochs(2);
  EXPECT_EQ(l.options().max_epochs, 2);
  while (!l.exhausted()) (void)l.commit(4);
  EXPECT_EQ(l.completed_epochs(), 2);
}

TEST(Ledger, SerializeRestoreIsExactAndHoldsNoRank) {
  for (const bool within : {false, true}) {
    Ledger l(opts(53, 4, true, 3, within));
    for (int s = 0; s < 8; ++s)
      (void)l.commit(7, s % 3 == 1 ? std::vector<BatchRange>{{2, 4}} : std::vector<BatchRange>{});
    ASSERT_FALSE(l.stream().carried().empty());
    const auto bytes = l.serialize();
    // Magic, version, the options, cursor, carried ranges and open epochs: tens of bytes.
    EXPECT_LE(bytes.size(), 200U + 16 * l.stream().carried().size());
    Ledger back = Ledger::restore(bytes);
    EXPECT_EQ(back.serialize(), bytes);
    EXPECT_EQ(back.counts(), l.counts());
    EXPECT_EQ(back.next_batch(7), l.next_batch(7)) << "the next step is the same step";
    while (!l.exhausted()) {
      EXPECT_EQ(back.commit(7), l.commit(7));
      EXPECT_EQ(back.counts(), l.counts());
    }
    EXPECT_TRUE(back.exhausted());
  }
}

TEST(Ledger, RestoreRejectsBadBytes) {
  Ledger l(opts(30, 5, true, 2));
  (void)l.commit(7, std::vector<BatchRange>{{1, 2}});
  const auto bytes = l.serialize();
  EXPECT_THROW(Ledger::restore(std::span(bytes).first(bytes.size() - 1)), antdt::CheckpointError) << "truncated";
  auto bad = bytes;
  bad[0] = std::byte{0};
  EXPECT_THROW(Ledger::restore(bad), antdt::CheckpointError) << "bad magic";
  // An older format: this build's header with format 1, and the version-1 ledger's own magic.
  bad = bytes;
  bad[4] = std::byte{1};
  auto v1 = std::vector<std::byte>{std::byte{'D'}, std::byte{'D'}, std::byte{'S'}, std::byte{'L'},
                                   std::byte{'E'}, std::byte{'D'}, std::byte{'G'}, std::byte{'R'}};
  v1.resize(64, std::byte{0});
  for (const auto& older : {bad, v1}) {
    try {
      (void)Ledger::restore(older);
      ADD_FAILURE() << "an older ledger restored";
    } catch (const antdt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("an older antdt wrote it"), std::string::npos) << e.what();
    }
  }
  bad = bytes;
  bad.push_back(std::byte{0});
  EXPECT_THROW(Ledger::restore(bad), antdt::CheckpointError) << "trailing bytes";
  // The fields, in their one order (Ledger::Saved): 8 bytes of magic and format, N, shard
  // size, seed, two flags, max_epochs, cursor, then the carried ranges.
  const std::size_t cursor_at = 8 + 8 + 8 + 8 + 2 + 8;
  const auto with_cursor = [&](std::int64_t cursor) {
    auto b = bytes;
    std::memcpy(b.data() + cursor_at, &cursor, sizeof cursor);
    return b;
  };
  EXPECT_NO_THROW((void)Ledger::restore(with_cursor(7)));
  EXPECT_THROW((void)Ledger::restore(with_cursor(61)), antdt::CheckpointError) << "past the end (2 epochs)";
  EXPECT_THROW((void)Ledger::restore(with_cursor(1)), antdt::CheckpointError) << "the carried position after it";
  EXPECT_THROW((void)Ledger::restore(with_cursor(31)), antdt::CheckpointError) << "epoch 1 started but not open";
  EXPECT_THROW((void)Ledger::restore(with_cursor(6)), antdt::CheckpointError) << "todo + done != N";
}

namespace {

// A Coordinator's steps with an independent tally of every index it trained, per epoch of the
// stream: the batches are computed here from the stream alone (StepStream and ShardMap).
struct Steps {
  LedgerOptions options;
  ShardMap map;
  StepStream stream;
  std::vector<std::int64_t> trained;  // every index trained, in order

  explicit Steps(const LedgerOptions& o) : options(o), map(o), stream(o.dataset_size, o.max_epochs) {}
  // One step of `batch`; `undone` of it carried.
  void step(Coordinator& c, std::int64_t batch, const std::vector<BatchRange>& undone = {}) {
    const StepBatch b = stream.next(batch);
    ASSERT_EQ(b, c.next_batch(batch)) << "the coordinator's batch is the stream's";
    std::int64_t at = 0;
    for (const auto& u : undone) {
      const auto part = map.indices(b, at, u.begin);
      trained.insert(trained.end(), part.begin(), part.end());
      at = u.end;
    }
    const auto rest = map.indices(b, at, b.size());
    trained.insert(trained.end(), rest.begin(), rest.end());
    stream.advance(b, undone);
    (void)c.commit_step(batch, undone);
  }
};

void expect_clean(const Coordinator& c, std::int64_t epochs) {
  ASSERT_EQ(static_cast<std::int64_t>(c.coverage().size()), epochs);
  for (const auto& cov : c.coverage()) {
    EXPECT_EQ(cov.committed, c.ledger().map().dataset_size()) << "epoch " << cov.epoch;
    EXPECT_EQ(cov.missing, 0) << "epoch " << cov.epoch;
    EXPECT_EQ(cov.duplicated, 0) << "epoch " << cov.epoch;
  }
}

}  // namespace

TEST(Coordinator, EveryIndexOncePerEpochWithStepsThatLeavePartsUndone) {
  for (const bool within : {false, true}) {
    const auto o = opts(97, 6, true, 3, within);
    Coordinator c(o);
    Steps steps(o);
    for (int s = 0; !c.ledger().exhausted(); ++s) {
      const bool full = c.next_batch(10).size() == 10;
      steps.step(c, 10, full && s % 4 == 1 ? std::vector<BatchRange>{{0, 2}, {7, 10}} : std::vector<BatchRange>{});
    }
    expect_clean(c, 3);
    std::vector<std::int64_t> hits(97, 0);
    for (auto i : steps.trained) ++hits[static_cast<std::size_t>(i)];
    EXPECT_EQ(hits, std::vector<std::int64_t>(97, 3));
  }
}

TEST(Coordinator, ABadUndoneListIsRefusedAndChangesNothing) {
  Coordinator c(opts(40, 5, true, 1));
  (void)c.commit_step(8);
  const auto before = c.serialize();
  EXPECT_THROW((void)c.commit_step(8, std::vector<BatchRange>{{6, 9}}), antdt::UsageError);
  EXPECT_EQ(c.serialize(), before);
  const auto r = c.commit_step(8, std::vector<BatchRange>{{6, 8}});
  EXPECT_EQ(r.committed, 6);
  EXPECT_EQ(r.carried, 2);
}

namespace {

// The fields of a Coordinator blob, to rebuild it with changes.
struct CoordinatorBlob {
  std::vector<std::byte> ledger;
  std::vector<Coordinator::EpochCoverage> done;
  struct Pending {
    std::int64_t shard;
    std::vector<IndexRange> positions;  // in the shard's order
  };
  struct Open {
    std::int64_t epoch, committed, duplicated;
    std::vector<IndexRange> runs;  // the covered indices, however they were saved
    bool saved_as_runs = true;
    std::vector<Pending> pending;  // shards committed in part, as positions
  };
  std::vector<Open> open;

  static CoordinatorBlob parse(const std::vector<std::byte>& bytes) {
    antdt::detail::ByteReader in(bytes);
    (void)in.get<std::uint64_t>();
    EXPECT_EQ(in.get<std::uint32_t>(), 3U);
    CoordinatorBlob b;
    b.ledger = in.get_vector<std::byte>();
    b.done = in.get_vector<Coordinator::EpochCoverage>();
    const auto n = in.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) {
      Open o{in.get<std::int64_t>(), in.get<std::int64_t>(), in.get<std::int64_t>(), {}, true, {}};
      o.saved_as_runs = in.get<std::uint8_t>() == 1;
      if (o.saved_as_runs) {
        o.runs = in.get_vector<IndexRange>();
      } else {
        const auto bits = in.get_vector<std::uint64_t>();
        for (std::int64_t k = 0; k < static_cast<std::int64_t>(bits.size()) * 64; ++k) {
          if (((bits[static_cast<std::size_t>(k / 64)] >> (k % 64)) & 1U) == 0) continue;
          if (!o.runs.empty() && o.runs.back().end == k) {
            ++o.runs.back().end;
          } else {
            o.runs.push_back(IndexRange{k, k + 1});
          }
        }
      }
      const auto pending = in.get<std::uint64_t>();
      for (std::uint64_t k = 0; k < pending; ++k) {
        const auto shard = in.get<std::int64_t>();
        o.pending.push_back(Pending{shard, in.get_vector<IndexRange>()});
      }
      b.open.push_back(std::move(o));
    }
    EXPECT_TRUE(in.done());
    return b;
  }
  // Each open epoch as its runs (`as_runs`) or as its raw bitmap of N bits.
  [[nodiscard]] std::vector<std::byte> write(bool as_runs, std::int64_t n, std::uint32_t version = 3) const {
    antdt::detail::ByteWriter w;
    w.put<std::uint64_t>(0x5244524F4F435344ULL);
    w.put(version);
    w.put_vector(ledger);
    w.put_vector(done);
    w.put<std::uint64_t>(open.size());
    for (const auto& o : open) {
      w.put(o.epoch);
      w.put(o.committed);
      w.put(o.duplicated);
      w.put<std::uint8_t>(as_runs ? 1 : 0);
      if (as_runs) {
        w.put_vector(o.runs);
      } else {
        std::vector<std::uint64_t> bits(static_cast<std::size_t>((n + 63) / 64), 0);
        for (const auto& r : o.runs) {
          for (std::int64_t i = r.begin; i < r.end; ++i) bits[static_cast<std::size_t>(i / 64)] |= 1ULL << (i % 64);
        }
        w.put_vector(bits);
      }
      w.put<std::uint64_t>(o.pending.size());
      for (const auto& p : o.pending) {
        w.put(p.shard);
        w.put_vector(p.positions);
      }
    }
    return w.take();
  }
  // The indices an open epoch's coverage holds: its runs and its pending parts.
  [[nodiscard]] static std::set<std::int64_t> covered(const Open& o, const ShardMap& map) {
    std::set<std::int64_t> out;
    for (const auto& r : o.runs) {
      for (std::int64_t i = r.begin; i < r.end; ++i) out.insert(i);
    }
    for (const auto& p : o.pending) {
      for (const auto& part : p.positions) {
        std::vector<std::int64_t> indices;
        map.append_indices(Piece{o.epoch, p.shard, part.begin, part.end}, indices);
        out.insert(indices.begin(), indices.end());
      }
    }
    return out;
  }
};

}  // namespace

TEST(Coordinator, CoverageCatchesALedgerThatCommitsTwice) {
  // The bug the coverage counter exists for: restoring an old ledger after progress was
  // committed replays committed work. The counter, restored from the newer state, must
  // report the duplicates.
  const auto o = opts(10, 5, false, 1);
  Coordinator coordinator(o);
  const auto old_ledger = coordinator.ledger().serialize();
  (void)coordinator.commit_step(5);
  CoordinatorBlob blob = CoordinatorBlob::parse(coordinator.serialize());
  blob.ledger = old_ledger;
  auto replay = Coordinator::restore(blob.write(true, 10));
  while (!replay.ledger().exhausted()) (void)replay.commit_step(5);
  ASSERT_EQ(replay.coverage().size(), 1U);
  EXPECT_EQ(replay.coverage()[0].duplicated, 5);
  EXPECT_EQ(replay.coverage()[0].missing, 0);
}

TEST(Coordinator, ARestoredRunTrainsExactlyWhatTheUninterruptedOneDoes) {
  for (const bool within : {false, true}) {
    const auto o = opts(53, 4, true, 4, within);
    const auto undone_at = [](int s) {
      return s % 5 == 2 ? std::vector<BatchRange>{{1, 3}} : std::vector<BatchRange>{};
    };
    Coordinator straight(o);
    Steps all(o);
    for (int s = 0; !straight.ledger().exhausted(); ++s) all.step(straight, 9, undone_at(s));
    for (const int cut : {1, 7, 12}) {
      Coordinator c(o);
      Steps before(o);
      for (int s = 0; s < cut; ++s) before.step(c, 9, undone_at(s));
      Coordinator back = Coordinator::restore(c.serialize());
      Steps after(o);
      after.stream = back.ledger().stream();
      for (int s = cut; !back.ledger().exhausted(); ++s) after.step(back, 9, undone_at(s));
      before.trained.insert(before.trained.end(), after.trained.begin(), after.trained.end());
      EXPECT_EQ(before.trained, all.trained) << "cut at step " << cut << (within ? " (shuffled within shards)" : "");
      expect_clean(back, 4);
    }
  }
}

TEST(Coordinator, RestoreRejectsBadBytesAndOlderVersions) {
  Coordinator coordinator(opts(30, 5));
  (void)coordinator.commit_step(7);
  auto bytes = coordinator.serialize();
  EXPECT_THROW(Coordinator::restore(std::span(bytes).first(bytes.size() / 2)), antdt::CheckpointError);
  auto older = bytes;
  older[8] = std::byte{2};
  try {
    (void)Coordinator::restore(older);
    ADD_FAILURE() << "version 2 restored";
  } catch (const antdt::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("an older antdt wrote it"), std::string::npos) << e.what();
  }
  bytes[2] = std::byte{0x7f};
  EXPECT_THROW(Coordinator::restore(bytes), antdt::CheckpointError);
}

// The coverage of open epochs is saved as runs or as the raw bitmap, whichever is smaller; both
// restore to the same state, and the runs the counter saved are exactly the indices trained.
TEST(Coordinator, SavesRunsOfWhatWasTrainedAndReadsTheRawBitmapToo) {
  for (const bool within : {false, true}) {
    const auto o = opts(20011, 200, true, 2, within);
    Coordinator c(o);
    Steps steps(o);
    for (int s = 0; s < 12; ++s)
      steps.step(c, 300, s == 4 ? std::vector<BatchRange>{{10, 20}} : std::vector<BatchRange>{});
    ASSERT_EQ(c.ledger().completed_epochs(), 0);
    const auto saved = c.serialize();
    const CoordinatorBlob blob = CoordinatorBlob::parse(saved);
    ASSERT_EQ(blob.open.size(), 1U);
    EXPECT_TRUE(blob.open[0].saved_as_runs) << "whole shards of 200 make long runs";
    std::set<std::int64_t> trained(steps.trained.begin(), steps.trained.end());
    std::int64_t previous_end = -1;
    for (const auto& r : blob.open[0].runs) {
      EXPECT_GT(r.begin, previous_end) << "maximal runs, in order";
      previous_end = r.end;
    }
    EXPECT_EQ(CoordinatorBlob::covered(blob.open[0], steps.map), trained);
    // Shuffled within shards, the shard each step ends in waits as positions, not as indices.
    EXPECT_EQ(blob.open[0].pending.empty(), !within);
    Coordinator from_bits = Coordinator::restore(blob.write(false, o.dataset_size));
    Coordinator from_runs = Coordinator::restore(saved);
    EXPECT_EQ(from_bits.serialize(), saved) << "the raw bitmap restores to the same state";
    EXPECT_EQ(from_runs.serialize(), saved);
    for (Coordinator* back : {&from_bits, &from_runs}) {
      while (!back->ledger().exhausted()) (void)back->commit_step(300);
      expect_clean(*back, 2);
    }
  }
}

TEST(Coordinator, RestoreRejectsBadCoverageRuns) {
  const auto o = opts(200, 10, true);
  Coordinator c(o);
  for (int s = 0; s < 3; ++s) (void)c.commit_step(17);
  const CoordinatorBlob good = CoordinatorBlob::parse(c.serialize());
  ASSERT_EQ(good.open.size(), 1U);
  ASSERT_NO_THROW((void)Coordinator::restore(good.write(true, 200)));
  ASSERT_NO_THROW((void)Coordinator::restore(good.write(false, 200)));
  const std::int64_t committed = good.open[0].committed;
  auto with_runs = [&](std::vector<IndexRange> runs, std::int64_t count) {
    CoordinatorBlob b = good;
    b.open[0].runs = std::move(runs);
    b.open[0].committed = count;
    return b.write(true, 200);
  };
  const std::int64_t half = committed / 2;
  // Right count, bad runs; then good runs, wrong count.
  for (const auto& runs : std::vector<std::vector<IndexRange>>{{{0, half}, {half, committed}},  // touching: not maximal
                                                               {{half + 5, committed + 5}, {0, half}},  // out of order
                                                               {{0, half + 1}, {half, committed - 1}},  // overlapping
                                                               {{201 - committed, 201}},                // past N
                                                               {{-1, committed - 1}},                   // negative
                                                               {{3, 3}, {10, 10 + committed}}}) {       // empty run
    EXPECT_THROW((void)Coordinator::restore(with_runs(runs, committed)), antdt::CheckpointError);
  }
  EXPECT_THROW((void)Coordinator::restore(with_runs({{0, committed}}, committed + 1)), antdt::CheckpointError);
  EXPECT_NO_THROW((void)Coordinator::restore(with_runs({{0, committed}}, committed)));
  CoordinatorBlob twice = good;
  twice.open.push_back(twice.open[0]);
  EXPECT_THROW((void)Coordinator::restore(twice.write(true, 200)), antdt::CheckpointError);
  auto unknown = good.write(true, 200);
  unknown[12 + 8 + good.ledger.size() + 8 + good.done.size() * sizeof(Coordinator::EpochCoverage) + 8 + 24] =
      std::byte{7};  // the encoding byte
  EXPECT_THROW((void)Coordinator::restore(unknown), antdt::CheckpointError);
}

TEST(Coordinator, ShardsCommittedInPartsCountOnceWholeAndRestoreRejectsBadParts) {
  // Shuffled within shards of 10, steps of 7: every step ends inside a shard.
  const auto o = opts(100, 10, true, 2, true);
  Coordinator c(o);
  for (int s = 0; s < 4; ++s) (void)c.commit_step(7);
  const CoordinatorBlob good = CoordinatorBlob::parse(c.serialize());
  ASSERT_EQ(good.open.size(), 1U);
  ASSERT_EQ(good.open[0].pending.size(), 1U) << "positions 20..27 of the epoch: one shard in part";
  EXPECT_EQ(good.open[0].pending[0].positions, (std::vector<IndexRange>{{0, 8}}));
  EXPECT_EQ(CoordinatorBlob::covered(good.open[0], c.ledger().map()).size(), 28U);
  auto with_pending = [&](std::vector<CoordinatorBlob::Pending> pending, std::int64_t count) {
    CoordinatorBlob b = good;
    b.open[0].pending = std::move(pending);
    b.open[0].committed = count;
    return b.write(true, 100);
  };
  const std::int64_t shard = good.open[0].pending[0].shard;
  EXPECT_NO_THROW((void)Coordinator::restore(with_pending({{shard, {{0, 3}, {5, 8}}}}, 26)));
  for (const auto& [pending, count] : std::vector<std::pair<std::vector<CoordinatorBlob::Pending>, std::int64_t>>{
           {{{shard, {{0, 3}, {3, 8}}}}, 28},              // touching parts: not joined
           {{{shard, {{5, 8}, {0, 3}}}}, 26},              // out of order
           {{{shard, {{0, 11}}}}, 31},                     // past the shard
           {{{shard, {{0, 10}}}}, 30},                     // the whole shard: it is not pending
           {{{shard, {}}}, 20},                            // no parts
           {{{shard, {{0, 8}}}, {shard, {{9, 10}}}}, 29},  // the same shard twice
           {{{10, {{0, 1}}}}, 21},                         // not a shard
           {{{shard, {{0, 8}}}}, 29}}) {                   // the count does not add up
    EXPECT_THROW((void)Coordinator::restore(with_pending(pending, count)), antdt::CheckpointError);
  }
  // The rest of the run: each shard's indices once, whether marked whole or in parts.
  Coordinator back = Coordinator::restore(c.serialize());
  while (!back.ledger().exhausted()) (void)back.commit_step(7);
  expect_clean(back, 2);
  // A part committed twice is duplicated once per position, found while the shard is still pending.
  Coordinator twice(o);
  (void)twice.commit_step(7);
  CoordinatorBlob replay = CoordinatorBlob::parse(twice.serialize());
  replay.ledger = Coordinator(o).ledger().serialize();  // the ledger of before the step
  Coordinator bad = Coordinator::restore(replay.write(true, 100));
  while (!bad.ledger().exhausted()) (void)bad.commit_step(7);
  ASSERT_EQ(bad.coverage().size(), 2U);
  EXPECT_EQ(bad.coverage()[0].duplicated, 7);
  EXPECT_EQ(bad.coverage()[0].missing, 0);
}

// 10^6 shards, two open epochs (carried positions keep the first open), checkpointed and
// restored: the resumed run trains exactly what the uninterrupted one does. Speed is measured
// by antdt-bench-dds section [4], not here.
TEST(Coordinator, OneMillionShardCheckpointRoundTripsExactly) {
  const auto o = opts(2'000'003, 2, true, 3, true);
  constexpr std::int64_t kBatch = 48 * 150;  // an epoch in about 280 steps
  Coordinator c(o);
  ASSERT_EQ(c.ledger().map().num_shards(), 1'000'002);
  Steps straight(o);
  const auto undone_at = [](int k) {
    return k % 97 == 3 ? std::vector<BatchRange>{{5, 700}, {kBatch - 9, kBatch}} : std::vector<BatchRange>{};
  };
  int s = 0;
  while (c.ledger().stream().cursor() + kBatch <= o.dataset_size) straight.step(c, kBatch, undone_at(s++));
  // The step that crosses into epoch 1 leaves positions of epoch 0 undone: two epochs are open.
  straight.step(c, kBatch, std::vector<BatchRange>{{5, 700}, {kBatch - 9, kBatch}});
  ++s;
  ASSERT_EQ(c.ledger().counts().size(), 2U);
  const int cut = s;
  const auto bytes = c.serialize();
  const CoordinatorBlob blob = CoordinatorBlob::parse(bytes);
  ASSERT_EQ(blob.open.size(), 2U);
  EXPECT_LE(bytes.size(), blob.ledger.size() + 2 * (o.dataset_size / 8 + 8) + 1024);
  EXPECT_LE(blob.ledger.size(), 200U);

  Coordinator back = Coordinator::restore(bytes);
  EXPECT_EQ(back.coverage(), c.coverage());
  EXPECT_EQ(back.ledger().counts(), c.ledger().counts());
  const auto again = back.serialize();
  EXPECT_EQ(Coordinator::restore(again).serialize(), again);
  Steps resumed(o);
  resumed.stream = back.ledger().stream();
  const std::size_t trained_before = straight.trained.size();
  for (int k = cut; !c.ledger().exhausted(); ++k) straight.step(c, kBatch, undone_at(k));
  for (int k = cut; !back.ledger().exhausted(); ++k) resumed.step(back, kBatch, undone_at(k));
  EXPECT_TRUE(std::equal(resumed.trained.begin(), resumed.trained.end(),
                         straight.trained.begin() + static_cast<std::ptrdiff_t>(trained_before),
                         straight.trained.end()))
      << "the resumed run trains exactly the rest of the uninterrupted one";
  EXPECT_EQ(back.coverage(), c.coverage());
  expect_clean(back, 3);
}

TEST(Wire, RangesRoundTripAndShortOrBadBuffersThrow) {
  const std::vector<BatchRange> undone{{0, 3}, {7, 9}};
  antdt::detail::ByteWriter w;
  encode_ranges(undone, w);
  EXPECT_EQ(w.bytes().size(), 8 + undone.size() * kRangeWireBytes);
  antdt::detail::ByteReader r(w.bytes());
  EXPECT_EQ(decode_batch_ranges(r), undone);
  EXPECT_TRUE(r.done());
  const auto bytes = w.take();
  antdt::detail::ByteReader short_in{std::span<const std::byte>(bytes).first(bytes.size() - 1)};
  EXPECT_THROW((void)decode_batch_ranges(short_in), antdt::Error);
  antdt::detail::ByteWriter bad;
  encode_ranges(std::vector<StreamRange>{{9, 3}}, bad);
  antdt::detail::ByteReader bad_in(bad.bytes());
  EXPECT_THROW((void)decode_stream_ranges(bad_in), antdt::Error);
}
