#include "data/evaluate.hpp"

#include <mpi.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "antdt/error.hpp"
#include "transport/guard.hpp"

namespace antdt {

Evaluation evaluate(Model& model, data::Dataset& data, const Communicator& comm, std::int64_t chunk,
                    data::Batch& scratch) {
  if (chunk < 1) throw UsageError("evaluate: the chunk must be at least 1 sample");
  const std::int64_t n = data.size();
  const std::int64_t lo = n * comm.rank() / comm.size(), hi = n * (comm.rank() + 1) / comm.size();
  double sums[3] = {0, 0, 0};  // loss, correct, count
  std::vector<std::int64_t> idx;
  for (std::int64_t start = lo; start < hi; start += chunk) {
    const std::int64_t m = std::min(chunk, hi - start);
    idx.resize(static_cast<std::size_t>(m));
    std::iota(idx.begin(), idx.end(), start);
    scratch.features.resize(static_cast<std::size_t>(m * data.dim()));
    scratch.labels.resize(static_cast<std::size_t>(m));
    data.read(idx, scratch.features.data(), scratch.labels.data());
    const auto r = model.evaluate(scratch.features.data(), scratch.labels.data(), m);
    sums[0] += r.loss_sum;
    sums[1] += static_cast<double>(r.correct);
    sums[2] += static_cast<double>(m);
  }
  detail::allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm.get());
  Evaluation e;
  e.samples = static_cast<std::int64_t>(sums[2]);
  if (sums[2] > 0) {
    e.loss = sums[0] / sums[2];
    e.accuracy = sums[1] / sums[2];
  }
  return e;
}

}  // namespace antdt
