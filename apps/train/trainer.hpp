// antdt-train's step: the built-in MLP on a Job. Everything about the run's life (checkpoints,
// resume, signals, outputs, the report) is the Job's; this is the model's side of a step: read
// the samples (ahead, on a GPU), accumulate the micro-batches, reduce the fused buffer (on the
// GPU: overlapped with backward), check it, update.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/job.hpp"
#include "comm/reduce.hpp"
#include "data/evaluate.hpp"
#include "data/read_ahead.hpp"
#include "model/model.hpp"
#include "runtime/device.hpp"
#include "session/session.hpp"
#include "train/options.hpp"

namespace antdt::train {

struct Data {
  std::unique_ptr<data::Dataset> train;
  std::unique_ptr<data::Dataset> eval;  // null without --eval-data
  std::int64_t dropped = 0;             // samples of --data left out for a non-finite feature
  std::int64_t eval_dropped = 0;        // the same of --eval-data
};

// Each step's gradient reduction, and whether it overlaps the backward pass (docs/compute.md
// has the measurements behind auto). Every rank decides alike: same flags, same reducer.
struct Reduction {
  std::unique_ptr<GradientReducer> reducer;
  std::vector<GradientBucket> buckets;
  bool overlap = false;
};

struct Trainer {
  const TrainOptions& o;
  Job& job;
  Session& session;
  Model& model;
  Data& data;
  Reduction& reduction;
  const DeviceInfo& device;
  const std::vector<std::int64_t>& layers;
  std::int64_t cap;
  // Batch buffers, page-locked on a GPU. Reserved for an even share now; they grow (rarely,
  // geometrically) when the Controller gives this rank more.
  data::Batch batch{o.pin_memory && device.backend == Backend::cuda};
  // Reads each step's samples; with --read-ahead also the next step's while this one computes
  // (docs/data.md). It is gone (its read waited for) before the data sets close.
  data::ReadAhead ahead{*data.train, o.pin_memory&& device.backend == Backend::cuda};
  bool read_ahead = !policy_pools(o.job.session.controller.policy) &&  // a pooled step's samples come as it goes
                    (o.read_ahead == "on" ||
                     (o.read_ahead == "auto" && device.backend == Backend::cuda && o.read_mode == "independent"));
  std::optional<Evaluation> eval_result{};
  std::int64_t rows_ahead = 0, rows_now = 0;  // over all ranks, at the end

  bool root() const { return session.rank() == 0; }
  void reserve_batch();
  // The model and the read-ahead as the Job needs them: checkpointed, probed, evaluated, reported.
  void attach();
  // One step's compute, reduction and update (the Job began it and will end it).
  void step();
  // A pooled step's compute (nd): claim, read and accumulate micro-chunks until the pool is empty.
  BatchResult pooled_compute();
  // A non-finite reduced gradient, found alike on every rank: every rank stops (exit 4) before
  // this step updates anything; one small all-reduce finds the ranks whose own loss was not finite.
  [[noreturn]] void stop_non_finite(double local_loss);
  void report(RunSummary& sum) const;
};

}  // namespace antdt::train
