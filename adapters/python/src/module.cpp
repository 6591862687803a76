// antdt._antdt: the Python binding of antdt::Job (docs/python.md). The package antdt
// (adapters/python/antdt) wraps it; a training script imports antdt, never this module.
//
// What lives here and why:
//  - MPI (and Kokkos) through antdt::Environment at import: initialised only if nothing else
//    has (mpi4py, say), finalised at interpreter exit only by whoever initialised it;
//  - the Job's options from keyword arguments and the ANTDT_* environment, parsed by the same
//    CLI11 table as the command line (antdt/cli.hpp), so names, defaults and checks are one;
//  - the Job itself, its arrays through the buffer protocol (in place, never copied), and the
//    Python callables it calls back (state save/load, probe, hooks) with the GIL taken;
//  - antdt's errors as the Python exceptions of antdt.errors, carrying their exit codes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>
#include <antdt/cli.hpp>
#include <antdt/data.hpp>
#include <antdt/error.hpp>
#include <antdt/job.hpp>
#include <antdt/options.hpp>
#include <antdt/report.hpp>
#include <antdt/runtime.hpp>
#include "transport/comm.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// --- MPI and Kokkos for the life of the interpreter --------------------------------------

std::unique_ptr<antdt::Environment> g_env;
bool g_owns_mpi = false;  // MPI was not initialised when antdt was imported

// Py_AtExit: after the interpreter has torn down its modules (so every Job is gone), as
// mpi4py does; antdt::Environment finalises only what it initialised.
void finalize_environment() { g_env.reset(); }

