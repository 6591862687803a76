// Unit tests of ShardMap, Ledger, Coordinator and Client (pure, no MPI).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "dds/dds.hpp"
#include "dds/wire.hpp"

using namespace antdt::dds;

namespace {

LedgerOptions opts(std::int64_t n, std::int64_t shard, bool shuffle = false, std::int64_t max_epochs = 0) {
  LedgerOptions o;
  o.dataset_size = n;
  o.shard_size = shard;
  o.seed = 42;
  o.shuffle_shards = shuffle;
  o.max_epochs = max_epochs;
  return o;
}

std::int64_t total(const std::vector<Grant>& runs) {
  std::int64_t t = 0;
  for (const auto& g : runs) t += g.size();
  return t;
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

TEST(ShardMap, DefaultShardSizeIsTenMicroBatchesClampedToN) {
  EXPECT_EQ(default_shard_size(100000, 32), 320);
  EXPECT_EQ(default_shard_size(100, 32), 100);
  EXPECT_EQ(default_shard_size(5, 0), 5);
  EXPECT_EQ(default_shard_size(1, 1), 1);
  EXPECT_THROW((void)default_shard_size(0, 32), antdt::UsageError);
  EXPECT_EQ(ShardMap(opts(1000, 0)).shard_size(), 320);
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
      map.append_indices(Grant{epoch, s, 0, map.shard_length(s), 0}, run);
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

TEST(Ledger, AcquireConsumeCommitAcrossPieces) {
  Ledger ledger(opts(10, 4), 2);
  auto a = ledger.acquire(0);
  auto b = ledger.acquire(0);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, (Grant{0, 0, 0, 4, 0}));
  EXPECT_EQ(*b, (Grant{0, 1, 0, 4, 0}));
  EXPECT_EQ(ledger.held(0), 8);
  const auto runs = ledger.consume(0, 6);
  ASSERT_EQ(runs.size(), 2U);
  EXPECT_EQ(runs[0], (Grant{0, 0, 0, 4, 0}));
  EXPECT_EQ(runs[1], (Grant{0, 1, 0, 2, 0}));
  EXPECT_EQ(ledger.held(0), 2);
  EXPECT_EQ(ledger.counts(), (std::vector<Ledger::EpochCounts>{{0, 2, 8, 0}}));
  EXPECT_EQ(ledger.commit(0), 6);
  EXPECT_EQ(ledger.counts(), (std::vector<Ledger::EpochCounts>{{0, 2, 2, 6}}));
  EXPECT_EQ(ledger.commit(0), 0);
  EXPECT_EQ(total(ledger.consume(0, 100)), 2) << "consume returns fewer when the rank holds fewer";
  ledger.check_identity();
}

TEST(Ledger, NextEpochOpensWhenTodoRunsOutAndCompletesIndependently) {
  Ledger ledger(opts(4, 2), 2);
  ASSERT_TRUE(ledger.acquire(0));  // epoch 0 shard 0
  ASSERT_TRUE(ledger.acquire(1));  // epoch 0 shard 1
  const auto next = ledger.acquire(0);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->epoch, 1) << "no TODO left in epoch 0: a new epoch opens so no rank starves";
  EXPECT_EQ(ledger.current_epoch(), 0);
  (void)ledger.consume(0, 4);  // epoch 0 shard 0 and epoch 1's first piece
  ledger.commit(0);
  EXPECT_EQ(ledger.completed_epochs(), 0);
  (void)ledger.consume(1, 2);
  ledger.commit(1);
  EXPECT_EQ(ledger.completed_epochs(), 1);
  EXPECT_EQ(ledger.completed_list(), std::vector<std::int64_t>{0});
  EXPECT_EQ(ledger.current_epoch(), 1);
  ledger.check_identity();
}

TEST(Ledger, FailRankReturnsOnlyUncommittedTailsToTheFront) {
  Ledger ledger(opts(12, 4), 2);
  (void)ledger.acquire(0);  // shard 0
  (void)ledger.acquire(0);  // shard 1
  (void)ledger.consume(0, 3);
  ledger.commit(0);
  (void)ledger.consume(0, 2);  // consumed, not committed: must come back too
  EXPECT_EQ(ledger.fail_rank(0), 5);
  EXPECT_EQ(ledger.held(0), 0);
  EXPECT_EQ(ledger.counts(), (std::vector<Ledger::EpochCounts>{{0, 9, 0, 3}}));
  // The tails come first, in order, before the untouched shard 2.
  EXPECT_EQ(*ledger.acquire(1), (Grant{0, 0, 3, 4, 1}));
  EXPECT_EQ(*ledger.acquire(1), (Grant{0, 1, 0, 4, 1}));
  EXPECT_EQ(*ledger.acquire(1), (Grant{0, 2, 0, 4, 1}));
  ledger.check_identity();
}

TEST(Ledger, DropReturnsTheStepsConsumptionAndKeepsTheRemainder) {
  Ledger ledger(opts(8, 8), 2);
  (void)ledger.acquire(1);
  (void)ledger.consume(1, 2);
  ledger.commit(1);
  (void)ledger.consume(1, 3);
  EXPECT_EQ(ledger.drop(1), 3);
  EXPECT_EQ(ledger.held(1), 3) << "the unconsumed remainder stays with the backup";
  EXPECT_EQ(ledger.counts(), (std::vector<Ledger::EpochCounts>{{0, 3, 3, 2}}));
  EXPECT_EQ(ledger.consume(1, 1)[0], (Grant{0, 0, 5, 6, 1}));
  EXPECT_EQ(*ledger.acquire(0), (Grant{0, 0, 2, 5, 0}));
  ledger.check_identity();
}

TEST(Ledger, MaxEpochsStopsAndExhausts) {
  Ledger ledger(opts(3, 2, true, 1), 1);
  std::int64_t got = 0;
  while (auto g = ledger.acquire(0)) got += g->size();
  EXPECT_EQ(got, 3);
  EXPECT_FALSE(ledger.exhausted());
  (void)ledger.consume(0, 3);
  ledger.commit(0);
  EXPECT_TRUE(ledger.exhausted());
  EXPECT_FALSE(ledger.acquire(0).has_value());
}

TEST(Ledger, RejectsBadRanks) {
  Ledger ledger(opts(3, 1), 2);
  EXPECT_THROW((void)ledger.acquire(2), antdt::UsageError);
  EXPECT_THROW((void)ledger.held(-1), antdt::UsageError);
  EXPECT_THROW((void)ledger.consume(0, -1), antdt::UsageError);
  EXPECT_THROW(Ledger(opts(3, 1), 0), antdt::UsageError);
}

TEST(Ledger, SerializeRestoreTurnsDoingTailsIntoReservedTodo) {
  Ledger ledger(opts(20, 5, true), 2);
  (void)ledger.acquire(0);
  (void)ledger.acquire(1);
  (void)ledger.acquire(0);
  (void)ledger.consume(0, 7);
  ledger.commit(0);
  (void)ledger.consume(1, 1);  // uncommitted: comes back
  const auto bytes = ledger.serialize();

  Ledger same = Ledger::restore(bytes, 2);
  same.check_identity();
  EXPECT_EQ(same.counts(), (std::vector<Ledger::EpochCounts>{{0, 13, 0, 7}}));
  EXPECT_EQ(same.reserved(0), 3);
  EXPECT_EQ(same.reserved(1), 5);
  // Rank 1 asks first, but gets its own tail, not rank 0's.
  const auto g = same.acquire(1);
  EXPECT_EQ(g->rank, 1);
  EXPECT_EQ(g->size(), 5);
  EXPECT_EQ(g->begin, 0);

  Ledger other = Ledger::restore(bytes, 3);
  other.check_identity();
  EXPECT_EQ(other.reserved(0) + other.reserved(1) + other.reserved(2), 0) << "another world size: tails are free";
  const auto first = other.acquire(2);
  EXPECT_EQ(first->begin, 2) << "tails are at the front of TODO";
}

TEST(Ledger, RestoreRejectsBadBytes) {
  Ledger ledger(opts(20, 5), 2);
  (void)ledger.acquire(0);
  auto bytes = ledger.serialize();
  EXPECT_THROW(Ledger::restore(std::span(bytes).first(bytes.size() - 3), 2), antdt::CheckpointError);
  auto bad = bytes;
  bad[0] = std::byte{0};
  EXPECT_THROW(Ledger::restore(bad, 2), antdt::CheckpointError);
  bad = bytes;
  bad.push_back(std::byte{1});
  EXPECT_THROW(Ledger::restore(bad, 2), antdt::CheckpointError);
  EXPECT_THROW(Ledger::restore({}, 2), antdt::CheckpointError);
  // A count that breaks the identity: the "todo" field of the open epoch.
  bad = bytes;
  const std::size_t header = 8 + 4 + 8 + 8 + 8 + 1 + 1 + 8 + 4 + 8 + 8 + 8;  // ... through open epoch count
  bad[header + 16] = std::byte{99};
  EXPECT_THROW(Ledger::restore(bad, 2), antdt::CheckpointError);
}

TEST(Coordinator, GrantTopsUpToPrefetchTimesDemandLowestRankFirst) {
  Coordinator coordinator(opts(100, 4), 3, 2);
  const auto grants = coordinator.grant({5, 0, 3});
  EXPECT_GE(coordinator.ledger().held(0), 10);
  EXPECT_EQ(coordinator.ledger().held(1), 0);
  EXPECT_GE(coordinator.ledger().held(2), 6);
  ASSERT_GE(grants.size(), 2U);
  EXPECT_EQ(grants[0].rank, 0);
  EXPECT_EQ(grants[1].rank, 2) << "one piece at a time, round robin from rank 0";
  EXPECT_TRUE(coordinator.grant({5, 0, 3}).empty()) << "nothing more while everyone holds enough";
  EXPECT_THROW(coordinator.grant({1, 1}), antdt::UsageError);
  EXPECT_THROW(coordinator.grant({1, -1, 1}), antdt::UsageError);
}

TEST(Coordinator, CommitStepRejectsOverReportWithoutChangingState) {
  Coordinator coordinator(opts(50, 5), 2);
  (void)coordinator.grant({3, 3});
  const auto before = coordinator.serialize();
  EXPECT_THROW(coordinator.commit_step({1, 1000}), antdt::Error);
  EXPECT_EQ(coordinator.serialize(), before);
  EXPECT_THROW(coordinator.commit_step({1}), antdt::UsageError);
}

TEST(Coordinator, ClientTakesExactlyWhatIsCommittedAndCoverageIsClean) {
  for (bool within : {false, true}) {
    auto o = opts(37, 4, true, 3);
    o.shuffle_within_shard = within;
    const int world = 3;
    Coordinator coordinator(o, world);
    std::vector<Client> clients(world, Client(o));
    std::vector<std::int64_t> counts(37, 0);
    const std::vector<std::int64_t> demand{5, 2, 7};
    for (int step = 0; step < 200 && !coordinator.ledger().exhausted(); ++step) {
      const auto grants = coordinator.grant(demand);
      for (int r = 0; r < world; ++r) clients[static_cast<std::size_t>(r)].add(grants, r);
      std::vector<std::int64_t> consumed(world);
      for (int r = 0; r < world; ++r) {
        const auto idx = clients[static_cast<std::size_t>(r)].take(demand[static_cast<std::size_t>(r)]);
        consumed[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(idx.size());
        for (auto i : idx) ++counts[static_cast<std::size_t>(i)];
        EXPECT_EQ(clients[static_cast<std::size_t>(r)].held(),
                  coordinator.ledger().held(r) - consumed[static_cast<std::size_t>(r)]);
      }
      coordinator.commit_step(consumed);
    }
    ASSERT_TRUE(coordinator.ledger().exhausted());
    for (auto c : counts) EXPECT_EQ(c, 3) << "every index exactly once in each of 3 epochs";
    ASSERT_EQ(coordinator.coverage().size(), 3U);
    for (const auto& c : coordinator.coverage()) {
      EXPECT_EQ(c.committed, 37);
      EXPECT_EQ(c.missing, 0);
      EXPECT_EQ(c.duplicated, 0);
    }
  }
}

// peek(k) is what take(k) returns next, across grant boundaries and shuffled shards, and it
// consumes nothing; a shorter take leaves the rest of the peek as the next one's prefix.
TEST(Coordinator, ClientPeekIsTheNextTakeAndConsumesNothing) {
  for (bool within : {false, true}) {
    auto o = opts(41, 4, true, 2);
    o.shuffle_within_shard = within;
    Coordinator coordinator(o, 1);
    Client client(o);
    for (int step = 0; step < 100 && !coordinator.ledger().exhausted(); ++step) {
      client.add(coordinator.grant({7}), 0);
      const std::int64_t held = client.held();
      const auto ahead = client.peek(9);  // more than one step: crosses shards
      EXPECT_EQ(client.held(), held);
      EXPECT_EQ(static_cast<std::int64_t>(ahead.size()), std::min<std::int64_t>(9, held));
      EXPECT_EQ(client.peek(0), std::vector<std::int64_t>{});
      const auto taken = client.take(step % 2 == 0 ? 7 : 3);
      ASSERT_LE(taken.size(), ahead.size());
      EXPECT_TRUE(std::equal(taken.begin(), taken.end(), ahead.begin())) << "step " << step;
      const auto next = client.peek(static_cast<std::int64_t>(ahead.size() - taken.size()));
      EXPECT_TRUE(std::equal(next.begin(), next.end(), ahead.begin() + static_cast<std::ptrdiff_t>(taken.size())));
      coordinator.commit_step({static_cast<std::int64_t>(taken.size())});
    }
    EXPECT_THROW((void)client.peek(-1), antdt::UsageError);
  }
}

TEST(Coordinator, DroppedRanksConsumptionGoesBackAndIsServedAgain) {
  const auto o = opts(24, 6, false, 1);
  Coordinator coordinator(o, 2, 1);
  std::vector<Client> clients(2, Client(o));
  auto grants = coordinator.grant({6, 6});
  clients[0].add(grants, 0);
  clients[1].add(grants, 1);
  const auto backup = clients[1].take(4);
  (void)clients[0].take(6);
  const auto result = coordinator.commit_step({6, 4}, {1});
  EXPECT_EQ(result.committed, 6);
  EXPECT_EQ(result.returned, 4);
  // Rank 1 keeps its remainder; the dropped four are served to whoever asks next.
  EXPECT_EQ(coordinator.ledger().held(1), 2);
  grants = coordinator.grant({6, 6});
  clients[0].add(grants, 0);
  clients[1].add(grants, 1);
  const auto again = clients[0].take(4);
  EXPECT_EQ(again, backup);
}

TEST(Coordinator, CoverageCatchesALedgerThatCommitsTwice) {
  // Simulate the bug the coverage counter exists for: restoring an old checkpoint after
  // progress was committed replays committed work. The counter, restored from the newer
  // state, must report the duplicates.
  const auto o = opts(10, 5, false, 1);
  Coordinator coordinator(o, 1, 1);
  (void)coordinator.grant({5});
  const auto old_ledger = coordinator.ledger().serialize();
  coordinator.commit_step({5});
  // Rebuild the coordinator blob (magic, version, ledger, coverage...) with the old ledger.
  const auto bytes_new = coordinator.serialize();
  antdt::detail::ByteReader in(bytes_new);
  antdt::detail::ByteWriter out;
  out.put(in.get<std::uint64_t>());
  out.put(in.get<std::uint32_t>());
  (void)in.get_vector<std::byte>();
  out.put_vector(old_ledger);
  while (!in.done()) out.put(in.get<std::byte>());
  const auto bytes = out.take();
  auto replay = Coordinator::restore(bytes, 1, 1);
  Client client(o);
  for (int step = 0; step < 4 && !replay.ledger().exhausted(); ++step) {
    client.add(replay.grant({5}), 0);
    replay.commit_step({static_cast<std::int64_t>(client.take(5).size())});
  }
  ASSERT_EQ(replay.coverage().size(), 1U);
  EXPECT_EQ(replay.coverage()[0].duplicated, 5);
  EXPECT_EQ(replay.coverage()[0].missing, 0);
}

TEST(Coordinator, RestoreOnSameWorldSizeReplaysTheUninterruptedRunExactly) {
  for (bool within : {false, true}) {
    auto o = opts(53, 4, true, 4);
    o.shuffle_within_shard = within;
    const int world = 3;
    auto demand_at = [](int step) { return std::vector<std::int64_t>{3 + step % 3, step % 5 == 0 ? 0 : 2, 6}; };
    // Returns per-rank index sequences of steps [from, to).
    using Trace = std::vector<std::vector<std::int64_t>>;
    auto run = [&](Coordinator& c, std::vector<Client>& clients, int from, int to, Trace& trace) {
      for (int step = from; step < to; ++step) {
        const auto demand = demand_at(step);
        std::vector<std::int64_t> consumed(world);
        for (int r = 0; r < world; ++r) {
          auto idx = clients[static_cast<std::size_t>(r)].take(demand[static_cast<std::size_t>(r)]);
          consumed[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(idx.size());
          trace[static_cast<std::size_t>(r)].insert(trace[static_cast<std::size_t>(r)].end(), idx.begin(), idx.end());
        }
        c.commit_step(consumed);
        const auto grants = c.grant(demand_at(step + 1));
        for (int r = 0; r < world; ++r) clients[static_cast<std::size_t>(r)].add(grants, r);
      }
    };
    auto start = [&](Coordinator& c, std::vector<Client>& clients) {
      const auto grants = c.grant(demand_at(0));
      for (int r = 0; r < world; ++r) clients[static_cast<std::size_t>(r)].add(grants, r);
    };
    Trace straight(world), resumed(world);
    {
      Coordinator c(o, world);
      std::vector<Client> clients(world, Client(o));
      start(c, clients);
      run(c, clients, 0, 60, straight);
    }
    for (int cut : {1, 7, 23}) {
      resumed.assign(world, {});
      Coordinator c(o, world);
      std::vector<Client> clients(world, Client(o));
      start(c, clients);
      run(c, clients, 0, cut, resumed);
      const auto bytes = c.serialize();
      Coordinator back = Coordinator::restore(bytes, world);
      std::vector<Client> fresh(world, Client(o));
      const auto grants = back.grant(demand_at(cut));  // the demand in force when the checkpoint was taken
      for (int r = 0; r < world; ++r) fresh[static_cast<std::size_t>(r)].add(grants, r);
      run(back, fresh, cut, 60, resumed);
      EXPECT_EQ(resumed, straight) << "cut at step " << cut << (within ? " (shuffled within shards)" : "");
      for (const auto& cov : back.coverage()) {
        EXPECT_EQ(cov.missing, 0);
        EXPECT_EQ(cov.duplicated, 0);
      }
    }
  }
}

TEST(Coordinator, RestoreRejectsBadBytes) {
  Coordinator coordinator(opts(30, 5), 2);
  (void)coordinator.grant({3, 3});
  auto bytes = coordinator.serialize();
  EXPECT_THROW(Coordinator::restore(std::span(bytes).first(bytes.size() / 2), 2), antdt::CheckpointError);
  bytes[2] = std::byte{0x7f};
  EXPECT_THROW(Coordinator::restore(bytes, 2), antdt::CheckpointError);
}

TEST(Wire, GrantsRoundTripAndShortBuffersThrow) {
  const std::vector<Grant> grants{{0, 3, 0, 10, 0}, {7, 1, 2, 5, 3}, {1LL << 40, 9, 0, 1, 2}};
  antdt::detail::ByteWriter w;
  encode_grants(grants, w);
  EXPECT_EQ(w.bytes().size(), 8 + grants.size() * kGrantWireBytes);
  antdt::detail::ByteReader r(w.bytes());
  EXPECT_EQ(decode_grants(r), grants);
  EXPECT_TRUE(r.done());
  const auto bytes = w.take();
  antdt::detail::ByteReader short_reader{std::span<const std::byte>(bytes).first(bytes.size() - 1)};
  EXPECT_THROW(decode_grants(short_reader), antdt::Error);
}

TEST(Client, KeepsOnlyItsOwnGrantsAndTakesAcrossThem) {
  const auto o = opts(20, 5);
  Client client(o);
  client.add({{0, 0, 0, 5, 1}, {0, 1, 0, 5, 0}, {0, 2, 3, 5, 1}}, 1);
  EXPECT_EQ(client.held(), 7);
  EXPECT_EQ(client.take(6), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 13}));
  EXPECT_EQ(client.take(5), (std::vector<std::int64_t>{14}));
  EXPECT_EQ(client.held(), 0);
  client.add({{0, 3, 0, 5, 1}}, 1);
  client.clear();
  EXPECT_EQ(client.held(), 0);
  EXPECT_TRUE(client.take(3).empty());
}

TEST(Ledger, CappedAcquireSplitsAPieceAndKeepsTheRemainderFirst) {
  LedgerOptions o;
  o.dataset_size = 100;
  o.shard_size = 40;
  o.shuffle_shards = false;
  Ledger ledger(o, 2);
  const auto a = ledger.acquire(0, 15);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->shard, 0);
  EXPECT_EQ(a->begin, 0);
  EXPECT_EQ(a->end, 15);
  const auto b = ledger.acquire(1, 100);  // the rest of shard 0 comes next, whole
  ASSERT_TRUE(b);
  EXPECT_EQ(b->shard, 0);
  EXPECT_EQ(b->begin, 15);
  EXPECT_EQ(b->end, 40);
  const auto c = ledger.acquire(1);  // uncapped: a whole shard
  ASSERT_TRUE(c);
  EXPECT_EQ(c->shard, 1);
  EXPECT_EQ(c->size(), 40);
  ledger.check_identity();
  const auto counts = ledger.counts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0].todo, 100 - 15 - 25 - 40);
  EXPECT_EQ(counts[0].doing_remaining, 80);
}

