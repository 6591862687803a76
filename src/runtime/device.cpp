#include "runtime/device.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "core/log.hpp"

#if ANTDT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace antdt {

std::string_view backend_name(Backend backend) noexcept { return backend == Backend::cuda ? "cuda" : "host"; }

DevicePreference parse_device_preference(std::string_view text) {
  if (text == "auto") return DevicePreference::automatic;
  if (text == "host" || text == "cpu") return DevicePreference::host;
  if (text == "cuda" || text == "gpu") return DevicePreference::cuda;
  throw UsageError("invalid device '" + std::string(text) + "': use auto, host or cuda");
}

namespace {
// Why CUDA cannot be used, or "" when it can. `no_gpu`: the reason is only that this machine
// has no GPU or no driver (the common, expected case on a CPU-only host).
std::string cuda_unavailable_reason(int& count, bool* no_gpu = nullptr) {
  count = 0;
  if (no_gpu != nullptr) *no_gpu = false;
#if ANTDT_HAVE_CUDA
  // Without a driver this returns cudaErrorInsufficientDriver (35) and leaves the count
  // unset (CUDA 13 on GPU-less machines), so the count is initialised above.
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later probes start clean
    if (no_gpu != nullptr) *no_gpu = rc == cudaErrorInsufficientDriver || rc == cudaErrorNoDevice;
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")";
  }
  if (n <= 0) {
    if (no_gpu != nullptr) *no_gpu = true;
    return "no CUDA device is visible (cudaGetDeviceCount returned 0)";
  }
  count = n;
  return "";
#else
  return "this build of antdt has no CUDA support (ANTDT_ENABLE_CUDA=OFF)";
#endif
}

std::atomic<bool> g_reported{false};
}  // namespace

int cuda_device_count() noexcept {
  int count = 0;
  try {
    (void)cuda_unavailable_reason(count);
  } catch (...) {
    count = 0;
  }
  return count;
}

DeviceInfo select_device([[maybe_unused]] int local_rank, DevicePreference preference) {
  DeviceInfo info;
  info.name = "host (BLAS sgemm";
  info.name += ANTDT_HAVE_KOKKOS ? " + Kokkos)" : ")";
  int count = 0;
  bool no_gpu = false;
  const std::string why_not = cuda_unavailable_reason(count, &no_gpu);
  info.device_count = count;

  if (preference == DevicePreference::host) {
    info.reason = "host backend requested";
  } else if (!why_not.empty()) {
    if (preference == DevicePreference::cuda) throw DeviceError("CUDA backend requested but unusable: " + why_not);
    // On a CPU-only host, one plain line; CUDA's own words where a GPU should have worked.
    info.reason = no_gpu ? "no GPU visible: using the host backend" : "using the host backend: " + why_not;
  } else {
#if ANTDT_HAVE_CUDA
    const int id = (local_rank < 0 ? 0 : local_rank) % count;
    ANTDT_CHECK_CUDA(cudaSetDevice(id));
    cudaDeviceProp prop{};
    ANTDT_CHECK_CUDA(cudaGetDeviceProperties(&prop, id));
    std::size_t free_b = 0, total_b = 0;
    ANTDT_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    info.backend = Backend::cuda;
    info.device_id = id;
    info.name = prop.name;
    info.compute_capability = prop.major * 10 + prop.minor;
    info.free_memory = free_b;
    info.total_memory = total_b;
    info.reason =
        "local rank " + std::to_string(local_rank) + " -> GPU " + std::to_string(id) + " of " + std::to_string(count);
#endif
  }
  if (!g_reported.exchange(true)) {
    // Once per process; at info level only on rank 0 (or untagged), so a job prints it once.
    if (log::rank() <= 0) {
      ANTDT_LOG(info) << "device: " << backend_name(info.backend) << " [" << info.name << "]: " << info.reason;
    } else {
      ANTDT_LOG(debug) << "device: " << backend_name(info.backend) << " [" << info.name << "]: " << info.reason;
    }
  }
  return info;
}

namespace detail {
namespace {
constexpr std::align_val_t kHostAlignment{64};

// The pinned blocks handed out and not yet freed: free_host tells the two kinds apart by it.
struct PinnedBlocks {
  std::mutex mutex;
  std::unordered_set<const void*> blocks;
};
// Used only where CUDA is built; a host-only build (the asan preset) has no pinned blocks.
[[maybe_unused]] PinnedBlocks& pinned_blocks() {
  static auto* blocks = new PinnedBlocks;  // never destroyed: static vectors may free after exit
  return *blocks;
}
[[maybe_unused]] std::atomic<bool> g_pin_failure_reported{false};
}  // namespace

void* allocate_host(std::size_t bytes, [[maybe_unused]] bool page_locked) {
#if ANTDT_HAVE_CUDA
  if (page_locked && bytes > 0) {
    void* p = nullptr;
    // Portable: pinned for every CUDA context of the process, not only the current device's.
    const cudaError_t rc = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (rc == cudaSuccess) {
      PinnedBlocks& pinned = pinned_blocks();
      std::lock_guard lock(pinned.mutex);
      pinned.blocks.insert(p);
      return p;
    }
    cudaGetLastError();  // not sticky, but leave nothing for a later check to pick up
    if (!g_pin_failure_reported.exchange(true)) {
      ANTDT_LOG(warn) << "page-locking " << bytes << " bytes of host memory failed (" << cudaGetErrorName(rc)
                      << "): batches stay in pageable memory, so host-to-device copies go through the driver's "
                         "staging buffer (slower); raise the memlock limit (ulimit -l) to pin them";
    }
  }
#endif
  return ::operator new(bytes, kHostAlignment);
}

void free_host(void* p) noexcept {
  if (p == nullptr) return;
#if ANTDT_HAVE_CUDA
  {
    PinnedBlocks& pinned = pinned_blocks();
    std::lock_guard lock(pinned.mutex);
    if (pinned.blocks.erase(p) > 0) {
      (void)cudaFreeHost(p);  // a failure here means the context is gone; nothing to do
      return;
    }
  }
#endif
  ::operator delete(p, kHostAlignment);
}

bool is_page_locked([[maybe_unused]] const void* p) noexcept {
#if ANTDT_HAVE_CUDA
  PinnedBlocks& pinned = pinned_blocks();
  std::lock_guard lock(pinned.mutex);
  return pinned.blocks.count(p) > 0;
#else
  return false;
#endif
}

}  // namespace detail
}  // namespace antdt