int world_rank() {
  int rank = 0;
  if (antdt::mpi_is_active()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 1;
  if (antdt::mpi_is_active()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// --- errors --------------------------------------------------------------------------------

// The exception classes of antdt.errors (pure Python), looked up when needed.
py::object error_class(const char* name) { return py::module_::import("antdt.errors").attr(name); }

const char* class_name_of(const antdt::Error& e) {
  if (dynamic_cast<const antdt::StallError*>(&e)) return "StallError";
  if (dynamic_cast<const antdt::WriteError*>(&e)) return "WriteError";
  if (dynamic_cast<const antdt::CheckpointError*>(&e)) return "CheckpointError";
  if (dynamic_cast<const antdt::FileError*>(&e)) return "FileError";
  if (dynamic_cast<const antdt::UsageError*>(&e)) return "UsageError";
  if (dynamic_cast<const antdt::NonFiniteError*>(&e)) return "NonFiniteError";
  if (dynamic_cast<const antdt::MpiError*>(&e)) return "MpiError";
  if (dynamic_cast<const antdt::DeviceError*>(&e) || dynamic_cast<const antdt::CudaError*>(&e) ||
      dynamic_cast<const antdt::NcclError*>(&e)) {
    return "DeviceError";
  }
  return "Error";
}

void raise_python(const antdt::Error& e) {
  py::object cls = error_class(class_name_of(e));
  py::object err = cls(e.what());
  err.attr("shared") = e.shared();
  err.attr("heard") = e.heard();
  if (const auto* m = dynamic_cast<const antdt::MpiError*>(&e)) err.attr("mpi_code") = m->code();
  PyErr_SetObject(cls.ptr(), err.ptr());
}

// A Python exception raised by a callable antdt called (with the GIL held): the same kind of
// antdt error, so that antdt's agreement between ranks and the exit codes still apply.
[[noreturn]] void rethrow_as_antdt(py::error_already_set& e, const std::string& where, bool loading) {
  const std::string value = py::str(e.value());
  const std::string type = py::str(e.type().attr("__name__"));
  const bool ours = e.matches(error_class("Error"));
  const std::string what = where + ": " + (ours ? value : type + ": " + value);
  if (e.matches(error_class("WriteError"))) throw antdt::WriteError(what);
  if (e.matches(error_class("CheckpointError"))) throw antdt::CheckpointError(what);
  if (e.matches(error_class("FileError"))) throw antdt::FileError(what);
  if (e.matches(error_class("UsageError"))) throw antdt::UsageError(what);
  if (e.matches(error_class("NonFiniteError"))) throw antdt::NonFiniteError(what);
  // What a load function cannot take is a checkpoint this run cannot use.
  if (loading) throw antdt::CheckpointError(what);
  throw antdt::Error(what);
}

// A Python callable kept by the Job: its reference count changes only with the GIL held,
// however often the std::function around it is copied.
struct Callable {
  py::object fn;
  explicit Callable(py::object f) : fn(std::move(f)) {}
  Callable(const Callable&) = delete;
  Callable& operator=(const Callable&) = delete;
  ~Callable() {
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
};

// A Python callable as the std::function a Job calls: with the GIL held, and a Python exception
// turned into an antdt error that names `where`.
template <class... Args>
std::function<void(Args...)> python_hook(py::object fn, std::string where) {
  auto f = std::make_shared<Callable>(std::move(fn));
  return [f, where = std::move(where)](Args... args) {
    py::gil_scoped_acquire gil;
    try {
      f->fn(args...);
    } catch (py::error_already_set& e) {
      rethrow_as_antdt(e, where, false);
    }
  };
}

// --- buffers -------------------------------------------------------------------------------

// A writable, C-contiguous buffer of `obj` (a NumPy array, anything with the buffer protocol,
// or a CPU torch.Tensor, through .numpy(), which shares its memory). `what` names the call.
struct Buffer {
  py::object owner;  // keeps the memory alive
  py::buffer_info info;
};

Buffer writable_buffer(const py::object& obj, const std::string& what) {
  py::object target = obj;
  if (!PyObject_CheckBuffer(obj.ptr()) && py::hasattr(obj, "numpy") && py::hasattr(obj, "is_contiguous")) {
    // A torch.Tensor: its .numpy() is a view of the same memory (CPU, contiguous only).
    const std::string device = py::str(obj.attr("device"));
    if (device != "cpu") {
      throw antdt::UsageError(what + ": the tensor is on " + device +
                              "; antdt reduces CPU memory: copy it to the CPU (antdt.torch.Bridge does this for "
                              "CUDA models)");
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      throw antdt::UsageError(what +
                              ": the tensor is not contiguous; pass a contiguous one (.contiguous() is a copy, "
                              "so reduce that copy and use it)");
    }
    target = obj.attr("detach")().attr("numpy")();
  }
  if (!PyObject_CheckBuffer(target.ptr())) {
    throw antdt::UsageError(what + ": a " + std::string(py::str(obj.get_type().attr("__name__"))) +
                            " is not an array: pass a NumPy array or a CPU torch.Tensor");
  }
  py::buffer_info info;
  try {
    info = py::reinterpret_borrow<py::buffer>(target).request(true);
  } catch (py::error_already_set&) {
    throw antdt::UsageError(what + ": the array is read-only; antdt writes its result into it, so pass a writable one");
  } catch (const std::exception&) {
    throw antdt::UsageError(what + ": the array is read-only; antdt writes its result into it, so pass a writable one");
  }
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[static_cast<std::size_t>(d)] > 1 && info.strides[static_cast<std::size_t>(d)] != expect) {
      throw antdt::UsageError(what +
                              ": the array is not C-contiguous; pass a contiguous one (numpy.ascontiguousarray "
                              "is a copy, so use that copy)");
    }
    expect *= info.shape[static_cast<std::size_t>(d)];
  }
  return {target, std::move(info)};
}

enum class Element { float32, float64, int64, other };

Element element_of(const py::buffer_info& info) {
  const std::string& f = info.format;
  const char c = f.empty() ? '?' : f.back();  // "<f", "=f" and "f" alike
  if (c == 'f' && info.itemsize == 4) return Element::float32;
  if (c == 'd' && info.itemsize == 8) return Element::float64;
  if ((c == 'q' || c == 'l') && info.itemsize == 8) return Element::int64;
  return Element::other;
}

std::string dtype_text(const py::buffer_info& info) {
  return "buffer format '" + info.format + "' of " + std::to_string(info.itemsize) + "-byte items";
}

// --- options -------------------------------------------------------------------------------

std::string flag_key(const std::string& keyword) {
  std::string k = keyword;
  std::replace(k.begin(), k.end(), '_', '-');
  return k;
}
std::string keyword_of(const std::string& key) {
  std::string k = key;
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

bool skipped(const std::string& name) { return name == "help" || name == "help-all" || name == "version"; }

std::vector<std::string> keywords_of(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty() || skipped(opt->get_lnames().front())) continue;
    out.push_back(keyword_of(opt->get_lnames().front()));
  }
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// A value as the command line would give it: True/False for flags, comma lists for sequences.
std::string option_text(const std::string& keyword, const py::handle& value, bool flag) {
  if (flag) {
    if (!py::isinstance<py::bool_>(value)) {
      throw antdt::UsageError(keyword + "=" + std::string(py::repr(value)) + ": give True or False");
    }
    return value.cast<bool>() ? "true" : "false";
  }
  if (py::isinstance<py::bool_>(value)) {
    throw antdt::UsageError(keyword + "=" + std::string(py::repr(value)) +
                            ": this option takes a value, not True/False");
  }
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::string joined;
    for (const auto& item : value) joined += (joined.empty() ? "" : ",") + std::string(py::str(item));
    return joined;
  }
  if (py::hasattr(value, "__fspath__")) return py::str(value.attr("__fspath__")());
  return py::str(value);
}

// The Job's options: `given` as if typed on the command line (keyword -> value), every other
// option from its ANTDT_* environment variable or its default. UsageError, naming options in
// the process's style (keywords unless the command line gave them), on a bad one.
antdt::JobOptions parse_options(const py::dict& given, bool flags_style) {
  antdt::JobOptions o;
  CLI::App app{"antdt"};
  antdt::add_job_options(app, o);
  antdt::cli::strict_config(app);
  antdt::set_option_names(flags_style ? antdt::OptionNames::flags : antdt::OptionNames::keywords);
  const auto name = [&](const std::string& key) { return flags_style ? "--" + key : keyword_of(key); };

  std::vector<std::string> args;
  std::vector<std::string> typed;  // keys given (not from the environment)
  for (const auto& [k, v] : given) {
    const std::string keyword = py::str(k);
    if (v.is_none()) continue;
    const CLI::Option* opt = app.get_option_no_throw("--" + flag_key(keyword));
    if (opt == nullptr || keyword.find('-') != std::string::npos || skipped(flag_key(keyword))) {
      std::string best;
      std::size_t best_distance = 3;
      for (const auto& candidate : keywords_of(app)) {
        const auto d = edit_distance(keyword, candidate);
        if (d < best_distance) best_distance = d, best = candidate;
      }
      // Else the longest option the keyword begins with (checkpoint_every_steps: checkpoint_every).
      if (best.empty()) {
        for (const auto& candidate : keywords_of(app))
          if (keyword.rfind(candidate, 0) == 0 && candidate.size() > best.size()) best = candidate;
      }
      throw antdt::UsageError("unknown option '" + keyword + "'" +
                              (best.empty() ? "" : " (did you mean '" + best + "'?)") +
                              "; the options are listed in docs/python.md (antdt.option_names())");
    }
    const bool flag = opt->get_expected_min() == 0;
    args.push_back("--" + flag_key(keyword) + "=" + option_text(name(flag_key(keyword)), v, flag));
    typed.push_back(flag_key(keyword));
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector of arguments last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // CLI11 names options by their flags: in keyword style, by their keywords.
    if (!flags_style) {
      std::string out;
      const std::regex flag_pattern("--([a-z][a-z0-9-]*)");
      std::sregex_iterator it(what.begin(), what.end(), flag_pattern), end;
      std::size_t last = 0;
      for (; it != end; ++it) {
        out += what.substr(last, static_cast<std::size_t>(it->position()) - last);
        const std::string key = (*it)[1];
        out += app.get_option_no_throw("--" + key) != nullptr ? keyword_of(key) : it->str();
        last = static_cast<std::size_t>(it->position() + it->length());
      }
      what = out + what.substr(last);
    }
    // A value that came from the environment says so.
    for (const CLI::Option* opt : app.get_options()) {
      const std::string& env = opt->get_envname();
      if (env.empty() || opt->get_lnames().empty()) continue;
      const std::string key = opt->get_lnames().front();
      if (std::find(typed.begin(), typed.end(), key) != typed.end() || std::getenv(env.c_str()) == nullptr) continue;
      if (what.find(name(key)) != std::string::npos) {
        what += " (from the environment: " + env + "=" + std::getenv(env.c_str()) + ")";
        break;
      }
    }
    throw antdt::UsageError(what);
  }
  const CLI::Option* config = app.get_config_ptr();
  if (config != nullptr && config->count() > 0) o.config_file = config->as<std::string>();
  antdt::set_option_names(flags_style ? antdt::OptionNames::flags : antdt::OptionNames::keywords);
  return o;
}

// Every option: (keyword, flag key, help, group, is a flag, negated flag or "", default, env).
py::list option_table() {
  antdt::JobOptions o;
  CLI::App app{"antdt"};
  antdt::add_job_options(app, o);
  py::list out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty()) continue;
    const std::string key = opt->get_lnames().front();
    if (skipped(key)) continue;
    std::string negated;
    for (const auto& f : opt->get_fnames())
      if (f != key) negated = f;
    out.append(py::make_tuple(keyword_of(key), key, opt->get_description(), opt->get_group(),
                              opt->get_expected_min() == 0, negated, opt->get_default_str(), opt->get_envname()));
  }
  return out;
}

