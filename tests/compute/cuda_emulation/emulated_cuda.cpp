// The emulated CUDA device of the tests: the subset of the CUDA runtime, cuBLAS and NCCL that
// libantdt calls, and the launchers of kernels/cuda/mlp_kernels.hpp, on the host. See
// emulated_cuda.hpp for what it checks and what it cannot. The kernels' arithmetic is
// kernels/cuda/mlp_kernel_math.hpp, the same functions the real kernels call.
#include "emulated_cuda.hpp"

#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "antdt/config.hpp"
#include "cuda/mlp_kernel_math.hpp"
#include "cuda/mlp_kernels.hpp"

#if ANTDT_HAVE_NCCL
#include <nccl.h>
#endif

// The opaque handle types of the real libraries, defined here.
struct CUstream_st {
  int device = 0;
};
struct CUevent_st {
  std::optional<std::chrono::steady_clock::time_point> recorded;
  cudaStream_t stream = nullptr;  // where it was last recorded
  std::uint64_t seq = 0;          // the work queued before it: accesses with seq <= this
};
struct cublasContext {
  cudaStream_t stream = nullptr;
  int device = 0;
};
#if ANTDT_HAVE_NCCL
struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int device = 0;
};
#endif

namespace {

constexpr std::size_t kDeviceMemory = std::size_t{4} << 30;

// A read or write of [begin, end) queued on a stream and not yet ordered before the host and
// every other stream (by synchronising its stream, an event after it, or the legacy stream).
// Streams made to wait for an event after it (cudaStreamWaitEvent) are ordered after it.
struct Access {
  std::uintptr_t begin = 0, end = 0;
  cudaStream_t stream = nullptr;
  std::uint64_t seq = 0;  // when it was queued (State::seq)
  bool write = false;
  std::vector<cudaStream_t> ordered_before;
};

struct Allocation {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;   // as requested
  std::size_t mapped = 0;  // rounded up to pages
  int device = 0;
  std::vector<Access> pending;  // accesses not yet ordered before everything that follows
};

// A cudaHostAlloc block. While an asynchronous copy from it (H2D) is in flight, host writes
// fault; while one into it (D2H) is, any host access faults. "In flight" ends when its
// stream, or the device, is synchronised.
struct PinnedBlock {
  std::size_t bytes = 0;
  std::size_t mapped = 0;  // rounded up to pages
  int device = 0;
  std::set<cudaStream_t> reading, writing;  // streams with a copy from / into it in flight
};

struct State {
  std::mutex mutex;
  std::map<std::uintptr_t, Allocation> allocations;  // by base address
  std::set<const CUstream_st*> streams;
  std::set<const CUevent_st*> events;
  std::set<const cublasContext*> handles;
  std::map<std::uintptr_t, std::size_t> registered;  // page-locked host ranges: base -> bytes
  std::map<std::uintptr_t, PinnedBlock> pinned;      // cudaHostAlloc blocks, by base address
  std::size_t rejected = 0;
  std::string last_rejection;
  std::uint64_t seq = 0;  // counts queued calls, to place events among accesses
};

State& state() {
  static State* s = new State;  // never destroyed: destructors of static objects may still free
  return *s;
}

thread_local int t_device = 0;

int device_count() {
  const char* env = std::getenv("ANTDT_EMULATED_CUDA_DEVICES");
  const int n = env != nullptr ? std::atoi(env) : 1;
  return n > 0 ? n : 1;
}

// Records and prints why a call was refused. Caller holds the mutex.
void reject(State& s, const char* api, const std::string& why) {
  ++s.rejected;
  s.last_rejection = std::string(api) + ": " + why;
  std::fprintf(stderr, "antdt emulated CUDA: %s\n", s.last_rejection.c_str());
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// The block of `blocks` (by base address, each with a `bytes` size) holding address p, or end().
template <class Blocks>
typename Blocks::iterator containing(Blocks& blocks, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = blocks.upper_bound(a);
  if (it == blocks.begin()) return blocks.end();
  --it;
  return a < it->first + it->second.bytes ? it : blocks.end();
}

// The allocation holding address p, or nullptr.
Allocation* find(State& s, const void* p) {
  const auto it = containing(s.allocations, p);
  return it == s.allocations.end() ? nullptr : &it->second;
}

// The pinned block holding address p, or end().
std::map<std::uintptr_t, PinnedBlock>::iterator find_pinned(State& s, const void* p) { return containing(s.pinned, p); }

bool stream_ok(State& s, cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread ||
         s.streams.count(stream) > 0;
}

// The legacy default stream waits for all work of the device's blocking streams, and they wait
// for it (every stream antdt creates is blocking).
bool is_legacy(cudaStream_t stream) { return stream == nullptr || stream == cudaStreamLegacy; }

std::string stream_name(cudaStream_t stream) {
  return is_legacy(stream) ? "the legacy stream" : "stream " + hex(stream);
}

bool in_flight(const PinnedBlock& b) { return !b.reading.empty() || !b.writing.empty(); }

// The host's access to a pinned block: none while a copy into it is in flight, read-only while
// one from it is, else full.
void guard_pinned(std::uintptr_t base, const PinnedBlock& b) {
  const int prot = !b.writing.empty() ? PROT_NONE : !b.reading.empty() ? PROT_READ : PROT_READ | PROT_WRITE;
  if (mprotect(reinterpret_cast<void*>(base), b.mapped, prot) != 0) std::abort();
}

// The copies in flight on `stream` (every stream of the device when it is the legacy stream,
// whose synchronisation waits for all blocking streams) are done: their pinned blocks are the
// host's again.
void complete_copies(State& s, cudaStream_t stream) {
  for (auto& [base, b] : s.pinned) {
    if (b.device != t_device || !in_flight(b)) continue;
    if (is_legacy(stream)) {
      b.reading.clear();
      b.writing.clear();
    } else {
      b.reading.erase(stream);
      b.writing.erase(stream);
    }
    guard_pinned(base, b);
  }
}

// Device memory is PROT_NONE, and pinned blocks with copies in flight are guarded, except
// inside one of these: only emulated API calls touch them.
class DeviceAccess {
 public:
  explicit DeviceAccess(State& s) : s_(s) { protect(PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE); }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
  ~DeviceAccess() { protect(PROT_NONE, -1); }

 private:
  // Device memory gets `device_prot`; pinned blocks with copies in flight get `pinned_prot`,
  // or (-1) their guard back. Blocks without copies in flight are never guarded.
  void protect(int device_prot, int pinned_prot) {
    for (const auto& [base, a] : s_.allocations) {
      if (mprotect(reinterpret_cast<void*>(base), a.mapped, device_prot) != 0) std::abort();
    }
    for (const auto& [base, b] : s_.pinned) {
      if (!in_flight(b)) continue;
      if (pinned_prot < 0) {
        guard_pinned(base, b);
      } else if (mprotect(reinterpret_cast<void*>(base), b.mapped, pinned_prot) != 0) {
        std::abort();
      }
    }
  }
  State& s_;
};

// Every access still pending on the current device is done: the legacy stream has waited for
// all blocking streams (a legacy-stream call, or synchronising the device).
void order_device_accesses(State& s) {
  for (auto& [base, a] : s.allocations) {
    if (a.device == t_device) a.pending.clear();
  }
}

// The accesses queued on `stream` up to `seq` are done (their stream or an event after them
// was synchronised).
void order_stream_accesses(State& s, cudaStream_t stream, std::uint64_t seq) {
  for (auto& [base, a] : s.allocations) {
    std::erase_if(a.pending, [&](const Access& x) { return x.stream == stream && x.seq <= seq; });
  }
}

enum class Use { read, write };

// One emulated API call that enqueues work on `stream`: declare the memory it reads and writes,
// check(), run the work, then commit(). The checks are those of emulated_cuda.hpp, plus stream
// order: work on a stream must not touch device memory whose last write was queued on another
// stream and not yet ordered before it (a stream synchronisation, or the legacy stream). The
// emulator runs everything at once, so such a race would pass unnoticed otherwise; on a GPU it
// reads stale or half-written data.
class Call {
 public:
  Call(State& s, const char* api, cudaStream_t stream) : s_(s), api_(api), stream_(stream) {
    if (!stream_ok(s, stream)) fail("invalid stream " + hex(stream));
  }

  Call& device(const void* p, std::size_t bytes, const char* what, Use use) {
    if (bytes == 0 || !error_.empty()) return *this;
    Allocation* al = find(s_, p);
    if (al == nullptr) return fail(std::string(what) + " " + hex(p) + " is not device memory");
    const auto base = reinterpret_cast<std::uintptr_t>(p), start = al->base;
    if (base + bytes > start + al->bytes) {
      return fail(std::string(what) + " " + hex(p) + ": " + std::to_string(bytes) + " bytes run past the end of its " +
                  std::to_string(al->bytes) + "-byte allocation (offset " + std::to_string(base - start) + ")");
    }
    if (al->device != t_device) {
      return fail(std::string(what) + " " + hex(p) + " is on device " + std::to_string(al->device) + " but device " +
                  std::to_string(t_device) + " is current");
    }
    if (!is_legacy(stream_)) {
      for (const Access& x : al->pending) {
        const bool overlaps = x.begin < base + bytes && base < x.end;
        if (!overlaps || x.stream == stream_ || !(x.write || use == Use::write)) continue;
        if (std::find(x.ordered_before.begin(), x.ordered_before.end(), stream_) != x.ordered_before.end()) continue;
        return fail(std::string(what) + " " + hex(p) + " was " + (x.write ? "written" : "read") + " by work on " +
                    stream_name(x.stream) + " that is not ordered before this call on " + stream_name(stream_) +
                    " (synchronise that stream, or wait for an event after it, first): a race on a GPU" +
                    (x.write ? "" : " (write after read)"));
      }
    }
    accessed_.push_back({al, base, base + bytes, use});
    return *this;
  }

  Call& host(const void* p, std::size_t bytes, const char* what) {
    if (bytes == 0 || !error_.empty()) return *this;
    if (p == nullptr) return fail(std::string(what) + " is null");
    if (find(s_, p) != nullptr) return fail(std::string(what) + " " + hex(p) + " is device memory, not host memory");
    return *this;
  }

  Call& expect(bool condition, const std::string& why) { return condition ? *this : fail(why); }

  // False (and the call is rejected) when any declaration failed.
  bool check() {
    if (error_.empty()) return true;
    reject(s_, api_, error_);
    return false;
  }

  // Does the checked call's work with device memory accessible, then commits. Returns the
  // work's status.
  template <class Work>
  auto run(Work work) {
    const auto status = [&] {
      DeviceAccess access(s_);
      return work();
    }();
    commit();
    return status;
  }

  // The work is done: a legacy-stream call has waited for every stream and is itself ordered
  // before all later work; other calls leave their writes pending on their stream.
  void commit() {
    if (is_legacy(stream_)) {
      order_device_accesses(s_);
      return;
    }
    const std::uint64_t seq = ++s_.seq;
    for (const Declared& d : accessed_) {
      d.allocation->pending.push_back(Access{d.begin, d.end, stream_, seq, d.use == Use::write, {}});
    }
  }

 private:
  Call& fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return *this;
  }
  State& s_;
  const char* api_;
  cudaStream_t stream_;
  struct Declared {
    Allocation* allocation;
    std::uintptr_t begin, end;
    Use use;
  };
  std::string error_;
  std::vector<Declared> accessed_;
};

std::size_t page() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }
std::size_t whole_pages(std::size_t bytes) { return (bytes + page() - 1) / page() * page(); }

