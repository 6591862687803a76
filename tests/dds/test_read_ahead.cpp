// data::ReadAhead: the next step's samples read on another thread, then checked against the
// samples really asked for. A right guess is served from it, a guess that shares a prefix
// serves that prefix, anything else is read then; an error of the background read surfaces.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "data/read_ahead.hpp"

using namespace antdt::data;

namespace {

// An in-memory set that records each read (indices and thread), and can hold reads at a gate
// until the test opens it.
class Recording final : public Dataset {
 public:
  explicit Recording(bool gated = false) : inner_(make_synthetic({60, 3, 4, 7})), gated_(gated) {
    if (!gated_) gate_.set_value();
  }
  [[nodiscard]] std::int64_t size() const override { return inner_.size(); }
  [[nodiscard]] std::int64_t dim() const override { return inner_.dim(); }
  [[nodiscard]] std::int32_t num_classes() const override { return inner_.num_classes(); }
  void read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) override {
    opened_.wait();
    {
      std::lock_guard lock(mutex_);
      reads_.emplace_back(indices.begin(), indices.end());
      threads_.push_back(std::this_thread::get_id());
    }
    inner_.read(indices, features, labels);
  }
  void open() { gate_.set_value(); }
  [[nodiscard]] std::vector<std::vector<std::int64_t>> reads() {
    std::lock_guard lock(mutex_);
    return reads_;
  }
  [[nodiscard]] std::vector<std::thread::id> threads() {
    std::lock_guard lock(mutex_);
    return threads_;
  }
  InMemoryDataset& inner() { return inner_; }

 private:
  InMemoryDataset inner_;
  bool gated_;
  std::promise<void> gate_;
  std::shared_future<void> opened_ = gate_.get_future().share();
  std::mutex mutex_;
  std::vector<std::vector<std::int64_t>> reads_;
  std::vector<std::thread::id> threads_;
};

std::vector<std::int64_t> range(std::int64_t from, std::int64_t to) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// `batch` holds exactly the rows of `indices`, as a plain read gives them.
void expect_rows(Recording& data, const std::vector<std::int64_t>& indices, const Batch& batch) {
  Batch direct;
  direct.resize(static_cast<std::int64_t>(indices.size()), data.dim());
  data.inner().read(indices, direct.features.data(), direct.labels.data());
  ASSERT_EQ(batch.rows(), static_cast<std::int64_t>(indices.size()));
  EXPECT_TRUE(std::equal(direct.features.begin(), direct.features.end(), batch.features.begin()));
  EXPECT_TRUE(std::equal(direct.labels.begin(), direct.labels.end(), batch.labels.begin()));
}

}  // namespace

TEST(ReadAhead, ARightGuessIsReadOnAnotherThreadAndServedWhole) {
  Recording data;
  ReadAhead ahead(data, false);
  Batch batch;
  const auto a = range(5, 15);
  ahead.start(a);
  EXPECT_EQ(ahead.fill(a, batch), 10);
  expect_rows(data, a, batch);
  EXPECT_EQ(ahead.rows_ahead(), 10);
  EXPECT_EQ(ahead.rows_now(), 0);
  ASSERT_EQ(data.reads().size(), 1U);
  EXPECT_NE(data.threads()[0], std::this_thread::get_id());
  // The buffers were swapped, not copied: the next round reuses them and stays right.
  const auto b = range(40, 52);
  ahead.start(b);
  EXPECT_EQ(ahead.fill(b, batch), 12);
  expect_rows(data, b, batch);
}

TEST(ReadAhead, StartReturnsWhileTheReadIsStillRunning) {
  Recording data(true);  // reads wait at the gate
  ReadAhead ahead(data, false);
  Batch batch;
  const auto a = range(0, 8);
  ahead.start(a);  // would hang here if the read ran on this thread
  EXPECT_TRUE(data.reads().empty());
  data.open();
  EXPECT_EQ(ahead.fill(a, batch), 8);
  expect_rows(data, a, batch);
}

