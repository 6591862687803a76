// The DDS ledger: the stream every step's batch comes from, and what every open epoch has
// committed.
//
// Representation. The StepStream holds everything TODO: the positions at or after its cursor
// and the ranges carried back from steps that left them undone. Everything else that an epoch
// holds is DONE and only counted, per open epoch. Between steps no position is anything else:
// a step's batch goes from TODO to DONE (or back to carried TODO) in one commit, after the
// step's reduction, so a checkpoint holds no rank and restores onto any world size.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "antdt/error.hpp"
#include "core/blob_fields.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

// --- StepStream ---------------------------------------------------------------------------

namespace {

std::int64_t stream_end(std::int64_t dataset_size, std::int64_t max_epochs) {
  if (max_epochs < 0)
    throw UsageError("dds: max_epochs must be >= 0 (0 = unlimited), got " + std::to_string(max_epochs));
  if (max_epochs == 0) return kMaxStreamPosition;
  if (max_epochs > kMaxStreamPosition / dataset_size) {
    throw UsageError("dds: max_epochs " + std::to_string(max_epochs) + " of " + std::to_string(dataset_size) +
                     " samples is beyond the stream's 2^62 positions; give fewer epochs (or 0: unlimited)");
  }
  return max_epochs * dataset_size;
}

}  // namespace

StepStream::StepStream(std::int64_t dataset_size, std::int64_t max_epochs)
    : dataset_size_(dataset_size), max_epochs_(max_epochs) {
  if (dataset_size < 1 || dataset_size > kMaxDatasetSize) {
    throw UsageError("dds: dataset_size " + std::to_string(dataset_size) + " is outside [1, " +
                     std::to_string(kMaxDatasetSize) + "]");
  }
  end_ = stream_end(dataset_size, max_epochs);
}

StepStream::StepStream(std::int64_t dataset_size, std::int64_t max_epochs, std::int64_t cursor,
                       std::vector<StreamRange> carried)
    : StepStream(dataset_size, max_epochs) {
  if (cursor < 0 || cursor > end_) {
    throw UsageError("dds: stream cursor " + std::to_string(cursor) + " is outside [0, " + std::to_string(end_) + "]");
  }
  std::vector<StreamRange> sorted = carried;
  std::sort(sorted.begin(), sorted.end(), [](const StreamRange& a, const StreamRange& b) { return a.begin < b.begin; });
  std::int64_t previous_end = 0;
  for (const auto& r : sorted) {
    if (r.begin < previous_end || r.begin >= r.end || r.end > cursor) {
      throw UsageError("dds: a carried range [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                       ") is empty, overlaps another, or is not below the cursor " + std::to_string(cursor));
    }
    previous_end = r.end;
    carried_positions_ += r.size();
  }
  cursor_ = cursor;
  carried_ = std::move(carried);
}

StepBatch StepStream::next(std::int64_t global_batch) const {
  if (global_batch < 1) throw UsageError("dds: a step's batch must be at least 1, got " + std::to_string(global_batch));
  StepBatch b;
  std::int64_t left = global_batch;
  for (const auto& r : carried_) {
    if (left == 0) break;
    const std::int64_t take = std::min(left, r.size());
    b.ranges.push_back(StreamRange{r.begin, r.begin + take});
    left -= take;
  }
  if (left > 0 && cursor_ < end_) b.ranges.push_back(StreamRange{cursor_, cursor_ + std::min(left, end_ - cursor_)});
  return b;
}

void StepStream::advance(const StepBatch& batch, std::span<const BatchRange> undone) {
  const std::int64_t size = batch.size();
  if (size == 0 || batch != next(size)) {
    throw UsageError("dds: a step stream can only move past its next batch (the batch given is not it)");
  }
  std::int64_t previous = 0;
  for (const auto& u : undone) {
    if (u.begin < previous || u.begin > u.end || u.end > size) {
      throw UsageError("dds: the undone part [" + std::to_string(u.begin) + ", " + std::to_string(u.end) +
                       ") of a step of " + std::to_string(size) +
                       " positions is outside it, or not after the previous part");
    }
    previous = u.end;
  }
  // The batch took the carried ranges first: drop what it took of them, then move the cursor.
  std::int64_t from_carried = std::min(size, carried_positions_);
  carried_positions_ -= from_carried;
  cursor_ += size - from_carried;
  std::size_t whole = 0;
  while (from_carried > 0) {
    StreamRange& r = carried_[whole];
    const std::int64_t take = std::min(from_carried, r.size());
    r.begin += take;
    from_carried -= take;
    if (r.begin == r.end) ++whole;
  }
  carried_.erase(carried_.begin(), carried_.begin() + static_cast<std::ptrdiff_t>(whole));
  // What the step left undone goes first, in its order; touching ranges are joined.
  std::vector<StreamRange> front;
  for (const auto& u : undone) batch.slice(u.begin, u.end, front);
  std::vector<StreamRange> joined;
  joined.reserve(front.size() + carried_.size());
  for (const auto& r : front) {
    carried_positions_ += r.size();
    if (!joined.empty() && joined.back().end == r.begin) {
      joined.back().end = r.end;
    } else {
      joined.push_back(r);
    }
  }
  for (const auto& r : carried_) {
    if (!joined.empty() && joined.back().end == r.begin) {
      joined.back().end = r.end;
    } else {
      joined.push_back(r);
    }
  }
  carried_ = std::move(joined);
}