TEST(Coordinator, GrantsAreCutToEachRanksTarget) {
  LedgerOptions o;
  o.dataset_size = 10000;
  o.shard_size = 500;
  Coordinator coordinator(o, 2, 2);
  for (const auto& g : coordinator.grant({40, 5})) {
    EXPECT_LE(g.size(), g.rank == 0 ? 80 : 10) << "a grant never exceeds prefetch x demand";
  }
  EXPECT_EQ(coordinator.ledger().held(0), 80);
  EXPECT_EQ(coordinator.ledger().held(1), 10);
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
          const Grant run{epoch, s, begin, end, 0};
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
    EXPECT_THROW(map.append_index_ranges(Grant{0, 0, 3, 11, 0}, out), antdt::UsageError);
  }
}

namespace {

// The fields of a Coordinator blob (version 2), to rebuild it with changes.
struct CoordinatorBlob {
  std::vector<std::byte> ledger;
  std::vector<Coordinator::EpochCoverage> done;
  struct Open {
    std::int64_t epoch, committed, duplicated;
    std::vector<IndexRange> runs;  // the covered indices, however they were saved
    bool saved_as_runs = true;
  };
  std::vector<Open> open;

  static CoordinatorBlob parse(const std::vector<std::byte>& bytes) {
    antdt::detail::ByteReader in(bytes);
    (void)in.get<std::uint64_t>();
    EXPECT_EQ(in.get<std::uint32_t>(), 2U);
    CoordinatorBlob b;
    b.ledger = in.get_vector<std::byte>();
    b.done = in.get_vector<Coordinator::EpochCoverage>();
    const auto n = in.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) {
      Open o{in.get<std::int64_t>(), in.get<std::int64_t>(), in.get<std::int64_t>(), {}};
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
      b.open.push_back(std::move(o));
    }
    EXPECT_TRUE(in.done());
    return b;
  }
  // Version 2 writes the runs; version 1 writes each open epoch's raw bitmap of N bits.
  [[nodiscard]] std::vector<std::byte> write(std::uint32_t version, std::int64_t n) const {
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
      if (version == 2) {
        w.put<std::uint8_t>(1);
        w.put_vector(o.runs);
        continue;
      }
      std::vector<std::uint64_t> bits(static_cast<std::size_t>((n + 63) / 64), 0);
      for (const auto& r : o.runs) {
        for (std::int64_t i = r.begin; i < r.end; ++i) bits[static_cast<std::size_t>(i / 64)] |= 1ULL << (i % 64);
      }
      w.put_vector(bits);
    }
    return w.take();
  }
};