// --- the Job -------------------------------------------------------------------------------

// An mpi4py communicator's handle (MPI._handleof) as an MPI_Comm: a pointer in Open MPI, an int in MPICH.
template <class C>
C comm_from_handle(std::uintptr_t handle) {
  if constexpr (std::is_pointer_v<C>) {
    return reinterpret_cast<C>(handle);  // NOLINT(performance-no-int-to-ptr)
  } else {
    return static_cast<C>(handle);
  }
}

py::array_t<std::int64_t> to_array(std::span<const std::int64_t> values) {
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(values.size()));
  if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(std::int64_t));
  return out;
}

// Runs `parse` on every rank of `comm` and agrees on the outcome, as the Job's own checks do:
// where every rank finds the same bad option, the same UsageError on every rank, printed once
// (by rank 0); where only some do, theirs is not shared (run_main ends the job) and the others
// raise one that prints nothing.
template <class Parse>
void agree_on_options(MPI_Comm comm, Parse&& parse) {
  std::string what;
  int failed = 0;
  try {
    parse();
  } catch (const antdt::UsageError& e) {
    what = e.what();
    failed = 1;
  }
  int all = 0, any = 0, rank = 0;
  ANTDT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ANTDT_CHECK_MPI(MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_MIN, comm));
  ANTDT_CHECK_MPI(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, comm));
  if (any == 0) return;
  antdt::UsageError e(failed ? what : "another rank's options are not valid (its message says why)");
  e.set_shared(all != 0, all != 0 ? rank != 0 : failed == 0);
  throw e;
}

