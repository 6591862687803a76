// Evaluation of a model on a held-out data set: every rank runs forward passes over its own
// contiguous slice, and the sums are added up over the ranks.
#pragma once

#include <cstdint>

#include "antdt/data.hpp"
#include "data/read_ahead.hpp"
#include "model/model.hpp"
#include "transport/comm.hpp"

namespace antdt {

struct Evaluation {
  double loss = 0.0;      // mean cross-entropy over the samples
  double accuracy = 0.0;  // fraction whose arg-max class is the label
  std::int64_t samples = 0;
};

// Collective over `comm`: `chunk` (>= 1) samples per forward pass; `scratch` holds each
// chunk (a training batch's buffers will do: no second page-locked buffer is allocated).
// Touches no gradient. Errors of the data set's reads propagate (FileError).
[[nodiscard]] Evaluation evaluate(Model& model, data::Dataset& data, const Communicator& comm, std::int64_t chunk,
                                  data::Batch& scratch);

}  // namespace antdt