// Bytes spanned by a column-major rows x cols matrix with leading dimension ld.
std::size_t matrix_bytes(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<std::size_t>(cols - 1) * static_cast<std::size_t>(ld) + static_cast<std::size_t>(rows)) *
         sizeof(float);
}

std::size_t vector_bytes(int length, int inc) {
  if (length == 0) return 0;
  return (static_cast<std::size_t>(length - 1) * static_cast<std::size_t>(inc < 0 ? -inc : inc) + 1) * sizeof(float);
}

// Streams and events: heap objects whose live set catches use after destroy.
template <class T, class... Args>
cudaError_t create_handle(T** out, std::set<const T*> State::*live, Args... args) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *out = new T{args...};
  (s.*live).insert(*out);
  return cudaSuccess;
}

template <class T>
cudaError_t destroy_handle(T* handle, std::set<const T*> State::*live, const char* api) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if ((s.*live).erase(handle) == 0) {
    reject(s, api, "not a live handle");
    return cudaErrorInvalidResourceHandle;
  }
  delete handle;
  return cudaSuccess;
}

// cudaFree and cudaFreeHost: waits for the device, then unmaps the block that starts at ptr
// and forgets it; a pointer that starts no live block of `blocks` is rejected. Locked by the
// caller.
template <class Blocks>
cudaError_t release_mapped(State& s, Blocks& blocks, void* ptr, const char* api, const char* what) {
  if (ptr == nullptr) return cudaSuccess;
  auto it = blocks.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == blocks.end()) {
    reject(s, api, hex(ptr) + " is not the start of a live " + what);
    return cudaErrorInvalidValue;
  }
  complete_copies(s, nullptr);
  munmap(ptr, it->second.mapped);
  blocks.erase(it);
  return cudaSuccess;
}

}  // namespace

