// The model's part of a checkpoint, written by rank 0 and handed to every rank on restore.
#include <mpi.h>

#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"
#include "model/model.hpp"
#include "transport/collectives.hpp"
#include "transport/comm.hpp"

namespace antdt {

void save_model_state(CheckpointWriter& writer, const Model& model) {
  writer.put_floats("model/parameters", model.parameters());
  writer.put_floats("model/optimizer_state", model.optimizer_state());
  writer.put_int64("model/optimizer_steps", model.optimizer_steps());
}

void restore_model_state(const CheckpointReader* reader, Model& model, const Communicator& comm) {
  std::vector<float> params, state;
  std::vector<std::int64_t> steps(1, 0);
  std::vector<char> error;
  if (comm.is_root() && !reader) {  // rank 0's own state to every rank (a rank that rejoins)
    params = model.parameters();
    state = model.optimizer_state();
    steps[0] = model.optimizer_steps();
  } else if (comm.is_root()) {
    try {
      params = reader->floats("model/parameters", model.parameter_count());
      state = reader->floats("model/optimizer_state", static_cast<std::int64_t>(model.optimizer_state().size()));
      steps[0] = reader->int64("model/optimizer_steps");
    } catch (const Error& e) {
      const std::string what = e.what();
      error.assign(what.begin(), what.end());
    }
  }
  error = detail::broadcast_vector(comm, std::move(error), MPI_CHAR);
  if (!error.empty()) {
    if (comm.is_root()) throw CheckpointError(std::string(error.begin(), error.end()));
    throw CheckpointError("restoring the model failed on rank 0 (see its message)");
  }
  params = detail::broadcast_vector(comm, std::move(params), MPI_FLOAT);
  state = detail::broadcast_vector(comm, std::move(state), MPI_FLOAT);
  steps = detail::broadcast_vector(comm, std::move(steps), MPI_INT64_T);
  model.set_parameters(params);
  model.set_optimizer_state(state);
  model.set_optimizer_steps(steps[0]);
}

}  // namespace antdt
