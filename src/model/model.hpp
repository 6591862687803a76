// The trainable model antdt reduces gradients for: an MLP classifier (ReLU hidden layers,
// softmax cross-entropy, SGD with momentum or Adam) on the host (BLAS + Kokkos) or on a CUDA
// device (cuBLAS + CUDA kernels). docs/compute.md describes the maths and the invariants.
//
// Threading: a Model is used by one thread at a time. On CUDA every call is issued on the
// model's own stream; accumulate/evaluate return after their results are on the host, and
// apply_update returns at once, its update queued (later calls on the model see it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "comm/sample_count.hpp"
#include "core/plan_rules.hpp"
#include "runtime/device.hpp"

namespace antdt {

class CheckpointWriter;
class CheckpointReader;
class Communicator;

enum class OptimizerKind { sgd, adam };

struct MlpConfig {
  std::vector<std::int64_t> layers;  // {input_dim, hidden..., num_classes}; at least 2 entries, all >= 1
  OptimizerKind optimizer = OptimizerKind::sgd;
  // SGD: v = momentum*v + g; p -= lr*v (PyTorch's convention, no dampening).
  // Adam: bias-corrected moments, p -= lr * m_hat / (sqrt(v_hat) + epsilon).
  // weight_decay is L2 added to the mean gradient (g += weight_decay * p) for both.
  float learning_rate = 0.05f, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 0.0f;
  std::uint64_t seed = 1;  // parameter init (same on every rank and backend: init on host, then copy)
};

// "sgd" | "adam"; UsageError otherwise.
[[nodiscard]] OptimizerKind parse_optimizer(std::string_view text);
// "32,64,64,10" -> {32,64,64,10}; UsageError for fewer than 2 entries, a non-positive or
// non-numeric entry.
[[nodiscard]] std::vector<std::int64_t> parse_layers(std::string_view text);

// A range [offset, offset + count) of a model's gradient buffer.
struct GradientBucket {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

// Receives a step's gradient buffer bucket by bucket while Model::accumulate_overlapped runs
// its backward pass, so that a reduction can start on the layers already finished while the
// others compute (GradientReducer::begin_overlapped in reduce.hpp is the one antdt provides).
// All calls come on the thread that called accumulate_overlapped.
class GradientListener {
 public:
  virtual ~GradientListener() = default;
  // Host memory of gradient_count() floats. A model whose buffer is device memory copies each
  // finished bucket to the same offset there before ready(); nullptr for no copies (a host
  // model's buffer is read in place, and host models ignore this).
  [[nodiscard]] virtual float* host_copy() = 0;
  // Bucket `index` of Model::gradient_buckets() holds its final sums for this call (and,
  // with host_copy(), is copied there). Called once per bucket, in bucket order.
  virtual void ready(std::size_t index) = 0;
  // Called repeatedly while the model waits for its device between buckets, and between a
  // host model's layers: the place to progress non-blocking communication.
  virtual void poll() = 0;
};

struct BatchResult {
  double loss_sum = 0;       // summed (not averaged) cross-entropy over the samples
  std::int64_t correct = 0;  // samples whose arg-max class equals the label
  std::int64_t samples = 0;
  double device_seconds = 0;  // compute time: CUDA events on a GPU, wall clock on the host
};

// A model whose gradients antdt reduces. All pointers given to it are HOST pointers:
// features are row-major [n][input_dim] floats, labels are class indices in [0, num_classes).
//
// Gradient buffer layout: gradient_count() = parameter_count() + kSampleCountSlots floats:
// the gradient SUMS over every sample accumulated since zero_gradients(), then the number of
// samples accumulated, in kSampleCountSlots (11) slots as base-16 digits
// (src/comm/sample_count.hpp: encode_sample_count, decode_sample_count, add_sample_count). The
// reducer sums the whole buffer across ranks in place, one collective, and the digit slots keep
// the summed count exact for any count below 2^63 on up to 1,118,481 ranks (a single float slot
// was exact only to 2^24 = 16.7M samples per step). apply_update() then divides by the decoded
// count B (no-op when B == 0, the step counter included) and runs the optimizer. apply_update
// does not clear the buffer. On CUDA the buffer is device memory; on the host, host memory. A
// model of your own writes its count with encode_sample_count (or add_sample_count per
// micro-batch) after zeroing, and reads B with decode_sample_count after the reduction.
//
// Parameter layout (parameters(), the gradient buffer, each optimizer-state block): for each
// layer l in order, W_l row-major [out_l][in_l], then b_l [out_l].
class Model {
 public:
  virtual ~Model() = default;
  [[nodiscard]] virtual Backend backend() const = 0;
  [[nodiscard]] virtual std::int64_t parameter_count() const = 0;
  [[nodiscard]] virtual std::int64_t input_dim() const = 0;
  [[nodiscard]] virtual std::int64_t num_classes() const = 0;
  virtual void zero_gradients() = 0;
  // Adds the gradient sums of n samples (n >= 0; 0 is a no-op) to the buffer.
  virtual BatchResult accumulate(const float* features, const std::int32_t* labels, std::int64_t n) = 0;
  // accumulate(), telling `listener` about each bucket of gradient_buckets() as soon as it is
  // final. Meant for a step's LAST accumulate (earlier micro-batches' sums are not final). For
  // n == 0 nothing is reported. The default runs accumulate(), copies the whole buffer to
  // listener.host_copy() (when not null) and reports every bucket: correct, with no overlap.
  virtual BatchResult accumulate_overlapped(const float* features, const std::int32_t* labels, std::int64_t n,
                                            GradientListener& listener);
  // The buckets in the order a backward pass finishes them: disjoint, together the whole
  // buffer (count slots included). Default: one bucket, the whole buffer. The MLP: one per
  // layer, last layer first, the count slots with it.
  [[nodiscard]] virtual std::vector<GradientBucket> gradient_buckets() const;
  // Forward only; touches no gradient.
  virtual BatchResult evaluate(const float* features, const std::int32_t* labels, std::int64_t n) = 0;
  [[nodiscard]] virtual float* gradient_buffer() = 0;
  [[nodiscard]] virtual std::int64_t gradient_count() const = 0;
  // True when every float of the gradient buffer (the sums and the count slot) is finite.
  // Meant for right after the reduction, before apply_update: the reduced buffer is the same on
  // every rank, so every rank decides alike without another message. Waits for queued work.
  // Default: gradient_snapshot() and a loop. The MLPs check in place: a loop on the host; on
  // CUDA a kernel, then one 4-byte copy back.
  [[nodiscard]] virtual bool gradients_finite();
  virtual void apply_update() = 0;
  virtual void synchronize() = 0;                                   // wait for queued device work (host: no-op)
  [[nodiscard]] virtual std::vector<float> parameters() const = 0;  // host copy, flat, fixed layer order
  virtual void set_parameters(std::span<const float> values) = 0;   // UsageError on size mismatch
  // SGD: the momentum buffer (parameter_count floats). Adam: first moments, then second
  // moments (2 * parameter_count floats). set_optimizer_state: UsageError on size mismatch.
  [[nodiscard]] virtual std::vector<float> optimizer_state() const = 0;
  virtual void set_optimizer_state(std::span<const float> values) = 0;
  [[nodiscard]] virtual std::int64_t optimizer_steps() const = 0;  // Adam's t; restored with set_optimizer_steps
  virtual void set_optimizer_steps(std::int64_t steps) = 0;
  [[nodiscard]] virtual std::int64_t bytes_per_sample() const = 0;  // activations+staging per sample in a micro-batch
  [[nodiscard]] virtual std::int64_t fixed_bytes() const = 0;       // params, grads, optimizer state, workspace
};

// Host or CUDA by device.backend. Parameters are initialised on the host from config.seed
// (He-uniform weights, zero biases) and copied, so every rank and backend starts equal.
// UsageError for a bad config; DeviceError when CUDA is asked for but not built.
[[nodiscard]] std::unique_ptr<Model> make_mlp(const MlpConfig& config, const DeviceInfo& device);

// The host "free memory" when DeviceInfo::free_memory is 0 on a host device. A caller that
// wants another host budget sets DeviceInfo::free_memory before calling micro_batch_cap.
inline constexpr std::size_t kDefaultHostMemoryBudget = std::size_t{1} << 30;

// Largest micro-batch that fits in `fraction` of free memory (device: DeviceInfo::free_memory;
// host: free_memory when set, else kDefaultHostMemoryBudget) after fixed_bytes(), clamped to
// [1, hard_max]. Reported at startup by the caller.
[[nodiscard]] std::int64_t micro_batch_cap(const Model& model, const DeviceInfo& device, double fraction = 0.8,
                                           std::int64_t hard_max = 1 << 20);

// ceil(n / cap): the accumulation micro-steps a share of n samples needs (0 for n == 0).
[[nodiscard]] std::int64_t micro_steps(std::int64_t n, std::int64_t cap);

// Accumulates consecutive micro-batches of the given sizes (StepWork::micro_batches) from
// `features`/`labels`; the sums in the gradient buffer equal one accumulate() of all of them up
// to float summation order. Results are added up (device_seconds too). With a listener, the
// last micro-batch runs accumulate_overlapped(..., *listener).
BatchResult accumulate_micro_batches(Model& model, const float* features, const std::int32_t* labels,
                                     std::span<const std::int64_t> sizes, GradientListener* listener = nullptr);
// The same for n samples split by the plan's rule: split_micro_batches(n, cap), micro_steps(n, cap)
// near-equal micro-batches of at most `cap` samples.
BatchResult accumulate_micro_batches(Model& model, const float* features, const std::int32_t* labels, std::int64_t n,
                                     std::int64_t cap, GradientListener* listener = nullptr);

// The model's checkpoint form: its parameters, optimizer state and optimizer step count under
// "model/" (model/parameters, model/optimizer_state, model/optimizer_steps). Rank 0 writes;
// call it on rank 0 beside Session::save.
void save_model_state(CheckpointWriter& writer, const Model& model);
// Collective over `comm`: rank 0 reads "model/" from `reader` (dereferenced there only) and
// every rank's model takes the same state. When rank 0 cannot (a checkpoint of another model
// size, say), every rank throws CheckpointError; rank 0's names the file and the entry.
// With no reader on rank 0, rank 0's own state goes to every rank (a rank that rejoins).
void restore_model_state(const CheckpointReader* reader, Model& model, const Communicator& comm);

// A host copy of the whole gradient buffer (sums + count slots), wherever it lives. Synchronises.
[[nodiscard]] std::vector<float> gradient_snapshot(Model& model);

}  // namespace antdt
