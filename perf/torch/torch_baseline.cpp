// The baseline of perf/torch/torch-bench.sh, and where a step's time goes.
//
// --loop bare (the default): the libtorch step of apps/examples/torch_cnn.cpp with a bare
// MPI_Allreduce of the gradients and nothing of antdt's run (no Job, no DDS, no control
// exchange). The same model, initialisation, data reader, SGD and threads; each rank takes a
// fixed, equal share of every step (rank r the r-th part of the next B samples of the file, in
// order); the gradients lie on one flat buffer as antdt::torch lays them, so the two programs
// differ only in what antdt adds to a step.
//
// --loop antdt: the example's own loop (a Job, the bridge, every antdt option: --policy, ...),
// with the bridge's reduce() taken apart into gather, Job::reduce and scatter so that each is
// timed.
//
// --loop paired: both loops in the same processes, a step of each in turn, each step timed on
// its own; prints the two median step times and their ratio (rank 0's).
//
// --parts: each rank times every part of every step, in wall seconds and in the thread's CPU
// seconds (what the part itself computed, whatever else ran on the core), and rank 0 prints
// each part's median per step for every rank. The parts: next_step (antdt: the end of the last
// step, its control exchange, the start of this one), indices (next_micro_batch; bare: the
// share's indices), zero (the gradients), read (the samples as tensors), compute (forward,
// loss, backward, and the example's loss and accuracy sums), gather, reduce (the all-reduce;
// antdt: Job::reduce), scatter (bare: the division by B), optimizer (SGD's step).
//
//   mpirun -np 2 --bind-to core antdt-bench-torch-baseline --data digits.h5 --global-batch 256
//          --steps 200 --json out.json [--loop antdt|paired --policy static] [--parts]
//
// Prints and writes: steps, samples, the loop's wall seconds, samples per second and the median
// step seconds.
#include <mpi.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <antdt/cli.hpp>
#include <antdt/data.hpp>
#include <antdt/runtime.hpp>
#include <antdt/torch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "torch_cnn_model.hpp"

namespace F = torch::nn::functional;

namespace {

enum Part { next_step, indices, zero, read, compute, gather, reduce, scatter, optimizer, kParts };
constexpr std::array<const char*, kParts> kPartNames = {"next_step", "indices", "zero",    "read",     "compute",
                                                        "gather",    "reduce",  "scatter", "optimizer"};

double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Each step's wall and CPU seconds in each part (a part met several times in a step, such as
// one per micro-batch, adds up), and each step's wall seconds.
class Timers {
 public:
  explicit Timers(bool on) : on_(on) {}
  // Times f() as `part` of the step under way.
  template <class Fn>
  decltype(auto) operator()(Part part, Fn&& f) {
    if (!on_) return f();
    const double w0 = wall_now(), c0 = cpu_now();
    struct Add {
      Timers& t;
      Part p;
      double w0, c0;
      ~Add() {
        t.wall_[p] += wall_now() - w0;
        t.cpu_[p] += cpu_now() - c0;
      }
    } add{*this, part, w0, c0};
    return f();
  }
  // Closes a step that took `seconds` (wall).
  void end_step(double seconds) {
    steps_.push_back(seconds);
    if (!on_) return;
    for (int p = 0; p < kParts; ++p) {
      walls_[p].push_back(wall_[p]);
      cpus_[p].push_back(cpu_[p]);
      wall_[p] = cpu_[p] = 0.0;
    }
  }
  [[nodiscard]] const std::vector<double>& steps() const { return steps_; }

  // Rank 0 prints every rank's medians per step, in milliseconds.
  void print(int rank, int size, const char* loop) const {
    if (!on_) return;
    std::vector<double> mine;
    for (int p = 0; p < kParts; ++p) {
      mine.push_back(median(walls_[p]));
      mine.push_back(median(cpus_[p]));
    }
    mine.push_back(median(steps_));
    std::vector<double> all(rank == 0 ? mine.size() * static_cast<std::size_t>(size) : 0);
    MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
               MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    std::printf("PARTS loop=%s: median ms per step, wall / thread CPU, rank by rank\n", loop);
    for (int p = 0; p <= kParts; ++p) {
      std::printf("PARTS %-10s", p < kParts ? kPartNames[static_cast<std::size_t>(p)] : "step");
      for (int r = 0; r < size; ++r) {
        const double* m = all.data() + static_cast<std::size_t>(r) * mine.size();
        if (p < kParts) {
          std::printf("  r%d %7.3f / %7.3f", r, 1e3 * m[2 * p], 1e3 * m[2 * p + 1]);
        } else {
          std::printf("  r%d %7.3f wall     ", r, 1e3 * m[2 * kParts]);
        }
      }
      std::printf("\n");
    }
  }