// The Job and what Python handed it: the arrays it writes into on a resume stay alive here.
class PyJob {
 public:
  PyJob(const py::dict& options, std::int64_t dataset_size, const std::string& program,
        const std::vector<std::pair<std::string, std::string>>& identity,
        const std::vector<std::pair<std::string, std::string>>& inputs, bool flags_style, std::uintptr_t comm_handle) {
    MPI_Comm comm = comm_handle == 0 ? MPI_COMM_WORLD : comm_from_handle<MPI_Comm>(comm_handle);
    antdt::JobOptions o;
    agree_on_options(comm, [&] {
      o = parse_options(options, flags_style);
      if (dataset_size < 1) {
        throw antdt::UsageError("dataset_size " + std::to_string(dataset_size) +
                                ": give the number of samples in the training set (len(dataset)), at least 1");
      }
    });
    o.session.dataset_size = dataset_size;
    o.program = program;
    o.identity = identity;
    o.inputs = inputs;
    {
      py::gil_scoped_release release;
      job_ = std::make_unique<antdt::Job>(std::move(o), comm);
    }
  }
  ~PyJob() { close(); }
  PyJob(const PyJob&) = delete;
  PyJob& operator=(const PyJob&) = delete;

  // Collective: ends the job (every rank at the same point). After MPI_Finalize (a job kept
  // to the interpreter's exit by a reference cycle) it is left as it is: nothing to free then.
  void close() {
    if (!job_) return;
    if (!antdt::mpi_is_active()) {
      (void)job_.release();  // NOLINT: intentionally leaked, MPI is gone
      return;
    }
    py::gil_scoped_release release;
    job_.reset();
  }

