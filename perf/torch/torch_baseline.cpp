// The baseline of perf/torch/torch-bench.sh: the libtorch step of apps/examples/torch_cnn.cpp
// with a bare MPI_Allreduce of the gradients and nothing of antdt's run (no Job, no DDS, no
// control exchange). The same model, initialisation, data reader, SGD and threads; each rank
// takes a fixed, equal share of every step (rank r the r-th part of the next B samples of the
// file, in order); the gradients lie on one flat buffer as antdt::torch lays them, so the two
// programs differ only in what antdt adds to a step.
//
//   mpirun -np 2 --bind-to core antdt-bench-torch-baseline --data digits.h5 --global-batch 256
//          --steps 200 --json out.json
//
// Prints and writes: steps, samples, the loop's wall seconds, samples per second and the median
// step seconds.
#include <mpi.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <antdt/data.hpp>
#include <antdt/runtime.hpp>
#include <antdt/torch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "torch_cnn_model.hpp"

namespace F = torch::nn::functional;

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  CLI::App app{"The torch_cnn example's step with a bare MPI_Allreduce (perf/torch)"};
  std::string data_path, json_path;
  std::int64_t batch = 256, steps = 200;
  std::uint64_t seed = 0;
  double lr = 0.05, momentum = 0.9;
  int threads = 1;
  app.add_option("--data", data_path, "Training images (antdt-datagen --kind digits)")->required();
  app.add_option("--global-batch", batch, "Samples per step over all ranks")->capture_default_str();
  app.add_option("--steps", steps, "Steps to run")->capture_default_str();
  app.add_option("--seed", seed, "Initialisation seed (the example's --seed)")->capture_default_str();
  app.add_option("--lr", lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", momentum, "SGD momentum")->capture_default_str();
  app.add_option("--threads", threads, "libtorch threads per rank")->capture_default_str();
  app.add_option("--json", json_path, "Write the figures here too (rank 0)");
  CLI11_PARSE(app, argc, argv);

  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  torch::set_num_threads(threads);
  antdt::data::Hdf5Dataset train(data_path);
  antdt::TorchDataset images(train);
  torch::manual_seed(seed);
  Cnn model(train.sample_shape(), train.num_classes());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  antdt::TorchGradients gradients(model->parameters());  // the same flat buffer: no copy
  float* sums = gradients.buffer().data_ptr<float>();

  const std::int64_t n = train.size();
  const std::int64_t share = batch / size + (rank < batch % size ? 1 : 0);
  const std::int64_t offset = rank * (batch / size) + std::min<std::int64_t>(rank, batch % size);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(share));
  std::vector<double> step_seconds;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  for (std::int64_t step = 0; step < steps; ++step) {
    for (std::int64_t i = 0; i < share; ++i) idx[static_cast<std::size_t>(i)] = (step * batch + offset + i) % n;
    gradients.zero();
    auto b = images.read(idx);
    F::cross_entropy(model->forward(b.data), b.target, F::CrossEntropyFuncOptions().reduction(torch::kSum)).backward();
    MPI_Allreduce(MPI_IN_PLACE, sums, static_cast<int>(gradients.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    gradients.buffer().mul_(1.0f / static_cast<float>(batch));
    optimizer.step();
    const auto now = std::chrono::steady_clock::now();
    step_seconds.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  }
  const double wall = std::chrono::duration<double>(last - start).count();
  std::nth_element(step_seconds.begin(), step_seconds.begin() + static_cast<std::ptrdiff_t>(step_seconds.size() / 2),
                   step_seconds.end());
  const double median = step_seconds.empty() ? 0.0 : step_seconds[step_seconds.size() / 2];
  if (rank == 0) {
    const double throughput = static_cast<double>(steps * batch) / wall;
    std::printf("torch baseline: %d ranks, B %lld, %lld steps, %.3f s, %.1f samples/s, median step %.3f ms, %s\n", size,
                static_cast<long long>(batch), static_cast<long long>(steps), wall, throughput, median * 1e3,
                antdt::torch_checksum(*model).c_str());
    if (!json_path.empty()) {
      std::ofstream(json_path) << "{\"ranks\": " << size << ", \"global_batch\": " << batch << ", \"steps\": " << steps
                               << ", \"wall_seconds\": " << wall << ", \"throughput\": " << throughput
                               << ", \"measured_step_seconds\": " << median << "}\n";
    }
  }
  return 0;
}