// Steps of a coordinator with clients that take what they are granted; every index taken is
// counted in `taken` (per epoch of data, indices only), and the per-rank sequences in `trace`.
struct Job {
  LedgerOptions options;
  int world;
  std::vector<Client> clients;
  std::vector<std::vector<std::int64_t>> trace;

  Job(const LedgerOptions& o, int w) : options(o), world(w), clients(static_cast<std::size_t>(w), Client(o)) {
    trace.resize(static_cast<std::size_t>(w));
  }
  std::int64_t base_demand = 5;

  [[nodiscard]] std::vector<std::int64_t> demand(int step) const {
    std::vector<std::int64_t> d(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) d[static_cast<std::size_t>(r)] = base_demand * (1 + (r * 7 + step) % 5) + r % 3;
    return d;
  }
  void receive(const std::vector<Grant>& grants) {
    std::vector<std::vector<Grant>> mine(static_cast<std::size_t>(world));
    for (const auto& g : grants) mine[static_cast<std::size_t>(g.rank)].push_back(g);
    for (int r = 0; r < world; ++r) clients[static_cast<std::size_t>(r)].add(mine[static_cast<std::size_t>(r)], r);
  }
  // One step: take, commit (dropping `dropped`), grant for the next.
  void step(Coordinator& c, int s, const std::vector<int>& dropped = {}) {
    const auto d = demand(s);
    std::vector<std::int64_t> consumed(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      auto idx = clients[static_cast<std::size_t>(r)].take(d[static_cast<std::size_t>(r)]);
      consumed[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(idx.size());
      auto& t = trace[static_cast<std::size_t>(r)];
      t.insert(t.end(), idx.begin(), idx.end());
    }
    c.commit_step(consumed, dropped);
    receive(c.grant(demand(s + 1)));
  }
};

}  // namespace