  antdt::Job& job() {
    if (!job_) throw antdt::UsageError("this Job is closed");
    return *job_;
  }

  void add_state_array(const std::string& name, const py::object& array) {
    Buffer b = writable_buffer(array, "Job.add_state('" + name + "')");
    const auto n = static_cast<std::size_t>(b.info.size);
    switch (element_of(b.info)) {
      case Element::float32:
        job().add_state(name, std::span<float>(static_cast<float*>(b.info.ptr), n));
        break;
      case Element::float64:
        job().add_state(name, std::span<double>(static_cast<double*>(b.info.ptr), n));
        break;
      case Element::int64:
        job().add_state(name, std::span<std::int64_t>(static_cast<std::int64_t*>(b.info.ptr), n));
        break;
      case Element::other:
        throw antdt::UsageError("Job.add_state('" + name + "'): a " + dtype_text(b.info) +
                                " is not float32, float64 or int64; keep other state with save= and load=");
    }
    kept_.push_back(b.owner);
  }

  void add_state_bytes(const std::string& name, py::object save, py::object load) {
    if (!PyCallable_Check(save.ptr()) || !PyCallable_Check(load.ptr())) {
      throw antdt::UsageError("Job.add_state('" + name + "'): save and load must both be callables");
    }
    auto s = std::make_shared<Callable>(std::move(save));
    auto l = std::make_shared<Callable>(std::move(load));
    job().add_state(
        name,
        [s, name]() {
          py::gil_scoped_acquire gil;
          try {
            py::object data = s->fn();
            if (!PyObject_CheckBuffer(data.ptr())) {
              throw antdt::UsageError("state '" + name + "': the save function returned a " +
                                      std::string(py::str(data.get_type().attr("__name__"))) + ", not bytes");
            }
            py::buffer_info info = py::reinterpret_borrow<py::buffer>(data).request();
            const auto* p = static_cast<const std::byte*>(info.ptr);
            return std::vector<std::byte>(p, p + info.size * info.itemsize);
          } catch (py::error_already_set& e) {
            rethrow_as_antdt(e, "state '" + name + "': the save function raised", false);
          }
        },
        [l, name](std::span<const std::byte> bytes) {
          py::gil_scoped_acquire gil;
          try {
            l->fn(py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
          } catch (py::error_already_set& e) {
            rethrow_as_antdt(e, "checkpoint state '" + name + "': the load function raised", true);
          }
        });
  }

  void set_probe(py::object fn) { job().set_probe(python_hook<std::int64_t>(std::move(fn), "the probe raised")); }

  void on_step_end(py::object fn) {
    job().on_step_end(python_hook<const antdt::StepSummary&>(std::move(fn), "the on_step_end hook raised"));
  }

  // The summary by reference: the hook's changes (an accuracy, a checksum) go into the report.
  void on_report(py::object fn) {
    auto hook = python_hook<antdt::RunSummary*>(std::move(fn), "the on_report hook raised");
    job().on_report([hook](antdt::RunSummary& s) { hook(&s); });
  }

  bool next_step() {
    antdt::Job& j = job();
    py::gil_scoped_release release;
    return j.next_step();
  }

  py::array_t<std::int64_t> next_micro_batch() {
    antdt::Job& j = job();
    std::span<const std::int64_t> batch;
    {
      py::gil_scoped_release release;  // a pooled step may wait on rank 0's counter
      batch = j.next_micro_batch();
    }
    return to_array(batch);
  }

  std::int64_t reduce(const py::object& values) {
    antdt::Job& j = job();
    Buffer b = writable_buffer(values, "Job.reduce");
    const auto n = static_cast<std::size_t>(b.info.size);
    switch (element_of(b.info)) {
      case Element::float32: {
        py::gil_scoped_release release;
        return j.reduce(std::span<float>(static_cast<float*>(b.info.ptr), n));
      }
      case Element::int64: {
        py::gil_scoped_release release;
        return j.reduce(std::span<std::int64_t>(static_cast<std::int64_t*>(b.info.ptr), n));
      }
      default:
        throw antdt::UsageError("Job.reduce: a " + dtype_text(b.info) +
                                " cannot be reduced: pass float32 gradient sums, or int64 fixed-point sums");
    }
  }

  // Collective over the job's ranks: `root`'s values into every rank's array, in place.
  void broadcast(const py::object& values, int root) {
    job();
    Buffer b = writable_buffer(values, "Job.broadcast");
    const auto bytes = b.info.size * b.info.itemsize;
    py::gil_scoped_release release;  // Job::broadcast checks the root, after the ranks agree on it
    job().broadcast(std::span<std::byte>(static_cast<std::byte*>(b.info.ptr), static_cast<std::size_t>(bytes)), root);
  }

 private:
  std::unique_ptr<antdt::Job> job_;
  std::vector<py::object> kept_;
};

// --- the data ------------------------------------------------------------------------------

class PyHdf5Dataset {
 public:
  explicit PyHdf5Dataset(const std::string& path) : data_(path) {}

