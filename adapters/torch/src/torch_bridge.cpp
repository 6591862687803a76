// antdt::torch (docs/torch.md): the flat gradient buffer, the optimizer's state as bytes, the
// bridge to the Job and the data set as tensors. One translation unit on purpose: each file
// that includes libtorch's headers costs about half a minute to compile.
#include "antdt/torch.hpp"

#include <c10/util/string_utils.h>
#include <mpi.h>
#include <torch/cuda.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "antdt/error.hpp"
#include "antdt/job.hpp"
#include "antdt/report.hpp"

namespace antdt {
namespace {

std::string shape_text(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
  return s + "]";
}

// libtorch's messages carry a stack trace after the first line.
std::string first_line(const char* what) {
  const std::string s(what);
  return s.substr(0, s.find('\n'));
}

std::string describe(const ::torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " " + shape_text(t.sizes());
}

// A tensor's bytes in its logical (row-major) order, from host memory.
::torch::Tensor host_contiguous(const ::torch::Tensor& t) { return t.detach().to(::torch::kCPU).contiguous(); }

std::vector<std::byte> tensor_bytes(const ::torch::Tensor& t) {
  const ::torch::Tensor host = host_contiguous(t);
  const auto* first = static_cast<const std::byte*>(host.data_ptr());
  return {first, first + host.nbytes()};
}

}  // namespace

// ---------------------------------------------------------------------------------------
// TorchGradients. Each float32 parameter's .grad() is a tensor made with set_() on the flat
// buffer's storage at the parameter's offset: backward's AccumulateGrad adds into a defined
// gradient in place, so the sums land in the buffer that is reduced. Not narrow()/view(): an
// autograd view cannot be detached in place, and torch::optim::Optimizer::zero_grad() calls
// detach_() on every gradient (libtorch 1.13: "Can't detach views in-place").
// ---------------------------------------------------------------------------------------
struct TorchGradients::Impl {
  struct Slot {
    ::torch::Tensor parameter;
    std::int64_t offset = 0;
    bool staged = false;        // float16 / bfloat16: copied in and out around the reduction
    ::torch::Tensor on_buffer;  // float32: the gradient tensor on the buffer
  };
  ::torch::Tensor buffer;
  std::vector<Slot> slots;
  std::int64_t staged = 0;

  [[nodiscard]] bool is_on_buffer(const Slot& s) const {
    const ::torch::Tensor& g = s.parameter.grad();
    return g.defined() && g.scalar_type() == ::torch::kFloat && g.device() == buffer.device() &&
           g.data_ptr() == s.on_buffer.data_ptr() && g.sizes() == s.on_buffer.sizes() &&
           g.strides() == s.on_buffer.strides();
  }
  ::torch::Tensor flat_slice(const Slot& s) const { return buffer.narrow(0, s.offset, s.parameter.numel()); }
};

TorchGradients::TorchGradients(std::vector<::torch::Tensor> parameters) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  std::int64_t total = 0;
  std::optional<::torch::Device> device;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const ::torch::Tensor& p = parameters[i];
    const auto type = p.scalar_type();
    if (type == ::torch::kDouble) {
      throw UsageError("antdt reduces gradients in float32, and parameter " + std::to_string(i) + " (" + describe(p) +
                       ") is float64: convert the model with model->to(torch::kFloat32)");
    }
    if (type != ::torch::kFloat && type != ::torch::kHalf && type != ::torch::kBFloat16) {
      throw UsageError("parameter " + std::to_string(i) + " (" + describe(p) +
                       ") is not a float32, float16 or bfloat16 tensor: antdt cannot reduce its gradient");
    }
    if (device && p.device() != *device) {
      throw UsageError("the parameters are on " + device->str() + " and " + p.device().str() +
                       ": put the whole model on one device before the bridge is made");
    }
    device = p.device();
    Impl::Slot slot;
    slot.parameter = p;
    slot.offset = total;
    slot.staged = type != ::torch::kFloat;
    m.staged += slot.staged ? 1 : 0;
    m.slots.push_back(std::move(slot));
    total += p.numel();
  }
  m.buffer = ::torch::zeros({total}, ::torch::TensorOptions(::torch::kFloat).device(device.value_or(::torch::kCPU)));
  ::torch::NoGradGuard no_grad;
  for (auto& s : m.slots) {
    if (s.staged) continue;
    const ::torch::Tensor& p = s.parameter;
    // The parameter's own layout where it is dense (channels-last, say), so that
    // AccumulateGrad's layout contract holds; row-major otherwise.
    const c10::DimVector strides =
        p.is_non_overlapping_and_dense() ? c10::DimVector(p.strides()) : c10::contiguous_strides(p.sizes());
    s.on_buffer = ::torch::empty({0}, m.buffer.options());
    s.on_buffer.set_(m.buffer.storage(), s.offset, p.sizes(), strides);
    if (p.grad().defined()) s.on_buffer.copy_(p.grad());
    s.parameter.mutable_grad() = s.on_buffer;
  }
}

