// Property tests: thousands of random schedules (fixed seeds) of steps of changing batch sizes
// that leave random parts undone, serialize/restore and changes of max_epochs, over several
// epochs, on data sets whose size is not a multiple of the shard size, smaller than one step,
// and with shard size 1. After every operation the identity holds; every completed epoch has
// every index committed exactly once, counted here through ShardMap from the committed pieces
// and from a StepStream mirror, independently of the ledger's counters.
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
  void commit(const std::vector<Piece>& runs) {
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

// Random undone offsets of a batch of `size` (ascending, disjoint; often none).
std::vector<BatchRange> random_undone(Rng& rng, std::int64_t size) {
  std::vector<BatchRange> out;
  if (size == 0 || !rng.chance(40)) return out;
  for (std::int64_t at = rng.below(size); at < size; at += 1 + rng.below(size)) {
    const std::int64_t end = std::min(size, at + 1 + rng.below(size / 2 + 1));
    out.push_back(BatchRange{at, end});
    at = end;
  }
  return out;
}

// The Ledger driven directly: every committed piece is tallied through ShardMap.
TEST(LedgerProperty, RandomSchedulesCommitEveryIndexExactlyOncePerEpoch) {
  Rng rng(20240611);
  int schedules = 0, restores = 0, carried = 0, resized = 0;
  for (int schedule = 0; schedule < 2000; ++schedule) {
    auto o = random_options(rng);
    Ledger ledger(o);
    Tally tally(o);
    std::size_t completed_seen = 0;
    auto check = [&](const char* op) {
      SCOPED_TRACE(std::string("after ") + op + " in schedule " + std::to_string(schedule));
      ASSERT_NO_THROW(ledger.check_identity());
      ASSERT_TRUE(tally.consistent(ledger));
      const auto& completed = ledger.completed_list();
      for (; completed_seen < completed.size(); ++completed_seen)
        ASSERT_TRUE(tally.exactly_once(completed[completed_seen]));
    };
    std::int64_t batch = 1 + rng.below(2 * o.dataset_size + 2);  // often > N
    const int ops = 20 + static_cast<int>(rng.below(80));
    for (int op = 0; op < ops && !ledger.exhausted(); ++op) {
      const auto what = rng.below(100);
      if (what < 75) {
        const std::int64_t size = ledger.next_batch(batch).size();
        const auto undone = random_undone(rng, size);
        carried += undone.empty() ? 0 : 1;
        std::vector<Piece> pieces;
        std::int64_t left = 0;
        for (const auto& u : undone) left += u.size();
        ASSERT_EQ(ledger.commit(batch, undone, &pieces), size - left);
        tally.commit(pieces);
        check("commit");
      } else if (what < 85) {
        ++resized;
        batch = 1 + rng.below(2 * o.dataset_size + 2);  // a resume with another B
      } else if (what < 95) {
        ++restores;
        ledger = Ledger::restore(ledger.serialize());
        check("restore");
        const auto once = ledger.serialize();
        ASSERT_EQ(Ledger::restore(once).serialize(), once);
      } else {
        const std::int64_t started = ledger.stream().started_epochs();
        o.max_epochs = std::max<std::int64_t>(started, 1) + rng.below(3);
        ledger.set_max_epochs(o.max_epochs);
        check("set_max_epochs");
      }
    }
    for (int guard = 0; !ledger.exhausted(); ++guard) {
      ASSERT_LT(guard, 100000) << "schedule " << schedule << " does not drain";
      std::vector<Piece> pieces;
      (void)ledger.commit(batch, {}, &pieces);
      tally.commit(pieces);
      check("drain");
    }
    ASSERT_EQ(ledger.completed_epochs(), o.max_epochs);
    for (std::int64_t e = 0; e < o.max_epochs; ++e) ASSERT_TRUE(tally.exactly_once(e)) << "schedule " << schedule;
    ++schedules;
  }
  EXPECT_EQ(schedules, 2000);
  // The schedules must actually exercise carrying, restores and new batch sizes.
  EXPECT_GT(restores, 500);
  EXPECT_GT(carried, 1000);
  EXPECT_GT(resized, 500);
  std::printf("ledger schedules: %d restores, %d steps that carried positions, %d batch changes\n", restores, carried,
              resized);
}

// The Coordinator as the StepCoordinator uses it, with every rank's view mirrored: a StepStream
// that moves only by what the steps say, and the indices it gives. Checked through the
// coordinator's own coverage counter AND by counting the indices the mirror handed to training.
TEST(CoordinatorProperty, RandomStepsKeepCoverageCleanAcrossCarriesAndRestores) {
  Rng rng(77);
  int restores = 0, carried = 0, steps = 0;
  for (int schedule = 0; schedule < 3000; ++schedule) {
    const auto o = random_options(rng);
    Coordinator coordinator(o);
    const ShardMap map(o);
    StepStream mirror(o.dataset_size, o.max_epochs);
    std::vector<std::int64_t> trained(static_cast<std::size_t>(o.dataset_size), 0);
    const std::int64_t batch_limit = 1 + rng.below(rng.chance(50) ? 4 : o.dataset_size + 2);
    std::int64_t batch = 1 + rng.below(batch_limit);
    for (int step = 0; step < 2000 && !coordinator.ledger().exhausted(); ++step) {
      const bool draining = step > 150;  // late in the schedule, only plain steps
      const StepBatch b = mirror.next(batch);
      ASSERT_EQ(b, coordinator.next_batch(batch)) << "schedule " << schedule << " step " << step;
      const auto undone = draining ? std::vector<BatchRange>{} : random_undone(rng, b.size());
      carried += undone.empty() ? 0 : 1;
      std::int64_t at = 0;
      const auto train = [&](std::int64_t from, std::int64_t to) {
        for (auto i : map.indices(b, from, to)) ++trained[static_cast<std::size_t>(i)];
      };
      for (const auto& u : undone) {
        train(at, u.begin);
        at = u.end;
      }
      train(at, b.size());
      ASSERT_NO_THROW(coordinator.commit_step(batch, undone)) << "schedule " << schedule << " step " << step;
      mirror.advance(b, undone);
      ++steps;
      if (!draining && rng.chance(5)) {
        ++restores;
        coordinator = Coordinator::restore(coordinator.serialize());
        ASSERT_EQ(coordinator.ledger().stream().cursor(), mirror.cursor());
        ASSERT_EQ(coordinator.ledger().stream().carried(), mirror.carried());
      }
      if (rng.chance(10)) batch = 1 + rng.below(batch_limit);
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
  EXPECT_GT(carried, 10000);
  std::printf("coordinator schedules: %d steps, %d restores, %d steps that carried positions\n", steps, restores,
              carried);
}