// The coverage of open epochs is saved as runs (version 2); a version-1 checkpoint, with raw
// bitmaps, restores to the same state, and the runs the counter saved are exactly the indices
// the clients trained on.
TEST(Coordinator, RestoresVersionOneBitmapsAndSavesRunsOfWhatWasTrained) {
  for (bool within : {false, true}) {
    auto o = opts(20011, 200, true, 2);
    o.shuffle_within_shard = within;
    Job job(o, 3);
    job.base_demand = 100;
    Coordinator c(o, 3);
    job.receive(c.grant(job.demand(0)));
    for (int s = 0; s < 12; ++s) job.step(c, s);
    ASSERT_EQ(c.ledger().completed_epochs(), 0);
    const auto v2 = c.serialize();
    const CoordinatorBlob blob = CoordinatorBlob::parse(v2);
    ASSERT_EQ(blob.open.size(), 1U);
    // Grants of whole shards of 200 make runs of 100 bits or more: as runs, smaller than the bitmap.
    if (!within) {
      EXPECT_TRUE(blob.open[0].saved_as_runs);
    }
    std::set<std::int64_t> trained;
    for (const auto& t : job.trace) trained.insert(t.begin(), t.end());
    std::set<std::int64_t> covered;
    std::int64_t previous_end = -1;
    for (const auto& r : blob.open[0].runs) {
      EXPECT_GT(r.begin, previous_end) << "maximal runs, in order";
      previous_end = r.end;
      for (std::int64_t i = r.begin; i < r.end; ++i) covered.insert(i);
    }
    EXPECT_EQ(covered, trained);

    const auto v1 = blob.write(1, o.dataset_size);
    Coordinator from_v1 = Coordinator::restore(v1, 3);
    Coordinator from_v2 = Coordinator::restore(v2, 3);
    const auto saved = from_v2.serialize();
    EXPECT_EQ(from_v1.serialize(), saved) << "a version-1 checkpoint restores to the same state";
    EXPECT_EQ(Coordinator::restore(saved, 3).serialize(), saved);
    for (Coordinator* back : {&from_v1, &from_v2}) {
      Job rest(o, 3);
      rest.base_demand = 100;
      rest.receive(back->grant(rest.demand(12)));
      for (int s = 12; !back->ledger().exhausted() && s < 400; ++s) rest.step(*back, s);
      ASSERT_TRUE(back->ledger().exhausted());
      ASSERT_EQ(back->coverage().size(), 2U);
      for (const auto& cov : back->coverage()) {
        EXPECT_EQ(cov.committed, o.dataset_size);
        EXPECT_EQ(cov.missing, 0);
        EXPECT_EQ(cov.duplicated, 0);
      }
    }
  }
}