TorchGradients::~TorchGradients() = default;

void TorchGradients::zero() {
  auto& m = *impl_;
  ::torch::NoGradGuard no_grad;
  for (auto& s : m.slots) {
    if (!s.staged && !m.is_on_buffer(s)) {
      s.parameter.mutable_grad() = s.on_buffer;
    } else if (s.staged && s.parameter.grad().defined()) {
      s.parameter.mutable_grad().zero_();
    }
  }
  m.buffer.zero_();
}

void TorchGradients::gather() {
  auto& m = *impl_;
  ::torch::NoGradGuard no_grad;
  for (auto& s : m.slots) {
    const ::torch::Tensor& g = s.parameter.grad();
    if (!s.staged) {
      if (m.is_on_buffer(s)) continue;
      if (g.defined()) {
        s.on_buffer.copy_(g);
      } else {
        s.on_buffer.zero_();  // unused this step on this rank: a zero gradient sum
      }
      s.parameter.mutable_grad() = s.on_buffer;
    } else if (g.defined()) {
      m.flat_slice(s).copy_(g.reshape({-1}));
    } else {
      m.flat_slice(s).zero_();
    }
  }
}

void TorchGradients::scatter() {
  auto& m = *impl_;
  if (m.staged == 0) return;
  ::torch::NoGradGuard no_grad;
  for (auto& s : m.slots) {
    if (!s.staged) continue;
    if (!s.parameter.grad().defined()) s.parameter.mutable_grad() = ::torch::empty_like(s.parameter);
    s.parameter.mutable_grad().copy_(m.flat_slice(s).view(s.parameter.sizes()));
  }
}

const ::torch::Tensor& TorchGradients::buffer() const noexcept { return impl_->buffer; }
std::int64_t TorchGradients::numel() const noexcept { return impl_->buffer.numel(); }
bool TorchGradients::on_cuda() const noexcept { return impl_->buffer.is_cuda(); }
std::int64_t TorchGradients::staged() const noexcept { return impl_->staged; }