std::int64_t StepStream::started_epochs() const noexcept { return (cursor_ + dataset_size_ - 1) / dataset_size_; }

void StepStream::set_max_epochs(std::int64_t max_epochs) {
  const std::int64_t end = stream_end(dataset_size_, max_epochs);
  if (max_epochs > 0 && max_epochs < started_epochs()) {
    throw UsageError("dds: cannot stop after epoch " + std::to_string(max_epochs) + ": " +
                     std::to_string(started_epochs()) + " epochs are already under way or done");
  }
  max_epochs_ = max_epochs;
  end_ = end;
}

// --- Ledger -------------------------------------------------------------------------------

namespace {
constexpr std::uint32_t kLedgerMagic = 0x4C534444;  // "DDSL"
// 2: the stream (cursor and carried ranges) and each open epoch's count, one field list
// (Ledger::Saved) through core/blob_fields.hpp. Version 1 (magic "DDSLEDGR") held every rank's
// granted pieces; its runs composed steps differently and cannot be resumed.
constexpr std::uint32_t kLedgerVersion = 2;
constexpr std::uint64_t kLedgerVersion1Magic = 0x524744454C534444ULL;  // "DDSLEDGR"
}  // namespace

Ledger::Ledger(const LedgerOptions& options)
    : options_(options), map_(options), stream_(options.dataset_size, options.max_epochs) {
  options_.shard_size = map_.shard_size();  // resolve "automatic" once, so it is what gets saved
}

Ledger::OpenEpoch& Ledger::open_epoch(std::int64_t epoch) {
  auto it = std::lower_bound(open_.begin(), open_.end(), epoch,
                             [](const OpenEpoch& e, std::int64_t value) { return e.epoch < value; });
  ANTDT_ASSERT(it != open_.end() && it->epoch == epoch, "a committed position lies in an epoch that is not open");
  return *it;
}

std::int64_t Ledger::commit(std::int64_t global_batch, std::span<const BatchRange> undone,
                            std::vector<Piece>* committed) {
  const StepBatch batch = stream_.next(global_batch);
  if (batch.size() == 0) throw UsageError("dds: commit after the stream's end (the ledger is exhausted)");
  StepStream after = stream_;
  after.advance(batch, undone);  // UsageError on a bad undone list, before anything changes
  // Every epoch the cursor entered is open from now on, whether or not any of it is committed.
  for (std::int64_t e = stream_.started_epochs(); e < after.started_epochs(); ++e) open_.push_back(OpenEpoch{e, 0});
  std::int64_t total = 0;
  std::vector<StreamRange> ranges;
  const auto commit_offsets = [&](std::int64_t from, std::int64_t to) {
    ranges.clear();
    batch.slice(from, to, ranges);
    for (const auto& r : ranges) {
      map_.for_each_piece(r, [&](const Piece& piece) {
        open_epoch(piece.epoch).done += piece.size();
        total += piece.size();
        if (committed) committed->push_back(piece);
      });
    }
  };
  std::int64_t at = 0;
  for (const auto& u : undone) {
    commit_offsets(at, u.begin);
    at = u.end;
  }
  commit_offsets(at, batch.size());
  stream_ = std::move(after);
  close_complete_epochs();
  return total;
}