namespace antdt::emulated_cuda {
std::size_t live_allocations() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.allocations.size();
}
std::size_t live_bytes() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::size_t total = 0;
  for (const auto& [base, a] : s.allocations) total += a.bytes;
  return total;
}
std::size_t rejected_calls() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.rejected;
}
std::size_t registered_host_ranges() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.registered.size();
}
std::size_t pinned_host_blocks() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.pinned.size();
}
std::string last_rejection() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.last_rejection;
}
}  // namespace antdt::emulated_cuda

// ---- CUDA runtime ---------------------------------------------------------------------------
extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    reject(s, "cudaSetDevice", "no device " + std::to_string(device));
    return cudaErrorInvalidDevice;
  }
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "antdt emulated CUDA device %d (host memory)", device);
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = kDeviceMemory;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::size_t used = 0;
  for (const auto& [base, a] : s.allocations) used += a.device == t_device ? a.mapped : 0;
  *total_bytes = kDeviceMemory;
  *free_bytes = used < kDeviceMemory ? kDeviceMemory - used : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  const std::size_t mapped = whole_pages(bytes);
  void* p = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  s.allocations[base] = Allocation{base, bytes, mapped, t_device, {}};
  *ptr = p;
  return cudaSuccess;
}

// cudaFree waits for the device, as the real one does.
cudaError_t cudaFree(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return release_mapped(s, s.allocations, ptr, "cudaFree", "device allocation");
}