// ---------------------------------------------------------------------------------------
// The optimizer's state as bytes. One field list per optimizer, walked by both the writer and
// the reader (so the two cannot drift), in the order of the optimizer's groups and their
// parameters: no addresses (libtorch keys its state by the parameter's TensorImpl address,
// and torch::save writes those keys), no hash-map order. Layout, host byte order:
//   "antdt-torch-optimizer" u32 version, string kind
//   kind "torch-save":  u64 n, n bytes of torch::save
//   otherwise:          u64 groups; per group: its option fields, u64 params; per parameter:
//                       u8 has_state [state fields]
//   fields: double f64, bool u8, int64 i64, tensor: u8 defined [i8 type, u64 ndim, i64
//           sizes..., its bytes in row-major order]
// ---------------------------------------------------------------------------------------
namespace {

constexpr std::string_view kOptimizerMagic = "antdt-torch-optimizer";
constexpr std::uint32_t kOptimizerVersion = 1;

class StateWriter {
 public:
  explicit StateWriter(std::vector<std::byte>& out) : out_(out) {}
  template <class T>
  void raw(const T& v) {
    const auto* b = reinterpret_cast<const std::byte*>(&v);
    out_.insert(out_.end(), b, b + sizeof(T));
  }
  void bytes(const void* data, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(data);
    out_.insert(out_.end(), b, b + n);
  }
  void text(std::string_view s) {
    raw(static_cast<std::uint64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void operator()(double& v) { raw(v); }
  void operator()(bool& v) { raw(static_cast<std::uint8_t>(v ? 1 : 0)); }
  void operator()(std::int64_t& v) { raw(v); }
  void operator()(::torch::Tensor& t) {
    raw(static_cast<std::uint8_t>(t.defined() ? 1 : 0));
    if (!t.defined()) return;
    const ::torch::Tensor host = host_contiguous(t);
    raw(static_cast<std::int8_t>(host.scalar_type()));
    raw(static_cast<std::uint64_t>(host.dim()));
    for (const std::int64_t d : host.sizes()) raw(d);
    bytes(host.data_ptr(), host.nbytes());
  }

 private:
  std::vector<std::byte>& out_;
};

class StateReader {
 public:
  explicit StateReader(std::span<const std::byte> in) : in_(in) {}
  template <class T>
  T raw() {
    T v{};
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string text() {
    const auto n = raw<std::uint64_t>();
    const auto* p = take(n);
    return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(n)};
  }
  std::span<const std::byte> rest() {
    auto r = in_.subspan(pos_);
    pos_ = in_.size();
    return r;
  }
  [[nodiscard]] bool done() const noexcept { return pos_ == in_.size(); }

  // Tensors of the state of the parameter being read go to its device.
  ::torch::Device device = ::torch::kCPU;

  void operator()(double& v) { v = raw<double>(); }
  void operator()(bool& v) { v = raw<std::uint8_t>() != 0; }
  void operator()(std::int64_t& v) { v = raw<std::int64_t>(); }
  void operator()(::torch::Tensor& t) {
    if (raw<std::uint8_t>() == 0) {
      t = ::torch::Tensor();
      return;
    }
    const auto type = static_cast<::torch::ScalarType>(raw<std::int8_t>());
    const auto ndim = raw<std::uint64_t>();
    if (ndim > 64) bad("a tensor of " + std::to_string(ndim) + " dimensions");
    std::vector<std::int64_t> sizes(ndim);
    for (auto& d : sizes) {
      d = raw<std::int64_t>();
      if (d < 0) bad("a negative tensor size");
    }
    ::torch::Tensor host = ::torch::empty(sizes, ::torch::TensorOptions(type));
    std::memcpy(host.data_ptr(), take(host.nbytes()), host.nbytes());
    t = host.to(device);
  }

  [[noreturn]] static void bad(const std::string& what) {
    throw UsageError("the optimizer state in the checkpoint is damaged (" + what +
                     "): resume from an earlier checkpoint");
  }

 private:
  const std::byte* take(std::uint64_t n) {
    if (n > in_.size() - pos_) bad("it ends early");
    const std::byte* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

namespace optim = ::torch::optim;

// The field lists: every option a group has and every tensor and count a parameter's state has.
template <class V>
void fields(V& v, optim::SGDOptions& o) {
  v(o.lr()), v(o.momentum()), v(o.dampening()), v(o.weight_decay()), v(o.nesterov());
}
template <class V>
void fields(V& v, optim::SGDParamState& s) {
  v(s.momentum_buffer());
}
template <class V, class AdamLikeOptions>
void adam_option_fields(V& v, AdamLikeOptions& o) {
  v(o.lr()), v(std::get<0>(o.betas())), v(std::get<1>(o.betas())), v(o.eps()), v(o.weight_decay()), v(o.amsgrad());
}
template <class V, class AdamLikeState>
void adam_state_fields(V& v, AdamLikeState& s) {
  v(s.step()), v(s.exp_avg()), v(s.exp_avg_sq()), v(s.max_exp_avg_sq());
}
template <class V>
void fields(V& v, optim::AdamOptions& o) {
  adam_option_fields(v, o);
}
template <class V>
void fields(V& v, optim::AdamParamState& s) {
  adam_state_fields(v, s);
}
template <class V>
void fields(V& v, optim::AdamWOptions& o) {
  adam_option_fields(v, o);
}
template <class V>
void fields(V& v, optim::AdamWParamState& s) {
  adam_state_fields(v, s);
}
template <class V>
void fields(V& v, optim::AdagradOptions& o) {
  v(o.lr()), v(o.lr_decay()), v(o.weight_decay()), v(o.initial_accumulator_value()), v(o.eps());
}
template <class V>
void fields(V& v, optim::AdagradParamState& s) {
  v(s.sum()), v(s.step());
}
template <class V>
void fields(V& v, optim::RMSpropOptions& o) {
  v(o.lr()), v(o.alpha()), v(o.eps()), v(o.weight_decay()), v(o.momentum()), v(o.centered());
}
template <class V>
void fields(V& v, optim::RMSpropParamState& s) {
  v(s.step()), v(s.square_avg()), v(s.momentum_buffer()), v(s.grad_avg());
}

std::string state_key(const ::torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

template <class Options, class State>
void save_fields(StateWriter& w, optim::Optimizer& opt) {
  w.raw(static_cast<std::uint64_t>(opt.param_groups().size()));
  for (auto& group : opt.param_groups()) {
    fields(w, static_cast<Options&>(group.options()));
    w.raw(static_cast<std::uint64_t>(group.params().size()));
    for (const auto& p : group.params()) {
      const auto it = opt.state().find(state_key(p));
      bool has_state = it != opt.state().end();
      w(has_state);
      if (has_state) fields(w, static_cast<State&>(*it->second));
    }
  }
}

// Decodes everything first, checks it against the optimizer, and only then replaces its state.
template <class Options, class State>
void load_fields(StateReader& r, optim::Optimizer& opt) {
  auto& groups = opt.param_groups();
  if (r.raw<std::uint64_t>() != groups.size()) {
    throw UsageError("the checkpoint's optimizer has another number of parameter groups than this one (" +
                     std::to_string(groups.size()) + "): resume with the same model and optimizer");
  }
  std::vector<Options> options;
  std::vector<std::pair<std::string, std::unique_ptr<State>>> states;
  std::vector<std::string> without_state;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    options.push_back(static_cast<const Options&>(groups[g].options()));
    fields(r, options.back());
    const auto& params = groups[g].params();
    if (r.raw<std::uint64_t>() != params.size()) {
      throw UsageError("parameter group " + std::to_string(g) +
                       " of the checkpoint's optimizer has another number of parameters than this one's (" +
                       std::to_string(params.size()) + "): resume with the same model and optimizer");
    }
    for (const auto& p : params) {
      if (r.raw<std::uint8_t>() == 0) {
        without_state.push_back(state_key(p));
        continue;
      }
      auto s = std::make_unique<State>();
      r.device = p.device();
      fields(r, *s);
      states.emplace_back(state_key(p), std::move(s));
    }
  }
  if (!r.done()) StateReader::bad("bytes left over");
  for (std::size_t g = 0; g < groups.size(); ++g) static_cast<Options&>(groups[g].options()) = options[g];
  for (const auto& key : without_state) opt.state().erase(key);
  for (auto& [key, s] : states) opt.state()[key] = std::move(s);
}

struct OptimizerKind {
  const char* name;
  bool (*is)(const optim::Optimizer&);
  void (*save)(StateWriter&, optim::Optimizer&);
  void (*load)(StateReader&, optim::Optimizer&);
};

template <class Opt, class Options, class State>
OptimizerKind kind(const char* name) {
  return {name, [](const optim::Optimizer& o) { return dynamic_cast<const Opt*>(&o) != nullptr; },
          save_fields<Options, State>, load_fields<Options, State>};
}

const std::vector<OptimizerKind>& optimizer_kinds() {
  static const std::vector<OptimizerKind> kinds = {
      kind<optim::SGD, optim::SGDOptions, optim::SGDParamState>("sgd"),
      kind<optim::Adam, optim::AdamOptions, optim::AdamParamState>("adam"),
      kind<optim::AdamW, optim::AdamWOptions, optim::AdamWParamState>("adamw"),
      kind<optim::Adagrad, optim::AdagradOptions, optim::AdagradParamState>("adagrad"),
      kind<optim::RMSprop, optim::RMSpropOptions, optim::RMSpropParamState>("rmsprop"),
  };
  return kinds;
}

const OptimizerKind* find_kind(const optim::Optimizer& opt) {
  for (const auto& k : optimizer_kinds()) {
    if (k.is(opt)) return &k;
  }
  return nullptr;
}

constexpr const char* kTorchSave = "torch-save";

std::string optimizer_kind_name(const optim::Optimizer& opt) {
  const OptimizerKind* k = find_kind(opt);
  return k ? k->name : kTorchSave;
}

}  // namespace

std::vector<std::byte> save_optimizer_state(optim::Optimizer& optimizer) {
  std::vector<std::byte> out;
  StateWriter w(out);
  w.bytes(kOptimizerMagic.data(), kOptimizerMagic.size());
  w.raw(kOptimizerVersion);
  const OptimizerKind* k = find_kind(optimizer);
  w.text(k ? k->name : kTorchSave);
  if (k) {
    k->save(w, optimizer);
  } else {
    std::ostringstream stream;
    try {
      ::torch::save(optimizer, stream);
    } catch (const c10::Error& e) {
      throw Error("torch::save cannot write this optimizer's state (" + first_line(e.what()) +
                  "): antdt writes the state of SGD, Adam, AdamW, Adagrad and RMSprop itself, and any other "
                  "optimizer's save() must work");
    }
    w.text(stream.str());
  }
  return out;
}

void load_optimizer_state(optim::Optimizer& optimizer, std::span<const std::byte> bytes) {
  StateReader r(bytes);
  std::string magic(kOptimizerMagic.size(), '\0');
  for (char& c : magic) c = static_cast<char>(r.raw<std::uint8_t>());
  if (magic != kOptimizerMagic) StateReader::bad("no optimizer state header");
  if (const auto version = r.raw<std::uint32_t>(); version != kOptimizerVersion) {
    throw UsageError("the checkpoint's optimizer state has format version " + std::to_string(version) +
                     ", which this antdt (version " + std::to_string(kOptimizerVersion) + ") cannot read");
  }
  const std::string saved = r.text();
  const std::string here = optimizer_kind_name(optimizer);
  if (saved != here) {
    throw UsageError("the checkpoint holds the state of a " + saved + " optimizer and this program's is " + here +
                     ": resume with the same optimizer");
  }
  if (const OptimizerKind* k = find_kind(optimizer)) {
    k->load(r, optimizer);
  } else {
    std::istringstream stream(r.text());
    if (!r.done()) StateReader::bad("bytes left over");
    try {
      ::torch::load(optimizer, stream);
    } catch (const c10::Error& e) {
      throw UsageError("torch::load cannot read the checkpoint's optimizer state into this optimizer (" +
                       first_line(e.what()) + "): resume with the same model and optimizer");
    }
  }
}

// ---------------------------------------------------------------------------------------
// Checksum
// ---------------------------------------------------------------------------------------
std::string torch_checksum(const ::torch::nn::Module& model) {
  std::vector<std::byte> all;
  for (const auto& t : model.parameters()) {
    const auto b = tensor_bytes(t);
    all.insert(all.end(), b.begin(), b.end());
  }
  for (const auto& t : model.buffers()) {
    const auto b = tensor_bytes(t);
    all.insert(all.end(), b.begin(), b.end());
  }
  return fnv1a_hex(all.data(), all.size());
}

// ---------------------------------------------------------------------------------------
// TorchDataset
// ---------------------------------------------------------------------------------------
TorchDataset::TorchDataset(data::Dataset& data, std::vector<std::int64_t> shape, ::torch::Device device)
    : data_(&data), shape_(std::move(shape)), device_(device) {
  if (shape_.empty()) shape_ = data.sample_shape();
  if (shape_.empty()) shape_ = {data.dim()};
  std::int64_t product = 1;
  for (const std::int64_t d : shape_) {
    if (d < 1) throw UsageError("TorchDataset: a sample shape " + shape_text(shape_) + " with an extent below 1");
    product *= d;
  }
  if (product != data.dim()) {
    throw UsageError("TorchDataset: a sample of shape " + shape_text(shape_) + " holds " + std::to_string(product) +
                     " values, and the data set's samples hold " + std::to_string(data.dim()));
  }
}

::torch::data::Example<> TorchDataset::read(std::span<const std::int64_t> indices) {
  const auto n = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> sizes{n};
  sizes.insert(sizes.end(), shape_.begin(), shape_.end());
  ::torch::Tensor features = ::torch::empty(sizes, ::torch::kFloat);
  labels_.resize(indices.size());
  if (n > 0) data_->read(indices, features.data_ptr<float>(), labels_.data());
  ::torch::Tensor target = ::torch::from_blob(labels_.data(), {n}, ::torch::kInt).to(::torch::kLong);
  if (device_ != ::torch::kCPU) {
    features = features.to(device_);
    target = target.to(device_);
  }
  return {std::move(features), std::move(target)};
}

::torch::data::Example<> TorchDataset::get(std::size_t index) {
  const auto i = static_cast<std::int64_t>(index);
  auto one = read(std::span(&i, 1));
  return {one.data[0], one.target[0]};
}

::torch::optional<std::size_t> TorchDataset::size() const { return static_cast<std::size_t>(data_->size()); }

// ---------------------------------------------------------------------------------------
// TorchBridge
// ---------------------------------------------------------------------------------------
namespace {

// The model's parameters that need a gradient, each once (a shared parameter appears under
// every name that holds it).
std::vector<::torch::Tensor> trainable(const ::torch::nn::Module& model) {
  std::vector<::torch::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : model.parameters()) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

// Rank 0's tensor on every rank, through the job's guarded broadcast.
void broadcast(::torch::Tensor t, Job& job) {
  ::torch::NoGradGuard no_grad;
  const bool in_place = t.is_cpu() && t.is_contiguous();
  ::torch::Tensor host = in_place ? t : host_contiguous(t);
  job.broadcast(std::span<std::byte>(static_cast<std::byte*>(host.data_ptr()), host.nbytes()), 0);
  if (!in_place) t.copy_(host);
}

// One tensor's state entry: its bytes, and back (same size, so same shape and type, checked
// with the layout entry).
void add_tensor_state(Job& job, const std::string& name, ::torch::Tensor t) {
  job.add_state(
      name, [t] { return tensor_bytes(t); },
      [t, name](std::span<const std::byte> bytes) mutable {
        if (bytes.size() != t.nbytes()) {
          throw UsageError("the checkpoint holds " + std::to_string(bytes.size()) + " bytes for " + name + " (" +
                           describe(t) + ", " + std::to_string(t.nbytes()) +
                           " bytes here): it is the checkpoint of another model");
        }
        ::torch::Tensor host = ::torch::empty(t.sizes(), ::torch::TensorOptions(t.scalar_type()));
        std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
        ::torch::NoGradGuard no_grad;
        t.copy_(host);
      });
}

std::string layout_text(const ::torch::nn::Module& model, const optim::Optimizer& optimizer) {
  std::string s;
  for (const auto& p : model.named_parameters()) s += "parameter " + p.key() + " " + describe(p.value()) + "\n";
  for (const auto& b : model.named_buffers()) s += "buffer " + b.key() + " " + describe(b.value()) + "\n";
  return s + "optimizer " + optimizer_kind_name(optimizer) + "\n";
}

std::vector<std::byte> as_bytes(const std::string& s) {
  const auto* b = reinterpret_cast<const std::byte*>(s.data());
  return {b, b + s.size()};
}

// The first line that differs, for the error message.
std::string first_difference(const std::string& saved, const std::string& here) {
  std::istringstream a(saved), b(here);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) return "?";
    if (!ga) return "this model has \"" + lb + "\", the checkpoint's has nothing there";
    if (!gb) return "the checkpoint's model has \"" + la + "\", this one has nothing there";
    if (la != lb) return "the checkpoint's model has \"" + la + "\" where this one has \"" + lb + "\"";
  }
}

}  // namespace

struct TorchBridge::Impl {
  Impl(Job& j, ::torch::nn::Module& m, optim::Optimizer& o) : job(j), model(m), optimizer(o), grads(trainable(m)) {}
  Job& job;
  ::torch::nn::Module& model;
  optim::Optimizer& optimizer;
  TorchGradients grads;
};

TorchBridge::TorchBridge(Job& job, ::torch::nn::Module& model, optim::Optimizer& optimizer, TorchBridgeOptions options)
    : impl_(std::make_unique<Impl>(job, model, optimizer)) {
  std::unordered_set<const void*> in_model;
  for (const auto& p : model.parameters()) in_model.insert(p.unsafeGetTensorImpl());
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!in_model.count(p.unsafeGetTensorImpl())) {
        throw UsageError("the optimizer holds a parameter (" + describe(p) +
                         ") that is not one of the model's: give the bridge the model the optimizer optimises");
      }
    }
  }
  if (options.broadcast_initial && job.size() > 1) {
    for (const auto& p : model.parameters()) broadcast(p, job);
    for (const auto& b : model.buffers()) broadcast(b, job);
  }
  const std::string& prefix = options.state_prefix;
  const std::string layout = layout_text(model, optimizer);
  job.add_state(
      prefix + "/layout", [layout] { return as_bytes(layout); },
      [layout](std::span<const std::byte> bytes) {
        const std::string saved(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        if (saved != layout) {
          throw UsageError("the checkpoint is of another model or optimizer: " + first_difference(saved, layout));
        }
      });
  for (const auto& p : model.named_parameters()) add_tensor_state(job, prefix + "/parameters/" + p.key(), p.value());
  for (const auto& b : model.named_buffers()) add_tensor_state(job, prefix + "/buffers/" + b.key(), b.value());
  job.add_state(
      prefix + "/optimizer", [&optimizer] { return save_optimizer_state(optimizer); },
      [&optimizer](std::span<const std::byte> bytes) { load_optimizer_state(optimizer, bytes); });
}