TEST(Coordinator, RestoreRejectsBadCoverageRuns) {
  const auto o = opts(200, 10, true);
  Job job(o, 2);
  Coordinator c(o, 2);
  job.receive(c.grant(job.demand(0)));
  for (int s = 0; s < 3; ++s) job.step(c, s);
  const CoordinatorBlob good = CoordinatorBlob::parse(c.serialize());
  ASSERT_EQ(good.open.size(), 1U);
  ASSERT_NO_THROW((void)Coordinator::restore(good.write(2, 200), 2));
  ASSERT_NO_THROW((void)Coordinator::restore(good.write(1, 200), 2));
  const std::int64_t committed = good.open[0].committed;
  auto with_runs = [&](std::vector<IndexRange> runs, std::int64_t count) {
    CoordinatorBlob b = good;
    b.open[0].runs = std::move(runs);
    b.open[0].committed = count;
    return b.write(2, 200);
  };
  const std::int64_t half = committed / 2;
  // Right count, bad runs; then good runs, wrong count.
  for (const auto& runs : std::vector<std::vector<IndexRange>>{{{0, half}, {half, committed}},  // touching: not maximal
                                                               {{half + 5, committed + 5}, {0, half}},  // out of order
                                                               {{0, half + 1}, {half, committed - 1}},  // overlapping
                                                               {{201 - committed, 201}},                // past N
                                                               {{-1, committed - 1}},                   // negative
                                                               {{3, 3}, {10, 10 + committed}}}) {       // empty run
    EXPECT_THROW((void)Coordinator::restore(with_runs(runs, committed), 2), antdt::CheckpointError);
  }
  EXPECT_THROW((void)Coordinator::restore(with_runs({{0, committed}}, committed + 1), 2), antdt::CheckpointError);
  EXPECT_NO_THROW((void)Coordinator::restore(with_runs({{0, committed}}, committed), 2));
  CoordinatorBlob twice = good;
  twice.open.push_back(twice.open[0]);
  EXPECT_THROW((void)Coordinator::restore(twice.write(2, 200), 2), antdt::CheckpointError);
  auto v3 = good.write(2, 200);
  v3[8] = std::byte{3};
  EXPECT_THROW((void)Coordinator::restore(v3, 2), antdt::CheckpointError);
}