 private:
  bool on_;
  std::array<double, kParts> wall_{}, cpu_{};
  std::array<std::vector<double>, kParts> walls_, cpus_;
  std::vector<double> steps_;
};

torch::Tensor loss_sum(Cnn& model, const torch::data::Example<>& b, torch::Tensor* logits = nullptr) {
  auto out = model->forward(b.data);
  if (logits) *logits = out;
  return F::cross_entropy(out, b.target, F::CrossEntropyFuncOptions().reduction(torch::kSum));
}

// One step of the bare loop on `sums` (the flat gradient buffer): the `step`-th B samples of
// the file in order, rank r the r-th equal share, MPI_Allreduce, the division by B, SGD.
struct BareStep {
  antdt::TorchDataset& images;
  std::int64_t n, batch;
  Cnn& model;
  torch::optim::SGD& opt;
  antdt::TorchGradients& gradients;
  std::int64_t share = 0, offset = 0;
  std::vector<std::int64_t> idx;

  BareStep(antdt::TorchDataset& im, std::int64_t n_, std::int64_t b, Cnn& m, torch::optim::SGD& o,
           antdt::TorchGradients& g)
      : images(im), n(n_), batch(b), model(m), opt(o), gradients(g) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    share = batch / size + (rank < batch % size ? 1 : 0);
    offset = rank * (batch / size) + std::min<std::int64_t>(rank, batch % size);
    idx.resize(static_cast<std::size_t>(share));
  }