  [[nodiscard]] std::int64_t size() const { return data_.size(); }
  [[nodiscard]] std::int64_t dim() const { return data_.dim(); }
  [[nodiscard]] std::int32_t num_classes() const { return data_.num_classes(); }
  [[nodiscard]] std::vector<std::int64_t> sample_shape() const {
    auto s = data_.sample_shape();
    return s.empty() ? std::vector<std::int64_t>{data_.dim()} : s;
  }
  [[nodiscard]] const std::string& path() const { return data_.path(); }

  // (features float32 [n, *sample_shape], labels int64 [n]) of `indices`, in one read per run.
  py::tuple read(const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& indices) {
    const std::span<const std::int64_t> idx(indices.data(), static_cast<std::size_t>(indices.size()));
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(idx.size())};
    for (auto e : sample_shape()) shape.push_back(static_cast<py::ssize_t>(e));
    py::array_t<float> features(shape);
    py::array_t<std::int64_t> labels(static_cast<py::ssize_t>(idx.size()));
    labels_.resize(idx.size());
    {
      py::gil_scoped_release release;
      data_.read(idx, features.mutable_data(), labels_.data());
    }
    std::copy(labels_.begin(), labels_.end(), labels.mutable_data());
    return py::make_tuple(features, labels);
  }

 private:
  antdt::data::Hdf5Dataset data_;
  std::vector<std::int32_t> labels_;
};

}  // namespace