TorchBridge::~TorchBridge() = default;

void TorchBridge::zero_grad() { impl_->grads.zero(); }

std::int64_t TorchBridge::reduce() {
  auto& m = *impl_;
  m.grads.gather();
  auto* sums = m.grads.buffer().data_ptr<float>();
  std::int64_t samples = 0;
  if (m.grads.on_cuda()) {
    // Job::reduce_device: NCCL (or MPI through host memory where ranks share a GPU). Backward
    // ran on libtorch's stream, which may be one that does not wait for others: synchronise.
    // The division and the check run on the GPU.
    const ::torch::Tensor& buffer = m.grads.buffer();
    ::torch::cuda::synchronize(buffer.device().index());
    samples = m.job.reduce_device(sums, m.grads.numel(), buffer.device().index());
    buffer.mul_(samples > 0 ? 1.0 / static_cast<double>(samples) : 0.0);
    m.job.check_finite(::torch::isfinite(buffer).all().item<bool>());
  } else {
    samples = m.job.reduce(std::span<float>(sums, static_cast<std::size_t>(m.grads.numel())));
  }
  m.grads.scatter();
  return samples;
}

std::int64_t TorchBridge::step() {
  const std::int64_t samples = reduce();
  impl_->optimizer.step();
  return samples;
}

TorchGradients& TorchBridge::gradients() noexcept { return impl_->grads; }

}  // namespace antdt
