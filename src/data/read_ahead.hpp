// Reading the next step's samples while this step computes.
//
//     antdt::data::ReadAhead ahead(dataset, page_locked);
//     antdt::data::Batch batch(page_locked);
//     while (!session.finished()) {
//       auto work = session.begin_step();
//       ahead.fill(work.samples, batch);          // what was read ahead, plus what was not
//       session.mark_data_ready();
//       ahead.start(session.next_samples());      // background read of the next step's guess
//       ... compute, reduce, update, end_step ...
//       if (checkpoint or evaluation due) ahead.wait();   // HDF5 is not thread-safe
//     }
//
// The guess is checked, not trusted: fill() uses the read-ahead rows only for the longest
// prefix they share with the samples asked for, and reads the rest then. A plan change that
// resizes this rank's slice, or a restore, costs a read, never a wrong row.
#pragma once

#include <cstdint>
#include <future>
#include <span>
#include <vector>

#include "antdt/data.hpp"
#include "runtime/device.hpp"

namespace antdt::data {

// One rank's batch in host memory: features [rows][dim] row-major and labels [rows]. In
// page-locked memory when asked (PinnedAllocator), for a model on a GPU.
struct Batch {
  explicit Batch(bool page_locked = false);
  // Keeps the first min(rows, old rows) rows.
  void resize(std::int64_t rows, std::int64_t dim);
  [[nodiscard]] std::int64_t rows() const noexcept { return static_cast<std::int64_t>(labels.size()); }

  HostVector<float> features;
  HostVector<std::int32_t> labels;
};

// A background read of one step's samples into a second Batch. The dataset's read() runs on
// another thread while the caller makes no call into that dataset; for an Hdf5Dataset the
// caller makes no HDF5 call at all (HDF5 is not thread-safe) until fill() or wait(). A
// collective Hdf5Dataset must not be read ahead: its reads are MPI calls.
class ReadAhead {
 public:
  ReadAhead(Dataset& data, bool page_locked);
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  ~ReadAhead();  // waits for a read in flight; its error, if any, is dropped

  // Starts reading `indices` in the background, after waiting for an earlier read.
  void start(std::vector<std::int64_t> indices);
  // Fills `out` with the rows of `indices` (resized to them). The rows of the longest prefix
  // shared with the last start() come from the read-ahead (the buffers are swapped, not
  // copied); the rest are read now. Rethrows the background read's error. Returns the rows
  // that came from the read-ahead.
  std::int64_t fill(std::span<const std::int64_t> indices, Batch& out);
  // Waits for a read in flight, and rethrows its error (the read-ahead is then dropped).
  void wait();

  // Totals over fill() calls: rows that came from the read-ahead, and rows read in fill().
  [[nodiscard]] std::int64_t rows_ahead() const noexcept { return rows_ahead_; }
  [[nodiscard]] std::int64_t rows_now() const noexcept { return rows_now_; }

 private:
  Dataset& data_;
  Batch buffer_;
  std::vector<std::int64_t> indices_;  // what buffer_ holds, or is being read into
  std::future<void> pending_;
  bool ready_ = false;  // buffer_ holds indices_
  std::int64_t rows_ahead_ = 0, rows_now_ = 0;
};

}  // namespace antdt::data
