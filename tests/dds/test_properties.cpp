// Property tests: thousands of random schedules (fixed seeds) of acquire, consume, commit,
// fail_rank, drop, changing batch sizes and serialize/restore into other world sizes, over
// several epochs, on data sets whose size is not a multiple of the shard size or the world
// size, smaller than world x batch, and with shard size 1. After every operation the
// identity holds; every completed epoch has every index committed exactly once, counted
// here through ShardMap from the committed runs, independently of the ledger's counters.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "antdt/error.hpp"
#include "dds/dds.hpp"

using namespace antdt::dds;

namespace {

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(std::uint64_t seed) : engine(seed) {}
  // Modulo draws: fine for a test, and (unlike uniform_int_distribution) portable.
  std::int64_t below(std::int64_t n) {
    return n <= 0 ? 0 : static_cast<std::int64_t>(engine() % static_cast<std::uint64_t>(n));
  }
  bool chance(int percent) { return below(100) < percent; }
};

LedgerOptions random_options(Rng& rng) {
  LedgerOptions o;
  o.dataset_size = 1 + rng.below(rng.chance(20) ? 4 : 90);
  switch (rng.below(4)) {
    case 0:
      o.shard_size = 1;
      break;
    case 1:
      o.shard_size = 0;
      break;  // automatic
    default:
      o.shard_size = 1 + rng.below(o.dataset_size + 3);
      break;
  }
  o.seed = rng.engine();
  o.shuffle_shards = rng.chance(70);
  o.shuffle_within_shard = rng.chance(40);
  o.max_epochs = 1 + rng.below(4);
  return o;
}