// Pinned host memory: mapped pages, tracked so that host access during an asynchronous copy
// faults (see PinnedBlock). ANTDT_EMULATED_CUDA_PIN_LIMIT (bytes) caps the live total, as a
// memlock limit does; past it the allocation fails with cudaErrorMemoryAllocation.
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned int /*flags*/) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  std::size_t live = 0;
  for (const auto& [base, b] : s.pinned) live += b.mapped;
  const std::size_t mapped = whole_pages(bytes);
  if (const char* limit = std::getenv("ANTDT_EMULATED_CUDA_PIN_LIMIT");
      limit != nullptr && live + mapped > std::strtoull(limit, nullptr, 10)) {
    return cudaErrorMemoryAllocation;
  }
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  PinnedBlock block;
  block.bytes = bytes;
  block.mapped = mapped;
  block.device = t_device;
  s.pinned[reinterpret_cast<std::uintptr_t>(p)] = std::move(block);
  *ptr = p;
  return cudaSuccess;
}

// Waits for the device first, as cudaFree does.
cudaError_t cudaFreeHost(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return release_mapped(s, s.pinned, ptr, "cudaFreeHost", "cudaHostAlloc block");
}

namespace {
// cudaMemcpy and cudaMemcpyAsync. An asynchronous copy from or into a pinned block stays in
// flight until its stream is synchronised (from pageable memory the driver stages the data
// before returning, so those are safe to reuse at once). cudaMemcpy returns once its copy is
// done, and a legacy-stream copy starts only after the device's earlier work, so that is done
// too; except from pageable memory to the device, where it may return once the data is
// staged, before the earlier work has finished.
cudaError_t memcpy_on(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                      bool async) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (kind == cudaMemcpyDefault) {
    const bool d = find(s, dst) != nullptr, sr = find(s, src) != nullptr;
    kind = d ? (sr ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
             : (sr ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  Call call(s, "cudaMemcpy", stream);
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
    call.device(dst, bytes, "destination", Use::write);
  } else {
    call.host(dst, bytes, "destination");
  }
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) {
    call.device(src, bytes, "source", Use::read);
  } else {
    call.host(src, bytes, "source");
  }
  if (!call.check()) return cudaErrorInvalidValue;
  const cudaError_t status = call.run([&] {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
  if (!async) {
    if (kind != cudaMemcpyHostToDevice || find_pinned(s, src) != s.pinned.end()) complete_copies(s, nullptr);
  } else if (bytes > 0) {
    if (auto from = find_pinned(s, src); kind == cudaMemcpyHostToDevice && from != s.pinned.end()) {
      from->second.reading.insert(stream);
      guard_pinned(from->first, from->second);
    }
    if (auto into = find_pinned(s, dst); kind == cudaMemcpyDeviceToHost && into != s.pinned.end()) {
      into->second.writing.insert(stream);
      guard_pinned(into->first, into->second);
    }
  }
  return status;
}
}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return memcpy_on(dst, src, bytes, kind, stream, true);
}

// Synchronous with respect to the host for device memory, on the legacy stream.
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) { return cudaMemsetAsync(ptr, value, bytes, nullptr); }