TEST(ReadAhead, ASharedPrefixIsServedAndOnlyTheRestIsReadThen) {
  Recording data;
  ReadAhead ahead(data, false);
  Batch batch;
  // Asked for fewer (a plan shrank this rank's batch): all from the read-ahead.
  ahead.start(range(0, 10));
  EXPECT_EQ(ahead.fill(range(0, 6), batch), 6);
  expect_rows(data, range(0, 6), batch);
  // Asked for more (a plan grew it): the guess, then the extra rows read now.
  auto longer = range(10, 20);
  longer.push_back(33);
  longer.push_back(34);
  ahead.start(range(10, 20));
  EXPECT_EQ(ahead.fill(longer, batch), 10);
  expect_rows(data, longer, batch);
  EXPECT_EQ(data.reads().back(), (std::vector<std::int64_t>{33, 34}));
  // Diverging after 4 rows: 4 served, the other 5 read now.
  auto diverging = range(20, 24);
  for (std::int64_t i : {50, 51, 52, 53, 54}) diverging.push_back(i);
  ahead.start(range(20, 30));
  EXPECT_EQ(ahead.fill(diverging, batch), 4);
  expect_rows(data, diverging, batch);
  EXPECT_EQ(data.reads().back(), range(50, 55));
  EXPECT_EQ(ahead.rows_ahead(), 6 + 10 + 4);
  EXPECT_EQ(ahead.rows_now(), 2 + 5);
}

TEST(ReadAhead, NoStartOrAWrongFirstSampleReadsEverythingThen) {
  Recording data;
  ReadAhead ahead(data, false);
  Batch batch;
  EXPECT_EQ(ahead.fill(range(3, 9), batch), 0);
  expect_rows(data, range(3, 9), batch);
  ahead.start(range(10, 20));
  EXPECT_EQ(ahead.fill(range(11, 21), batch), 0);
  expect_rows(data, range(11, 21), batch);
  // A guess is used once: a second fill of the same samples reads them.
  EXPECT_EQ(ahead.fill(range(11, 21), batch), 0);
  ahead.start({});
  EXPECT_EQ(ahead.fill({}, batch), 0);
  EXPECT_EQ(batch.rows(), 0);
  EXPECT_EQ(ahead.rows_ahead(), 0);
  EXPECT_EQ(ahead.rows_now(), 6 + 10 + 10);
}

TEST(ReadAhead, TheBackgroundReadsErrorSurfacesAndTheNextRoundWorks) {
  Recording data;
  ReadAhead ahead(data, false);
  Batch batch;
  ahead.start({1, 2, 600});  // outside the 60 samples
  EXPECT_THROW((void)ahead.fill(range(1, 3), batch), antdt::UsageError);
  ahead.start(range(7, 9));
  EXPECT_EQ(ahead.fill(range(7, 9), batch), 2);
  expect_rows(data, range(7, 9), batch);
  ahead.start({600});
  EXPECT_THROW(ahead.wait(), antdt::UsageError);
  EXPECT_EQ(ahead.fill(range(7, 9), batch), 0) << "a failed read-ahead serves nothing";
}

TEST(ReadAhead, DestroyingItWaitsForTheReadInFlight) {
  Recording data(true);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    data.open();
  });
  {
    ReadAhead ahead(data, false);
    ahead.start(range(0, 5));
  }                                 // the destructor returns only once the read has finished with its buffers
  const auto reads = data.reads();  // before the opener is joined: the gate opened in between
  opener.join();
  ASSERT_EQ(reads.size(), 1U);
  EXPECT_EQ(reads[0], range(0, 5));
}

TEST(Batch, ResizeKeepsTheLeadingRowsAndRejectsNonsense) {
  Batch b(true);  // page-locked where CUDA is there, ordinary memory here: both serve
  b.resize(3, 2);
  for (std::size_t i = 0; i < 6; ++i) b.features[i] = static_cast<float>(i);
  b.resize(2, 2);
  EXPECT_EQ(b.rows(), 2);
  EXPECT_EQ(b.features[3], 3.0f);
  EXPECT_THROW(b.resize(-1, 2), antdt::UsageError);
  EXPECT_THROW(b.resize(1, 0), antdt::UsageError);
}