// Independent per-epoch commit counts, indexed by sample index.
class Tally {
 public:
  explicit Tally(const LedgerOptions& o) : map_(o) {}
  void commit(const std::vector<Grant>& runs) {
    for (const auto& run : runs) {
      scratch_.clear();
      map_.append_indices(run, scratch_);
      auto& counts = epochs_[run.epoch];
      counts.resize(static_cast<std::size_t>(map_.dataset_size()), 0);
      for (auto i : scratch_) ++counts[static_cast<std::size_t>(i)];
    }
  }
  // Every index exactly once.
  ::testing::AssertionResult exactly_once(std::int64_t epoch) const {
    auto it = epochs_.find(epoch);
    if (it == epochs_.end()) return ::testing::AssertionFailure() << "epoch " << epoch << " never committed";
    for (std::size_t i = 0; i < it->second.size(); ++i) {
      if (it->second[i] != 1) {
        return ::testing::AssertionFailure()
               << "epoch " << epoch << " index " << i << " committed " << it->second[i] << " times";
      }
    }
    return ::testing::AssertionSuccess();
  }
  // Within an epoch, the ledger's done count equals the number of committed positions and
  // no index was committed twice.
  ::testing::AssertionResult consistent(const Ledger& ledger) const {
    for (const auto& c : ledger.counts()) {
      std::int64_t committed = 0;
      auto it = epochs_.find(c.epoch);
      if (it != epochs_.end()) {
        for (auto n : it->second) {
          if (n > 1) return ::testing::AssertionFailure() << "epoch " << c.epoch << ": an index committed twice";
          committed += n;
        }
      }
      if (committed != c.done) {
        return ::testing::AssertionFailure()
               << "epoch " << c.epoch << ": ledger says done " << c.done << ", tally " << committed;
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  ShardMap map_;
  std::map<std::int64_t, std::vector<int>> epochs_;
  std::vector<std::int64_t> scratch_;
};

}  // namespace

// The Ledger driven directly, with a Client per rank mirroring every consume.
TEST(LedgerProperty, RandomSchedulesCommitEveryIndexExactlyOncePerEpoch) {
  Rng rng(20240611);
  int schedules = 0, restores = 0, fails = 0, drops = 0;
  for (int schedule = 0; schedule < 2000; ++schedule) {
    const auto o = random_options(rng);
    int world = 1 + static_cast<int>(rng.below(5));
    Ledger ledger(o, world);
    std::vector<Client> clients(static_cast<std::size_t>(world), Client(o));
    Tally tally(o);
    std::size_t completed_seen = 0;
    auto check = [&](const char* op) {
      SCOPED_TRACE(std::string("after ") + op + " in schedule " + std::to_string(schedule));
      ASSERT_NO_THROW(ledger.check_identity());
      ASSERT_TRUE(tally.consistent(ledger));
      const auto& completed = ledger.completed_list();
      for (; completed_seen < completed.size(); ++completed_seen)
        ASSERT_TRUE(tally.exactly_once(completed[completed_seen]));
      for (int r = 0; r < world; ++r) ASSERT_EQ(clients[static_cast<std::size_t>(r)].held(), ledger.held(r));
    };
    const std::int64_t batch_limit = 1 + rng.below(2 * o.dataset_size + 2);  // often > N / world
    const int ops = 20 + static_cast<int>(rng.below(80));
    for (int op = 0; op < ops; ++op) {
      const int rank = static_cast<int>(rng.below(world));
      auto& client = clients[static_cast<std::size_t>(rank)];
      const auto what = rng.below(100);
      if (what < 30) {
        for (auto n = rng.below(3) + 1; n > 0; --n) {
          auto g = ledger.acquire(rank);
          if (!g) break;
          ASSERT_EQ(g->rank, rank);
          client.add({*g}, rank);
        }
        check("acquire");
      } else if (what < 75) {  // a step on one rank: consume, then commit (or drop)
        const std::int64_t k = rng.below(batch_limit + 1);
        const auto runs = ledger.consume(rank, k);
        std::vector<std::int64_t> from_ledger;
        for (const auto& run : runs) ledger.map().append_indices(run, from_ledger);
        ASSERT_EQ(client.take(k), from_ledger) << "the client must consume exactly what the ledger does";
        if (rng.chance(12)) {
          ++drops;
          ledger.drop(rank);
          check("drop");
        } else if (rng.chance(85)) {
          tally.commit(runs);
          ledger.commit(rank);
          check("commit");
        } else {
          check("consume");  // committed later, or lost to a failure/restore
          if (rng.chance(50)) {
            // A second consume before committing: both parts commit together.
            const auto more = ledger.consume(rank, rng.below(3));
            from_ledger.clear();
            for (const auto& run : more) ledger.map().append_indices(run, from_ledger);
            ASSERT_EQ(client.take(static_cast<std::int64_t>(from_ledger.size())), from_ledger);
            auto all = runs;
            all.insert(all.end(), more.begin(), more.end());
            tally.commit(all);
            ledger.commit(rank);
            check("commit of two consumes");
          } else {
            // Keep the uncommitted runs for a later commit: model as a fail instead, which
            // must return exactly the uncommitted tails.
            const auto before = ledger.counts();
            ++fails;
            const auto returned = ledger.fail_rank(rank);
            client.clear();
            std::int64_t doing_before = 0, doing_after = 0;
            for (const auto& c : before) doing_before += c.doing_remaining;
            for (const auto& c : ledger.counts()) doing_after += c.doing_remaining;
            ASSERT_EQ(returned, doing_before - doing_after);
            check("fail_rank");
          }
        }
      } else if (what < 85) {
        ++fails;
        ledger.fail_rank(rank);
        client.clear();
        check("fail_rank");
      } else if (what < 92) {
        ++restores;
        const int new_world = rng.chance(40) ? world : 1 + static_cast<int>(rng.below(5));
        ledger = Ledger::restore(ledger.serialize(), new_world);
        world = new_world;
        clients.assign(static_cast<std::size_t>(world), Client(o));
        check("restore");
      } else {
        // Exact state round trip: serialize -> restore -> serialize is stable once the
        // tails are reserved.
        const auto once = Ledger::restore(ledger.serialize(), world).serialize();
        ASSERT_EQ(Ledger::restore(once, world).serialize(), once);
      }
    }
    // Drain: every rank takes and commits everything until max_epochs is used up.
    for (int guard = 0; !ledger.exhausted(); ++guard) {
      ASSERT_LT(guard, 100000) << "schedule " << schedule << " does not drain";
      for (int r = 0; r < world; ++r) {
        if (ledger.held(r) == 0) {
          if (auto g = ledger.acquire(r)) clients[static_cast<std::size_t>(r)].add({*g}, r);
        }
        const auto runs = ledger.consume(r, 1 + rng.below(batch_limit));
        std::vector<std::int64_t> from_ledger;
        for (const auto& run : runs) ledger.map().append_indices(run, from_ledger);
        ASSERT_EQ(clients[static_cast<std::size_t>(r)].take(static_cast<std::int64_t>(from_ledger.size())),
                  from_ledger);
        tally.commit(runs);
        ledger.commit(r);
        check("drain");
      }
    }
    ASSERT_EQ(ledger.completed_epochs(), o.max_epochs);
    for (std::int64_t e = 0; e < o.max_epochs; ++e) ASSERT_TRUE(tally.exactly_once(e)) << "schedule " << schedule;
    ++schedules;
  }
  EXPECT_EQ(schedules, 2000);
  // The schedules must actually exercise the failure paths.
  EXPECT_GT(restores, 500);
  EXPECT_GT(fails, 500);
  EXPECT_GT(drops, 500);
  std::printf("ledger schedules: %d restores, %d failures, %d drops\n", restores, fails, drops);
}

// The Coordinator and Clients as the Service uses them: per-step demand changes, drops,
// failures and restores into other world sizes. Checked through the coordinator's own
// coverage counter AND by counting the indices the clients handed to training.
TEST(CoordinatorProperty, RandomStepsKeepCoverageCleanAcrossFailuresAndRestores) {
  Rng rng(77);
  int restores = 0, fails = 0, drops = 0, steps = 0;
  for (int schedule = 0; schedule < 3000; ++schedule) {
    const auto o = random_options(rng);
    int world = 1 + static_cast<int>(rng.below(4));
    const int prefetch = 1 + static_cast<int>(rng.below(3));
    Coordinator coordinator(o, world, prefetch);
    std::vector<Client> clients(static_cast<std::size_t>(world), Client(o));
    std::vector<std::int64_t> trained(static_cast<std::size_t>(o.dataset_size), 0);
    const std::int64_t batch_limit = 1 + rng.below(rng.chance(50) ? 4 : o.dataset_size + 2);
    std::vector<std::int64_t> demand;
    auto new_demand = [&] {
      demand.assign(static_cast<std::size_t>(world), 0);
      for (auto& d : demand) d = rng.chance(15) ? 0 : 1 + rng.below(batch_limit);
    };
    new_demand();
    for (int step = 0; step < 2000 && !coordinator.ledger().exhausted(); ++step) {
      const auto grants = coordinator.grant(demand);
      for (int r = 0; r < world; ++r) clients[static_cast<std::size_t>(r)].add(grants, r);
      std::vector<std::int64_t> consumed(static_cast<std::size_t>(world), 0);
      std::vector<int> dropped;
      const bool draining = step > 150;  // late in the schedule, only plain steps
      for (int r = 0; r < world; ++r) {
        const auto idx = clients[static_cast<std::size_t>(r)].take(demand[static_cast<std::size_t>(r)]);
        consumed[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(idx.size());
        if (!draining && world > 1 && rng.chance(10)) {
          ++drops;
          dropped.push_back(r);
        } else {
          for (auto i : idx) ++trained[static_cast<std::size_t>(i)];
        }
      }
      ASSERT_NO_THROW(coordinator.commit_step(consumed, dropped)) << "schedule " << schedule << " step " << step;
      ++steps;
      if (!draining && rng.chance(8)) {
        ++fails;
        const int r = static_cast<int>(rng.below(world));
        coordinator.fail_rank(r);
        clients[static_cast<std::size_t>(r)].clear();
      }
      if (!draining && rng.chance(5)) {
        ++restores;
        const int new_world = rng.chance(40) ? world : 1 + static_cast<int>(rng.below(4));
        coordinator = Coordinator::restore(coordinator.serialize(), new_world, prefetch);
        world = new_world;
        clients.assign(static_cast<std::size_t>(world), Client(o));
        new_demand();
      }
      if (rng.chance(20) || draining) new_demand();
      if (draining) {
        for (auto& d : demand) d = 1 + batch_limit;  // nobody idle while draining
      }
    }
    ASSERT_TRUE(coordinator.ledger().exhausted()) << "schedule " << schedule;
    ASSERT_EQ(static_cast<std::int64_t>(coordinator.coverage().size()), o.max_epochs);
    for (const auto& c : coordinator.coverage()) {
      ASSERT_EQ(c.missing, 0) << "schedule " << schedule << " epoch " << c.epoch;
      ASSERT_EQ(c.duplicated, 0) << "schedule " << schedule << " epoch " << c.epoch;
      ASSERT_EQ(c.committed, o.dataset_size);
    }
    for (auto t : trained) ASSERT_EQ(t, o.max_epochs) << "schedule " << schedule;
  }
  EXPECT_GT(steps, 50000);
  EXPECT_GT(restores, 1000);
  EXPECT_GT(fails, 1000);
  EXPECT_GT(drops, 1000);
  std::printf("coordinator schedules: %d steps, %d restores, %d failures, %d drops\n", steps, restores, fails, drops);
}