cudaError_t cudaDeviceSynchronize() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  order_device_accesses(s);
  complete_copies(s, nullptr);
  return cudaSuccess;
}

// Synchronous: on the legacy stream, and complete on return.
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return memcpy_on(dst, src, bytes, kind, nullptr, false);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Call call(s, "cudaMemsetAsync", stream);
  if (!call.device(ptr, bytes, "destination", Use::write).check()) return cudaErrorInvalidValue;
  return call.run([&] {
    if (bytes > 0) std::memset(ptr, value, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return create_handle(stream, &State::streams, t_device); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return destroy_handle(stream, &State::streams, "cudaStreamDestroy");
}

// Work runs when it is enqueued; synchronising orders the stream's writes before everything
// that follows.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!stream_ok(s, stream)) {
    reject(s, "cudaStreamSynchronize", "not a live stream");
    return cudaErrorInvalidResourceHandle;
  }
  if (is_legacy(stream)) {
    order_device_accesses(s);
  } else {
    order_stream_accesses(s, stream, s.seq);
  }
  complete_copies(s, stream);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return create_handle(event, &State::events); }

cudaError_t cudaEventDestroy(cudaEvent_t event) { return destroy_handle(event, &State::events, "cudaEventDestroy"); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.count(event) == 0 || !stream_ok(s, stream)) {
    reject(s, "cudaEventRecord", "not a live event or stream");
    return cudaErrorInvalidResourceHandle;
  }
  event->recorded = std::chrono::steady_clock::now();
  event->stream = stream;
  event->seq = s.seq;
  return cudaSuccess;
}

namespace {
// cudaEventSynchronize and cudaEventQuery: a recorded event is complete at once (its stream's
// work ran when it was queued), and so are the copies queued on that stream.
cudaError_t complete_event(cudaEvent_t event, const char* api) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.count(event) == 0) {
    reject(s, api, "not a live event");
    return cudaErrorInvalidResourceHandle;
  }
  if (!event->recorded) return cudaSuccess;
  if (is_legacy(event->stream)) {
    order_device_accesses(s);
  } else {
    order_stream_accesses(s, event->stream, event->seq);
  }
  complete_copies(s, event->stream);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return complete_event(event, "cudaEventSynchronize"); }

cudaError_t cudaEventQuery(cudaEvent_t event) { return complete_event(event, "cudaEventQuery"); }

// Work queued on `stream` from now on runs after the work queued before `event`.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.count(event) == 0 || !stream_ok(s, stream)) {
    reject(s, "cudaStreamWaitEvent", "not a live event or stream");
    return cudaErrorInvalidResourceHandle;
  }
  if (!event->recorded) return cudaSuccess;
  for (auto& [base, a] : s.allocations) {
    for (Access& x : a.pending) {
      if ((is_legacy(event->stream) || x.stream == event->stream) && x.seq <= event->seq) {
        x.ordered_before.push_back(stream);
      }
    }
  }
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.events.count(start) == 0 || s.events.count(end) == 0) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) {
    reject(s, "cudaEventElapsedTime", "an event was never recorded");
    return cudaErrorInvalidResourceHandle;
  }
  *ms = std::chrono::duration<float, std::milli>(*end->recorded - *start->recorded).count();
  return cudaSuccess;
}

