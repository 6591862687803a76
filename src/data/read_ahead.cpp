// data::Batch and data::ReadAhead (src/data/read_ahead.hpp).
#include "data/read_ahead.hpp"

#include <algorithm>
#include <utility>

#include "antdt/error.hpp"

namespace antdt::data {

Batch::Batch(bool page_locked)
    : features(PinnedAllocator<float>(page_locked)), labels(PinnedAllocator<std::int32_t>(page_locked)) {}

void Batch::resize(std::int64_t rows, std::int64_t dim) {
  if (rows < 0 || dim < 1) {
    throw UsageError("Batch::resize: rows must be >= 0 and dim >= 1, got " + std::to_string(rows) + " and " +
                     std::to_string(dim));
  }
  features.resize(static_cast<std::size_t>(rows * dim));
  labels.resize(static_cast<std::size_t>(rows));
}

ReadAhead::ReadAhead(Dataset& data, bool page_locked) : data_(data), buffer_(page_locked) {}

ReadAhead::~ReadAhead() {
  if (!pending_.valid()) return;
  try {
    pending_.get();
  } catch (...) {  // NOLINT(bugprone-empty-catch): nobody will fill() from it any more
  }
}

void ReadAhead::wait() {
  if (!pending_.valid()) return;
  try {
    pending_.get();
    ready_ = true;
  } catch (...) {
    indices_.clear();
    throw;
  }
}

void ReadAhead::start(std::vector<std::int64_t> indices) {
  wait();
  ready_ = false;
  indices_ = std::move(indices);
  // Sized here, on the caller's thread: growing a page-locked buffer registers memory.
  buffer_.resize(static_cast<std::int64_t>(indices_.size()), data_.dim());
  if (indices_.empty()) {
    ready_ = true;
    return;
  }
  pending_ =
      std::async(std::launch::async, [this] { data_.read(indices_, buffer_.features.data(), buffer_.labels.data()); });
}

std::int64_t ReadAhead::fill(std::span<const std::int64_t> indices, Batch& out) {
  wait();
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t dim = data_.dim();
  std::int64_t shared = 0;
  if (ready_) {
    const auto limit = std::min(indices.size(), indices_.size());
    shared =
        std::mismatch(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(limit), indices_.begin()).first -
        indices.begin();
  }
  if (shared > 0) {
    std::swap(out.features, buffer_.features);
    std::swap(out.labels, buffer_.labels);
  }
  out.resize(n, dim);
  if (shared < n) {
    data_.read(indices.subspan(static_cast<std::size_t>(shared)), out.features.data() + shared * dim,
               out.labels.data() + shared);
  }
  ready_ = false;
  indices_.clear();
  rows_ahead_ += shared;
  rows_now_ += n - shared;
  return shared;
}

}  // namespace antdt::data