// 10^6 shards, two open epochs, failures and a dropped rank, checkpointed and restored on the
// same world size (the resumed run takes exactly the indices the uninterrupted one does) and
// on another (every sample of every epoch still once). Speed is measured by
// antdt-bench-dds section [4], not here.
TEST(Coordinator, OneMillionShardCheckpointRoundTripsExactly) {
  auto o = opts(2'000'003, 2, true, 3);
  const int world = 48;
  constexpr std::int64_t kDemand = 150;  // an epoch in about 50 steps
  Job straight(o, world);
  straight.base_demand = kDemand;
  Coordinator c(o, world);
  straight.receive(c.grant(straight.demand(0)));
  ASSERT_EQ(c.ledger().map().num_shards(), 1'000'002);
  int s = 0;
  while (c.ledger().counts().size() < 2) straight.step(c, s++);
  for (int k = 0; k < 3; ++k) straight.step(c, s++, k == 1 ? std::vector<int>{7} : std::vector<int>{});
  (void)c.fail_rank(5);
  straight.clients[5].clear();
  straight.receive(c.grant(straight.demand(s)));
  const int cut = s;
  const auto bytes = c.serialize();
  // Each open epoch's coverage is saved as runs or as the raw bitmap, whichever is smaller.
  const CoordinatorBlob blob = CoordinatorBlob::parse(bytes);
  ASSERT_EQ(blob.open.size(), 2U);
  EXPECT_LE(bytes.size(), blob.ledger.size() + 2 * (o.dataset_size / 8 + 8) + 1024);

  Coordinator back = Coordinator::restore(bytes, world);
  EXPECT_EQ(back.coverage(), c.coverage());
  const auto again = back.serialize();
  EXPECT_EQ(Coordinator::restore(again, world).serialize(), again);
  const auto before = c.ledger().counts(), after = back.ledger().counts();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].epoch, before[i].epoch);
    EXPECT_EQ(after[i].done, before[i].done);
    EXPECT_EQ(after[i].doing_remaining, 0);
    EXPECT_EQ(after[i].todo, before[i].todo + before[i].doing_remaining);
  }
  for (int r = 0; r < world; ++r) EXPECT_EQ(back.ledger().reserved(r), c.ledger().held(r)) << "rank " << r;

  Job resumed(o, world);
  resumed.base_demand = kDemand;
  resumed.receive(back.grant(resumed.demand(cut)));
  for (int k = cut; !c.ledger().exhausted(); ++k) straight.step(c, k);
  for (int k = cut; !back.ledger().exhausted(); ++k) resumed.step(back, k);
  for (int r = 0; r < world; ++r) {
    const auto& full = straight.trace[static_cast<std::size_t>(r)];
    const auto& tail = resumed.trace[static_cast<std::size_t>(r)];
    ASSERT_LE(tail.size(), full.size());
    EXPECT_TRUE(std::equal(tail.rbegin(), tail.rend(), full.rbegin())) << "rank " << r << " after the restore";
  }
  EXPECT_EQ(back.coverage(), c.coverage());
  ASSERT_EQ(back.coverage().size(), 3U);
  for (const auto& cov : back.coverage()) {
    EXPECT_EQ(cov.committed, o.dataset_size);
    EXPECT_EQ(cov.missing, 0);
    EXPECT_EQ(cov.duplicated, 0);
  }

  Coordinator elastic = Coordinator::restore(bytes, 31);
  Job other(o, 31);
  other.base_demand = kDemand;
  other.receive(elastic.grant(other.demand(cut)));
  for (int k = cut; !elastic.ledger().exhausted(); ++k) other.step(elastic, k);
  ASSERT_EQ(elastic.coverage().size(), 3U);
  for (const auto& cov : elastic.coverage()) {
    EXPECT_EQ(cov.committed, o.dataset_size);
    EXPECT_EQ(cov.missing, 0);
    EXPECT_EQ(cov.duplicated, 0);
  }
}