// Page-locking host memory: nothing to lock here, but the ranges are tracked so that a double
// registration, an overlap, device memory or an unknown unregistration is refused, as by CUDA.
cudaError_t cudaHostRegister(void* ptr, std::size_t bytes, unsigned int /*flags*/) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto base = reinterpret_cast<std::uintptr_t>(ptr);
  if (ptr == nullptr || bytes == 0 || find(s, ptr) != nullptr) {
    reject(s, "cudaHostRegister", hex(ptr) + ": not a non-empty range of host memory");
    return cudaErrorInvalidValue;
  }
  if (find_pinned(s, ptr) != s.pinned.end()) {
    reject(s, "cudaHostRegister", hex(ptr) + " lies in a cudaHostAlloc block, which is page-locked already");
    return cudaErrorHostMemoryAlreadyRegistered;
  }
  auto next = s.registered.lower_bound(base);
  const bool overlaps_next = next != s.registered.end() && next->first < base + bytes;
  const bool overlaps_prev = next != s.registered.begin() && std::prev(next)->first + std::prev(next)->second > base;
  if (overlaps_next || overlaps_prev) {
    reject(s, "cudaHostRegister", hex(ptr) + " overlaps a range that is already registered");
    return cudaErrorHostMemoryAlreadyRegistered;
  }
  s.registered[base] = bytes;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.registered.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
    reject(s, "cudaHostUnregister", hex(ptr) + " is not the start of a registered range");
    return cudaErrorHostMemoryNotRegistered;
  }
  return cudaSuccess;
}

// The launchers return their errors directly; nothing is ever left pending.
cudaError_t cudaGetLastError() { return cudaSuccess; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorHostMemoryAlreadyRegistered:
      return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered:
      return "cudaErrorHostMemoryNotRegistered";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "rejected by the emulated CUDA device (see its message on stderr)";
}