PYBIND11_MODULE(_antdt, m) {
  m.doc() = "antdt's C++ library (docs/python.md); import antdt, not this module";

  {
    int argc = 0;
    char** argv = nullptr;
    int initialized = 0;
    MPI_Initialized(&initialized);
    g_owns_mpi = initialized == 0;
    g_env = std::make_unique<antdt::Environment>(argc, argv);
    Py_AtExit(finalize_environment);
  }
  antdt::set_option_names(antdt::OptionNames::keywords);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const antdt::Error& e) {
      raise_python(e);
    }
  });

  m.def("world_rank", &world_rank, "This process's rank in MPI_COMM_WORLD");
  m.def("world_size", &world_size, "The number of processes in MPI_COMM_WORLD");
  m.def(
      "abort",
      [](int code) {
        std::fflush(stdout);
        std::fflush(stderr);
        if (antdt::mpi_is_active()) MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);
      },
      "Ends every rank of the job at once with this exit code (MPI_Abort)");
  m.def("finalize", &finalize_environment,
        "Finalises MPI and Kokkos now, if antdt initialised them (otherwise at the interpreter's exit)");
  m.def(
      "owns_mpi", [] { return g_owns_mpi; }, "Whether importing antdt initialised MPI (and so finalises it)");
  m.def(
      "set_option_names",
      [](const std::string& style) {
        if (style == "keywords") {
          antdt::set_option_names(antdt::OptionNames::keywords);
        } else if (style == "flags") {
          antdt::set_option_names(antdt::OptionNames::flags);
        } else {
          throw antdt::UsageError("set_option_names('" + style + "'): give 'keywords' or 'flags'");
        }
      },
      "How antdt's messages name options: 'keywords' (global_batch) or 'flags' (--global-batch)");
  m.def("option_table", &option_table);
  m.def("policy_names", &antdt::policy_names);
  m.attr("EXIT_RUNTIME") = antdt::kExitRuntime;
  m.attr("EXIT_USAGE") = antdt::kExitUsage;
  m.attr("EXIT_WRITE") = antdt::kExitWrite;
  m.attr("EXIT_NON_FINITE") = antdt::kExitNonFinite;
  m.attr("EXIT_STALLED") = antdt::kExitStalled;
  m.attr("EXIT_RESTART") = antdt::kExitRestart;
  m.attr("EXIT_STOPPED") = antdt::kExitStopped;

  py::class_<antdt::StepSummary>(m, "StepSummary", "What a step came to, the same on every rank")
      .def_readonly("step", &antdt::StepSummary::step)
      .def_readonly("totals_step", &antdt::StepSummary::totals_step)
      .def_readonly("samples", &antdt::StepSummary::samples)
      .def_readonly("loss_sum", &antdt::StepSummary::loss_sum)
      .def_readonly("correct", &antdt::StepSummary::correct)
      .def_readonly("plan_changed", &antdt::StepSummary::plan_changed)
      .def_readonly("completed_epochs", &antdt::StepSummary::completed_epochs)
      .def_readonly("step_seconds", &antdt::StepSummary::step_seconds)
      .def_readonly("checkpoint_requested", &antdt::StepSummary::checkpoint_requested)
      .def_readonly("finished", &antdt::StepSummary::finished)
      .def_readonly("stopped", &antdt::StepSummary::stopped)
      .def_readonly("restart", &antdt::StepSummary::restart);

  py::class_<antdt::RunSummary>(m, "Report", "The end-of-run summary, in an on_report hook (rank 0)")
      .def_readonly("ranks", &antdt::RunSummary::ranks)
      .def_readonly("policy", &antdt::RunSummary::policy)
      .def_readonly("segment", &antdt::RunSummary::segment)
      .def_readonly("segment_first_step", &antdt::RunSummary::segment_first_step)
      .def_readonly("steps", &antdt::RunSummary::steps)
      .def_readonly("segment_samples", &antdt::RunSummary::segment_samples)
      .def_readonly("run_steps", &antdt::RunSummary::run_steps)
      .def_readonly("samples", &antdt::RunSummary::samples)
      .def_readonly("wall_seconds", &antdt::RunSummary::wall_seconds)
      .def_readonly("throughput", &antdt::RunSummary::throughput)
      .def_readonly("efficiency", &antdt::RunSummary::efficiency)
      .def_readonly("final_split", &antdt::RunSummary::final_split)
      .def_readonly("final_loss", &antdt::RunSummary::final_loss)
      .def_readonly("stopped", &antdt::RunSummary::stopped)
      .def_readwrite("backend", &antdt::RunSummary::backend)
      .def_readwrite("eval_loss", &antdt::RunSummary::eval_loss)
      .def_readwrite("eval_accuracy", &antdt::RunSummary::eval_accuracy)
      .def_readwrite("parameter_checksum", &antdt::RunSummary::parameter_checksum);

  py::class_<PyJob>(m, "Job")
      .def(py::init<const py::dict&, std::int64_t, const std::string&,
                    const std::vector<std::pair<std::string, std::string>>&,
                    const std::vector<std::pair<std::string, std::string>>&, bool, std::uintptr_t>(),
           py::arg("options"), py::arg("dataset_size"), py::arg("program"), py::arg("identity"), py::arg("inputs"),
           py::arg("flags_style"), py::arg("comm_handle"))
      .def("close", &PyJob::close)
      .def("_add_state_array", &PyJob::add_state_array)
      .def("_add_state_bytes", &PyJob::add_state_bytes)
      .def("set_probe", &PyJob::set_probe, py::arg("micro_step"))
      .def("on_step_end", &PyJob::on_step_end, py::arg("hook"))
      .def("on_report", &PyJob::on_report, py::arg("hook"))
      .def("next_step", &PyJob::next_step)
      .def("next_micro_batch", &PyJob::next_micro_batch)
      .def("reduce", &PyJob::reduce, py::arg("values"))
      .def("broadcast", &PyJob::broadcast, py::arg("values"), py::arg("root") = 0)
      .def(
          "add_loss", [](PyJob& j, double loss, std::int64_t correct) { j.job().add_loss(loss, correct); },
          py::arg("loss_sum"), py::arg("correct") = 0)
      .def("request_stop", [](PyJob& j) { j.job().request_stop(); })
      .def("request_checkpoint", [](PyJob& j) { j.job().request_checkpoint(); })
      .def_property_readonly("exit_code", [](PyJob& j) { return j.job().exit_code(); })
      .def_property_readonly("step", [](PyJob& j) { return j.job().step(); })
      .def_property_readonly("epoch", [](PyJob& j) { return j.job().epoch(); })
      .def_property_readonly("resumed", [](PyJob& j) { return j.job().resumed(); })
      .def_property_readonly("stopped", [](PyJob& j) { return j.job().stopped(); })
      .def_property_readonly("rank", [](PyJob& j) { return j.job().rank(); })
      .def_property_readonly("size", [](PyJob& j) { return j.job().size(); })
      .def_property_readonly("split", [](PyJob& j) { return j.job().split(); })
      .def_property_readonly("samples", [](PyJob& j) { return to_array(j.job().work().samples); })
      .def_property_readonly("micro_batch_sizes", [](PyJob& j) { return j.job().work().micro_batches; })
      .def_property_readonly("pooled", [](PyJob& j) { return j.job().work().pooled; })
      .def_property_readonly("global_batch", [](PyJob& j) { return j.job().options().session.global_batch; })
      .def_property_readonly("dataset_size", [](PyJob& j) { return j.job().options().session.dataset_size; })
      .def_property_readonly("policy", [](PyJob& j) { return j.job().options().session.controller.policy; })
      .def_property_readonly("data_seed", [](PyJob& j) { return j.job().options().session.seed; })
      .def_property_readonly("checkpoint_dir", [](PyJob& j) { return j.job().options().checkpoint.dir; })
      .def_property_readonly("micro_batch_cap", [](PyJob& j) { return j.job().options().session.micro_batch_cap; });

  py::class_<PyHdf5Dataset>(m, "Hdf5Dataset",
                            "A data set in antdt's HDF5 layout (antdt-datagen; docs/data.md), read-only")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("__len__", &PyHdf5Dataset::size)
      .def_property_readonly("dim", &PyHdf5Dataset::dim)
      .def_property_readonly("num_classes", &PyHdf5Dataset::num_classes)
      .def_property_readonly("sample_shape", &PyHdf5Dataset::sample_shape)
      .def_property_readonly("path", &PyHdf5Dataset::path)
      .def("read", &PyHdf5Dataset::read, py::arg("indices"));
}