void Ledger::close_complete_epochs() {
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->done == map_.dataset_size()) {
      completed_.push_back(it->epoch);
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<Ledger::EpochCounts> Ledger::counts() const {
  std::vector<EpochCounts> out;
  out.reserve(open_.size());
  for (const auto& e : open_) out.push_back(EpochCounts{e.epoch, map_.dataset_size() - e.done, e.done});
  return out;
}

// TODO is recounted from the stream: an open epoch's positions at or after the cursor, and the
// carried positions that fall in it.
void Ledger::check_identity() const {
  const std::int64_t n = map_.dataset_size();
  const std::int64_t started = stream_.started_epochs();
  if (static_cast<std::int64_t>(open_.size() + completed_.size()) != started) {
    throw Error("dds ledger: " + std::to_string(started) + " epochs started, but " + std::to_string(open_.size()) +
                " are open and " + std::to_string(completed_.size()) + " complete");
  }
  for (const std::int64_t e : completed_) {  // a complete epoch is wholly behind the cursor
    if (e < 0 || e >= started || (e + 1) * n > stream_.cursor()) {
      throw Error("dds ledger: epoch " + std::to_string(e) + " is complete, but the stream's cursor " +
                  std::to_string(stream_.cursor()) + " has not passed its end");
    }
  }
  std::vector<std::int64_t> todo(open_.size(), 0);
  const auto slot_of = [&](std::int64_t epoch) -> std::int64_t& {
    for (std::size_t i = 0; i < open_.size(); ++i) {
      if (open_[i].epoch == epoch) return todo[i];
    }
    throw Error("dds ledger: a carried position lies in epoch " + std::to_string(epoch) + ", which is not open");
  };
  for (std::size_t i = 0; i < open_.size(); ++i) {
    const std::int64_t first = open_[i].epoch * n, end = first + n;
    todo[i] += std::max<std::int64_t>(0, end - std::max(first, stream_.cursor()));
  }
  for (const auto& r : stream_.carried()) {
    for (std::int64_t p = r.begin; p < r.end;) {
      const std::int64_t epoch = p / n, stop = std::min(r.end, (epoch + 1) * n);
      slot_of(epoch) += stop - p;
      p = stop;
    }
  }
  for (std::size_t i = 0; i < open_.size(); ++i) {
    const OpenEpoch& e = open_[i];
    if (e.done < 0 || e.done >= n || todo[i] + e.done != n) {
      throw Error("dds ledger identity broken in epoch " + std::to_string(e.epoch) + ": todo " +
                  std::to_string(todo[i]) + " + done " + std::to_string(e.done) + " != dataset size " +
                  std::to_string(n));
    }
  }
}

std::int64_t Ledger::current_epoch() const { return open_.empty() ? stream_.started_epochs() : open_.front().epoch; }

void Ledger::set_max_epochs(std::int64_t max_epochs) {
  stream_.set_max_epochs(max_epochs);
  options_.max_epochs = max_epochs;
}

// What a ledger saves, listed once: serialize and restore both walk this list.
struct Ledger::Saved {
  LedgerOptions options;
  std::int64_t cursor = 0;
  std::vector<StreamRange> carried;
  std::vector<OpenEpoch> open;
  std::vector<std::int64_t> completed;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.options.dataset_size), f(m.options.shard_size), f(m.options.seed), f(m.options.shuffle_shards),
        f(m.options.shuffle_within_shard), f(m.options.max_epochs), f(m.cursor), f(m.carried), f(m.open),
        f(m.completed);
  }
};

std::vector<std::byte> Ledger::serialize() const {
  Saved saved;
  saved.options = options_;
  saved.cursor = stream_.cursor();
  saved.carried = stream_.carried();
  saved.open = open_;
  saved.completed = completed_;
  return detail::write_blob(kLedgerMagic, kLedgerVersion, saved);
}

Ledger Ledger::restore(std::span<const std::byte> bytes) {
  try {
    if (bytes.size() >= sizeof kLedgerVersion1Magic) {
      std::uint64_t magic = 0;
      std::memcpy(&magic, bytes.data(), sizeof magic);
      if (magic == kLedgerVersion1Magic) {
        throw CheckpointError(
            "DDS ledger version 1: an older antdt wrote it, which composed steps from per-rank grants; resume it "
            "with that antdt, or start the run afresh");
      }
    }
    Saved saved = detail::read_blob<Saved>(
        bytes, kLedgerMagic, kLedgerVersion, "DDS ledger",
        "an older antdt wrote it, which composed steps from per-rank grants; resume it with that antdt, or start the "
        "run afresh");
    const LedgerOptions& o = saved.options;
    Ledger ledger(o);
    if (ledger.map_.shard_size() != o.shard_size) {
      throw CheckpointError("shard size " + std::to_string(o.shard_size) + " is not a shard size of " +
                            std::to_string(o.dataset_size) + " samples");
    }
    ledger.stream_ = StepStream(o.dataset_size, o.max_epochs, saved.cursor, std::move(saved.carried));
    const std::int64_t started = ledger.stream_.started_epochs();
    std::vector<std::int64_t> epochs = saved.completed;
    for (const auto& e : saved.open) {
      if (e.done < 0 || e.done >= o.dataset_size) {
        throw CheckpointError("open epoch " + std::to_string(e.epoch) + " has " + std::to_string(e.done) +
                              " done, outside [0, dataset size)");
      }
      epochs.push_back(e.epoch);
    }
    std::sort(epochs.begin(), epochs.end());
    // Open and completed together are exactly the epochs started, each once.
    for (std::size_t i = 0; i < epochs.size(); ++i) {
      if (epochs[i] != static_cast<std::int64_t>(i) || epochs[i] >= started) {
        throw CheckpointError("the open and completed epochs are not each of the " + std::to_string(started) +
                              " epochs the stream started, once");
      }
    }
    if (!std::is_sorted(saved.open.begin(), saved.open.end(),
                        [](const OpenEpoch& a, const OpenEpoch& b) { return a.epoch < b.epoch; })) {
      throw CheckpointError("the open epochs are not in order");
    }
    ledger.open_ = std::move(saved.open);
    ledger.completed_ = std::move(saved.completed);
    ledger.check_identity();
    return ledger;
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string("DDS ledger checkpoint cannot be restored: ") + e.what());
  } catch (const Error& e) {
    throw CheckpointError(std::string("DDS ledger checkpoint is corrupt or truncated: ") + e.what());
  }
}

}  // namespace antdt::dds