// ---- cuBLAS ---------------------------------------------------------------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *handle = new cublasContext{nullptr, t_device};
  s.handles.insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.handles.erase(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.handles.count(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream_ok(s, stream)) {
    reject(s, "cublasSetStream", "not a live stream");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// Column-major C = alpha op(A) op(B) + beta C, with cuBLAS's argument checks.
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.handles.count(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  Call call(s, "cublasSgemm", handle->stream);
  call.expect(
      m >= 0 && n >= 0 && k >= 0 && lda >= std::max(1, a_rows) && ldb >= std::max(1, b_rows) && ldc >= std::max(1, m),
      "invalid sizes m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
          " lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) + " ldc=" + std::to_string(ldc));
  call.host(alpha, sizeof(float), "alpha").host(beta, sizeof(float), "beta");
  // The ranges are checked only for valid sizes (Call skips declarations after a failure).
  call.device(A, matrix_bytes(a_rows, a_cols, lda), "A", Use::read)
      .device(B, matrix_bytes(b_rows, b_cols, ldb), "B", Use::read)
      .device(C, matrix_bytes(m, n, ldc), "C", Use::write);
  if (!call.check()) return CUBLAS_STATUS_INVALID_VALUE;
  return call.run([&] {
    if (m > 0 && n > 0) {
      cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, *alpha, A,
                  lda, B, ldb, *beta, C, ldc);
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}

cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float* alpha,
                              const float* A, int lda, const float* x, int incx, const float* beta, float* y,
                              int incy) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.handles.count(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool t = trans != CUBLAS_OP_N;
  Call call(s, "cublasSgemv", handle->stream);
  call.expect(m >= 0 && n >= 0 && lda >= std::max(1, m) && incx != 0 && incy != 0,
              "invalid sizes m=" + std::to_string(m) + " n=" + std::to_string(n) + " lda=" + std::to_string(lda));
  call.host(alpha, sizeof(float), "alpha").host(beta, sizeof(float), "beta");
  call.device(A, matrix_bytes(m, n, lda), "A", Use::read)
      .device(x, vector_bytes(t ? m : n, incx), "x", Use::read)
      .device(y, vector_bytes(t ? n : m, incy), "y", Use::write);
  if (!call.check()) return CUBLAS_STATUS_INVALID_VALUE;
  return call.run([&] {
    if (m > 0 && n > 0) {
      cblas_sgemv(CblasColMajor, t ? CblasTrans : CblasNoTrans, m, n, *alpha, A, lda, x, incx, *beta, y, incy);
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    default:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "rejected by the emulated cuBLAS (see its message on stderr)";
}

// ---- NCCL -----------------------------------------------------------------------------------
#if ANTDT_HAVE_NCCL

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  const auto seed = static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                    static_cast<std::uint32_t>(getpid());
  std::memcpy(id->internal, &seed, sizeof seed);
  std::snprintf(id->internal + sizeof seed, sizeof id->internal - sizeof seed, "antdt-emulated");
  return ncclSuccess;
}

// Collective over MPI_COMM_WORLD: the communicator is the world split by the id.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (std::strcmp(id.internal + sizeof(std::uint32_t), "antdt-emulated") != 0) return ncclInvalidArgument;
  std::uint32_t seed = 0;
  std::memcpy(&seed, id.internal, sizeof seed);
  MPI_Comm split = MPI_COMM_NULL;
  if (MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(seed & 0x7fffffffU), rank, &split) != MPI_SUCCESS) {
    return ncclSystemError;
  }
  int size = 0, me = 0;
  MPI_Comm_size(split, &size);
  MPI_Comm_rank(split, &me);
  if (size != nranks || me != rank) {
    MPI_Comm_free(&split);
    return ncclInvalidArgument;
  }
  *comm = new ncclComm{split, t_device};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::size_t bytes = count * sizeof(float);
  Call call(s, "ncclAllReduce", stream);
  call.expect(type == ncclFloat && op == ncclSum, "only float sums are emulated")
      .expect(comm->device == t_device,
              "communicator of device " + std::to_string(comm->device) + " used on device " + std::to_string(t_device))
      .device(send, bytes, "send buffer", Use::read)
      .device(recv, bytes, "receive buffer", Use::write);
  if (!call.check()) return ncclInvalidArgument;
  return call.run([&] {
    const int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                 comm->comm);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
  });
}

const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "rejected by the emulated NCCL (see its message on stderr)";
}

#endif  // ANTDT_HAVE_NCCL
}  // extern "C"

// ---- the launchers of kernels/cuda/mlp_kernels.hpp -----------------------------------------
namespace antdt::cuda {
namespace {

std::size_t floats(std::int64_t count) { return static_cast<std::size_t>(count) * sizeof(float); }

// A checked call's kernel: body(i) for every element, as the grid-stride loops of
// mlp_kernels.cu do.
template <class Body>
cudaError_t for_each_element(Call& call, std::int64_t count, Body body) {
  return call.run([&] {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return cudaSuccess;
  });
}

}  // namespace

cudaError_t bias_activation(cudaStream_t stream, float* z, const float* b, std::int64_t n, std::int64_t width,
                            bool relu) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (n * width == 0) return cudaSuccess;
  Call call(s, "bias_activation", stream);
  if (!call.device(z, floats(n * width), "z", Use::write).device(b, floats(width), "b", Use::read).check()) {
    return cudaErrorInvalidValue;
  }
  return for_each_element(call, n * width, [&](std::int64_t i) { math::bias_activation(z, b, i, width, relu); });
}

cudaError_t softmax_cross_entropy(cudaStream_t stream, float* logits, const std::int32_t* labels, std::int64_t n,
                                  std::int64_t classes, bool write_gradient, math::BatchTotals* totals) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (n == 0) return cudaSuccess;
  Call call(s, "softmax_cross_entropy", stream);
  call.device(logits, floats(n * classes), "logits", Use::write)
      .device(labels, static_cast<std::size_t>(n) * sizeof(std::int32_t), "labels", Use::read)
      .device(totals, sizeof(math::BatchTotals), "totals", Use::write);
  if (!call.check()) return cudaErrorInvalidValue;
  DeviceAccess access(s);
  for (std::int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      reject(s, "softmax_cross_entropy",
             "label " + std::to_string(labels[i]) + " of row " + std::to_string(i) + " is outside [0, " +
                 std::to_string(classes) + "): the kernel would read out of bounds");
      return cudaErrorInvalidValue;
    }
  }
  double loss = 0.0;
  unsigned int hits = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    math::softmax_cross_entropy_row(logits + i * classes, classes, labels[i], write_gradient, loss, hits);
  }
  totals->loss_sum += loss;
  totals->correct += hits;
  call.commit();
  return cudaSuccess;
}