  void operator()(std::int64_t step, Timers& time) {
    time(indices, [&] {
      for (std::int64_t i = 0; i < share; ++i) idx[static_cast<std::size_t>(i)] = (step * batch + offset + i) % n;
    });
    time(zero, [&] { gradients.zero(); });
    auto b = time(read, [&] { return images.read(idx); });
    time(compute, [&] { loss_sum(model, b).backward(); });
    time(reduce, [&] {
      MPI_Allreduce(MPI_IN_PLACE, gradients.buffer().data_ptr<float>(), static_cast<int>(gradients.numel()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
    });
    time(scatter, [&] { gradients.buffer().mul_(1.0f / static_cast<float>(batch)); });
    time(optimizer, [&] { opt.step(); });
  }
};

// The bare loop: equal fixed shares, MPI_Allreduce, the division by B.
void bare_loop(antdt::TorchDataset& images, std::int64_t n, Cnn& model, torch::optim::SGD& opt, std::int64_t batch,
               std::int64_t steps, Timers& time) {
  antdt::TorchGradients gradients(model->parameters());  // the same flat buffer: no copy
  BareStep bare(images, n, batch, model, opt, gradients);
  MPI_Barrier(MPI_COMM_WORLD);
  double last = wall_now();
  for (std::int64_t step = 0; step < steps; ++step) {
    bare(step, time);
    const double now = wall_now();
    time.end_step(now - last);
    last = now;
  }
}

// The example's micro-batches of the step under way: read, forward, loss, backward, and the
// loss and accuracy sums for the job.
void micro_batches(antdt::Job& job, antdt::TorchDataset& images, Cnn& model, Timers& time) {
  for (auto idx = time(indices, [&] { return job.next_micro_batch(); }); !idx.empty();
       idx = time(indices, [&] { return job.next_micro_batch(); })) {
    auto b = time(read, [&] { return images.read(idx); });
    time(compute, [&] {
      torch::Tensor logits;
      auto loss = loss_sum(model, b, &logits);
      loss.backward();
      job.add_loss(loss.item<double>(), logits.argmax(1).eq(b.target).sum().item<std::int64_t>());
    });
  }
}

// The example's loop (apps/examples/torch_cnn.cpp), the bridge's reduce() in its three parts.
void antdt_loop(antdt::JobOptions options, antdt::TorchDataset& images, Cnn& model, torch::optim::SGD& opt,
                Timers& time) {
  antdt::Job job(options);
  antdt::TorchBridge bridge(job, *model, opt);
  auto& gradients = bridge.gradients();
  double last = 0.0;
  bool first = true;
  while (time(next_step, [&] { return job.next_step(); })) {
    if (first) {  // the first step begins after the job's start-up (the probe, the first plan)
      last = wall_now();
      first = false;
    }
    time(zero, [&] { bridge.zero_grad(); });
    micro_batches(job, images, model, time);
    time(gather, [&] { gradients.gather(); });
    time(reduce, [&] {
      job.reduce(std::span<float>(gradients.buffer().data_ptr<float>(), static_cast<std::size_t>(gradients.numel())));
    });
    time(scatter, [&] { gradients.scatter(); });
    time(optimizer, [&] { opt.step(); });
    const double now = wall_now();
    time.end_step(now - last);
    last = now;
  }
}

// --loop paired: the two loops in the same processes, one step of each in turn (an antdt step,
// then a bare step of the same B on the same model and buffer), each step timed on its own.
// The ratio of the two median step times is then free of what differs from process to process
// (libtorch's compute varies by 20 % between two runs of one program on these machines) and of
// the load's drift, which both loops see alike. `antdt_steps` gets the antdt steps' seconds
// (from next_step() to the end of optimizer.step()), `bare_steps` the bare ones'.
void paired_loop(antdt::JobOptions options, antdt::TorchDataset& images, std::int64_t n, Cnn& model,
                 torch::optim::SGD& opt, std::vector<double>& antdt_steps, std::vector<double>& bare_steps) {
  antdt::Job job(options);
  antdt::TorchBridge bridge(job, *model, opt);
  BareStep bare(images, n, options.session.global_batch, model, opt, bridge.gradients());
  Timers off(false);
  std::int64_t k = 0;
  for (double t0 = wall_now(); job.next_step(); t0 = wall_now()) {
    bridge.zero_grad();
    micro_batches(job, images, model, off);
    bridge.reduce();
    opt.step();
    const double t1 = wall_now();
    if (k > 0) antdt_steps.push_back(t1 - t0);  // the first next_step holds the job's start-up
    bare(k++, off);
    bare_steps.push_back(wall_now() - t1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv, antdt::without_jobs);
  CLI::App app{"The torch_cnn example's step with a bare MPI_Allreduce, or under antdt with timers (perf/torch)",
               "torch-baseline"};
  antdt::JobOptions options;
  options.output.quiet = true;
  options.output.progress = "never";
  options.session.global_batch = 256;
  options.session.max_steps = 200;
  std::string data_path, json_path, loop = "bare";
  std::uint64_t model_seed = 0;
  double lr = 0.05, momentum = 0.9;
  int threads = 1;
  bool parts = false;
  app.add_option("--data", data_path, "Training images (antdt-datagen --kind digits)")->required();
  app.add_option("--loop", loop,
                 "bare: MPI_Allreduce and fixed equal shares; antdt: the example's loop; paired: a step of each "
                 "in turn, in the same processes")
      ->check(CLI::IsMember({"bare", "antdt", "paired"}))
      ->capture_default_str();
  app.add_flag("--parts", parts, "Time each part of each step; rank 0 prints every rank's medians");
  app.add_option("--model-seed", model_seed, "Seed of the model's initial weights (the example's --model-seed)")
      ->capture_default_str();
  app.add_option("--lr", lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", momentum, "SGD momentum")->capture_default_str();
  app.add_option("--threads", threads, "libtorch threads per rank")->capture_default_str();
  app.add_option("--json", json_path, "Write the figures here too (rank 0)");
  antdt::add_job_options(app, options);  // --global-batch, --steps; the rest for --loop antdt
  if (const int code = antdt::parse(app, argc, argv, options); code >= 0) return code;

  return antdt::run_main("torch-baseline", [&] {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    torch::set_num_threads(threads);
    antdt::data::Hdf5Dataset train(data_path);
    antdt::TorchDataset images(train);
    options.session.dataset_size = train.size();
    torch::manual_seed(model_seed);
    Cnn model(train.sample_shape(), train.num_classes());
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
    const std::int64_t batch = options.session.global_batch;
    Timers time(parts);
    if (loop == "paired") {
      std::vector<double> antdt_steps, bare_steps;
      paired_loop(options, images, train.size(), model, optimizer, antdt_steps, bare_steps);
      const double a = median(antdt_steps), b = median(bare_steps);
      if (rank == 0) {
        std::printf(
            "torch paired: %d ranks, B %lld, %zu steps of each, median step antdt %.3f ms, bare %.3f ms, "
            "antdt / bare %.4f\n",
            size, static_cast<long long>(batch), bare_steps.size(), a * 1e3, b * 1e3, a / b);
        if (!json_path.empty()) {
          std::ofstream(json_path) << "{\"ranks\": " << size << ", \"global_batch\": " << batch
                                   << ", \"steps\": " << bare_steps.size() << ", \"antdt_step_seconds\": " << a
                                   << ", \"bare_step_seconds\": " << b << ", \"step_ratio\": " << a / b << "}\n";
        }
      }
      return 0;
    }
    const double start = wall_now();
    if (loop == "bare") {
      bare_loop(images, train.size(), model, optimizer, batch, options.session.max_steps, time);
    } else {
      antdt_loop(options, images, model, optimizer, time);
    }
    const double wall = wall_now() - start;  // bare: the barrier to the last step's end
    const auto steps = static_cast<std::int64_t>(time.steps().size());
    const double step_median = median(time.steps());
    time.print(rank, size, loop.c_str());
    if (rank == 0) {
      const double throughput = static_cast<double>(steps * batch) / wall;
      std::printf("torch %s: %d ranks, B %lld, %lld steps, %.3f s, %.1f samples/s, median step %.3f ms, %s\n",
                  loop.c_str(), size, static_cast<long long>(batch), static_cast<long long>(steps), wall, throughput,
                  step_median * 1e3, antdt::torch_checksum(*model).c_str());
      if (!json_path.empty()) {
        std::ofstream(json_path) << "{\"ranks\": " << size << ", \"global_batch\": " << batch
                                 << ", \"steps\": " << steps << ", \"wall_seconds\": " << wall
                                 << ", \"throughput\": " << throughput << ", \"measured_step_seconds\": " << step_median
                                 << "}\n";
      }
    }
    return 0;
  });
}
