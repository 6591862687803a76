// antdt for libtorch (the C++ API of PyTorch): train a torch::nn::Module with any torch::optim
// optimizer under antdt's Job (docs/torch.md). antdt decides which samples each rank trains on
// each step (dd sizes each rank's share to its speed); the bridge turns the ranks' gradient
// sums into the exact mean over the step's global batch, in every parameter's .grad(), and puts
// the model and the optimizer into antdt's checkpoints.
//
//   antdt::Job job(options);
//   antdt::TorchBridge bridge(job, *model, optimizer);       // before the first next_step
//   antdt::TorchDataset data(train);                         // an antdt data set as tensors
//   while (job.next_step()) {
//     bridge.zero_grad();
//     for (auto idx = job.next_micro_batch(); !idx.empty(); idx = job.next_micro_batch()) {
//       auto batch = data.read(idx);
//       auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target,
//           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));  // a SUM
//       loss.backward();
//       job.add_loss(loss.item<double>());
//     }
//     bridge.reduce();                                       // .grad() = mean over the step's B
//     optimizer.step();
//   }
//
// The loss must be a sum over the samples (reduction kSum). A mean over a micro-batch of n
// samples becomes one with loss * n: with uneven per-rank batches, per-rank means weigh a
// sample of a small batch more than one of a large batch.
//
// Gradients: every float32 parameter's .grad() is a tensor on one flat float32 buffer (not an
// autograd view: zero_grad may detach it), so backward accumulates straight into the buffer
// that is reduced, in place. float16 and bfloat16 gradients are reduced in float32: copied in
// before the reduction, the mean cast back after. float64 parameters are refused. CPU tensors
// are reduced through MPI (Job::reduce); CUDA tensors in GPU memory (Job::reduce_device: NCCL
// where every rank has a GPU of its own, else MPI through the host), divided on the GPU.
#pragma once

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/data/transforms/stack.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "antdt/data.hpp"

namespace antdt {

class Job;

// The gradients of some parameters on one flat float32 buffer, for a program that reduces them
// itself (Job::reduce on buffer()); TorchBridge uses it. Local: no collective call.
class TorchGradients {
 public:
  // The parameters that require a gradient, in this order, all on one device. UsageError for
  // float64 or non-floating parameters, or parameters on different devices.
  explicit TorchGradients(std::vector<::torch::Tensor> parameters);
  ~TorchGradients();
  TorchGradients(const TorchGradients&) = delete;
  TorchGradients& operator=(const TorchGradients&) = delete;

  // Zeroes every gradient, as optimizer.zero_grad() would, and puts back a float32
  // parameter's .grad() on the buffer where something replaced or removed it
  // (zero_grad(set_to_none), an assignment).
  void zero();
  // Before the reduction: the buffer then holds every parameter's gradient. A float32
  // gradient that is no longer on the buffer is copied in and put back on it; a float16 or
  // bfloat16 one is copied in, in float32; an undefined one counts as zero.
  void gather();
  // After the reduction: float16 and bfloat16 gradients get the buffer's values.
  void scatter();