cudaError_t relu_mask(cudaStream_t stream, float* delta, const float* activation, std::int64_t count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count == 0) return cudaSuccess;
  Call call(s, "relu_mask", stream);
  call.device(delta, floats(count), "delta", Use::write).device(activation, floats(count), "activation", Use::read);
  if (!call.check()) return cudaErrorInvalidValue;
  return for_each_element(call, count, [&](std::int64_t i) { math::relu_mask(delta, activation, i); });
}

cudaError_t add_sample_count(cudaStream_t stream, float* slots, std::int64_t n) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Call call(s, "add_sample_count", stream);
  // Read and written: a write is checked against every other stream's reads and writes.
  if (!call.device(slots, floats(kSampleCountSlots), "count slots", Use::write).check()) return cudaErrorInvalidValue;
  return for_each_element(call, 1, [&](std::int64_t) { antdt::add_sample_count(slots, n); });
}

cudaError_t fill(cudaStream_t stream, float* x, float value, std::int64_t count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count == 0) return cudaSuccess;
  Call call(s, "fill", stream);
  if (!call.device(x, floats(count), "x", Use::write).check()) return cudaErrorInvalidValue;
  return for_each_element(call, count, [&](std::int64_t i) { x[i] = value; });
}

cudaError_t flag_non_finite(cudaStream_t stream, const float* x, std::int64_t count, unsigned int* flag) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count == 0) return cudaSuccess;
  Call call(s, "flag_non_finite", stream);
  if (!call.device(x, floats(count), "x", Use::read).device(flag, sizeof(unsigned int), "flag", Use::write).check()) {
    return cudaErrorInvalidValue;
  }
  return for_each_element(call, count, [&](std::int64_t i) {
    if (math::non_finite(x[i])) *flag = 1u;
  });
}

cudaError_t prepare_update(cudaStream_t stream, const float* count_slots, std::int64_t* steps, float beta1, float beta2,
                           math::UpdateCoefficients* out) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Call call(s, "prepare_update", stream);
  call.device(count_slots, floats(kSampleCountSlots), "count slots", Use::read)
      .device(steps, sizeof(std::int64_t), "step counter", Use::write)
      .device(out, sizeof(math::UpdateCoefficients), "coefficients", Use::write);
  if (!call.check()) return cudaErrorInvalidValue;
  return for_each_element(call, 1, [&](std::int64_t) {
    math::update_coefficients(antdt::decode_sample_count(count_slots), *steps, beta1, beta2, *out);
  });
}

cudaError_t sgd_step(cudaStream_t stream, float* p, float* momentum, const float* grad_sum, std::int64_t count,
                     const math::UpdateCoefficients* k, float lr, float mu, float wd) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count == 0) return cudaSuccess;
  Call call(s, "sgd_step", stream);
  call.device(p, floats(count), "parameters", Use::write)
      .device(momentum, floats(count), "momentum", Use::write)
      .device(grad_sum, floats(count), "gradient sums", Use::read)
      .device(k, sizeof(math::UpdateCoefficients), "coefficients", Use::read);
  if (!call.check()) return cudaErrorInvalidValue;
  return for_each_element(call, count, [&](std::int64_t i) {
    if (k->active != 0) math::sgd(p, momentum, grad_sum, i, k->inv_count, lr, mu, wd);
  });
}

cudaError_t adam_step(cudaStream_t stream, float* p, float* m, float* v, const float* grad_sum, std::int64_t count,
                      const math::UpdateCoefficients* k, float lr, float beta1, float beta2, float eps, float wd) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count == 0) return cudaSuccess;
  Call call(s, "adam_step", stream);
  call.device(p, floats(count), "parameters", Use::write)
      .device(m, floats(count), "first moments", Use::write)
      .device(v, floats(count), "second moments", Use::write)
      .device(grad_sum, floats(count), "gradient sums", Use::read)
      .device(k, sizeof(math::UpdateCoefficients), "coefficients", Use::read);
  if (!call.check()) return cudaErrorInvalidValue;
  return for_each_element(call, count, [&](std::int64_t i) {
    if (k->active != 0) math::adam(p, m, v, grad_sum, i, k->inv_count, lr, beta1, beta2, eps, wd, k->c1, k->c2);
  });
}

}  // namespace antdt::cuda