  // The buffer: numel() float32 values, the parameters' gradients one after another.
  [[nodiscard]] const ::torch::Tensor& buffer() const noexcept;
  [[nodiscard]] std::int64_t numel() const noexcept;
  [[nodiscard]] bool on_cuda() const noexcept;
  // How many parameters' gradients are staged (float16, bfloat16) rather than on the buffer.
  [[nodiscard]] std::int64_t staged() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An optimizer's state (each parameter's moments and step count, each group's options, a
// learning rate a scheduler changed) as bytes, and back. SGD, Adam, AdamW, Adagrad and RMSprop
// are written field by field, by the parameters' positions in the optimizer's groups: the same
// state gives the same bytes in any process. Other optimizers (LBFGS, your own) go through
// torch::save, which restores them exactly too but whose bytes hold addresses. The optimizer
// loaded into must have the same groups of parameters of the same shapes: UsageError otherwise.
[[nodiscard]] std::vector<std::byte> save_optimizer_state(::torch::optim::Optimizer& optimizer);
void load_optimizer_state(::torch::optim::Optimizer& optimizer, std::span<const std::byte> bytes);

// FNV-1a 64 over the bytes of every parameter and buffer of `model` (16 hex digits): equal
// strings, bit-identical models.
[[nodiscard]] std::string torch_checksum(const ::torch::nn::Module& model);

struct TorchBridgeOptions {
  // Names in the checkpoint: <prefix>/parameters/<name>, <prefix>/buffers/<name>,
  // <prefix>/optimizer and <prefix>/layout (the names, shapes and types, checked on resume).
  std::string state_prefix = "torch";
  // At construction every rank takes rank 0's parameters and buffers, so that ranks start
  // equal even when their random initialisations differ.
  bool broadcast_initial = true;
};

// The bridge between a model, its optimizer and a Job. Every call is made by every rank.
class TorchBridge {
 public:
  // Collective, before the job's first next_step(). Lays the gradients of the model's
  // parameters on one buffer (TorchGradients), registers the parameters, buffers and the
  // optimizer's state with the job's checkpoints (Job::add_state: a --resume loads them on
  // any number of ranks) and, unless told not to, broadcasts rank 0's parameters. The
  // optimizer must optimise parameters of `model` only (UsageError otherwise). Both must
  // outlive the bridge, and keep their parameters (a model moved to another device after
  // this leaves the buffer behind).
  TorchBridge(Job& job, ::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
              TorchBridgeOptions options = {});
  ~TorchBridge();
  TorchBridge(const TorchBridge&) = delete;
  TorchBridge& operator=(const TorchBridge&) = delete;

  // Local: zeroes the gradients before a step's first backward (optimizer.zero_grad() and
  // model.zero_grad(), with or without set_to_none, are safe too).
  void zero_grad();
  // Collective, after the step's last backward: sums every rank's gradient sums and divides
  // by the step's sample count B, exact at any split, so that each .grad() holds the mean
  // over the step's global batch. Returns B.
  std::int64_t reduce();
  // reduce(), then optimizer.step(). Returns B.
  std::int64_t step();

  [[nodiscard]] TorchGradients& gradients() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An antdt data set (an antdt-datagen HDF5 file through data::Hdf5Dataset, or one in memory)
// as tensors: a sample's features in the data set's sample shape ([C, H, W] for images), its
// label an int64. It is also a torch::data dataset (get, size), so torch's DataLoader and
// transforms take it. It reads through `data`, which must outlive it; not thread-safe (one
// per thread, as data::Dataset).
class TorchDataset : public ::torch::data::datasets::Dataset<TorchDataset> {
 public:
  // `shape`: one sample's shape, whose product is data.dim(); empty: the data set's own
  // (data::Dataset::sample_shape), or [dim] when it has none. UsageError otherwise.
  explicit TorchDataset(data::Dataset& data, std::vector<std::int64_t> shape = {},
                        ::torch::Device device = ::torch::kCPU);

  // The samples `indices`, in that order, in one read: data [n, shape...] float32, target
  // [n] int64, on the device.
  [[nodiscard]] ::torch::data::Example<> read(std::span<const std::int64_t> indices);
  ::torch::data::Example<> get(std::size_t index) override;
  [[nodiscard]] ::torch::optional<std::size_t> size() const override;

  [[nodiscard]] const std::vector<std::int64_t>& sample_shape() const noexcept { return shape_; }
  [[nodiscard]] std::int32_t num_classes() const noexcept { return data_->num_classes(); }

 private:
  data::Dataset* data_;
  std::vector<std::int64_t> shape_;
  ::torch::Device device_;
  std::vector<std::int32_t> labels_;  // scratch of read()
};

// The samples `indices` of any torch::data dataset (your own, a map of one), stacked into one
// batch: what the data hook needs when your data are not an antdt data set.
template <class TorchData>
auto read_batch(TorchData& dataset, std::span<const std::int64_t> indices) {
  std::vector<std::size_t> request(indices.begin(), indices.end());
  return ::torch::data::transforms::Stack<>().apply_batch(dataset.get_batch(request));
}

}  // namespace antdt
