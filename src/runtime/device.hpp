// Device discovery and selection. Each rank picks GPU (local_rank % device_count). When the
// build has no CUDA, when cudaGetDeviceCount fails (no driver, error 35 on GPU-less
// machines) or returns 0, the rank uses the host backend; the reason is reported once.
#pragma once

#include <cstddef>
#include <limits>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

namespace antdt {

enum class Backend { host, cuda };

enum class DevicePreference {
  automatic,  // CUDA when a device is present, else host
  host,       // always host
  cuda,       // CUDA or DeviceError
};

struct DeviceInfo {
  Backend backend = Backend::host;
  int device_id = -1;          // CUDA ordinal, -1 on host
  int device_count = 0;        // CUDA devices visible to this process
  std::string name;            // "NVIDIA H200" or "host (OpenBLAS + Kokkos Serial)"
  int compute_capability = 0;  // 90 for sm_90, 0 on host
  std::size_t total_memory = 0;
  std::size_t free_memory = 0;
  std::string reason;  // why this backend was chosen
};

[[nodiscard]] std::string_view backend_name(Backend backend) noexcept;
// Parses "auto", "host", "cuda"; throws UsageError otherwise.
[[nodiscard]] DevicePreference parse_device_preference(std::string_view text);

// Number of CUDA devices this process can use; 0 on any error or without CUDA support.
[[nodiscard]] int cuda_device_count() noexcept;

// Chooses and (for CUDA) activates the device for this rank. Logs the choice once per
// process at info level. Throws DeviceError if `preference` is cuda and none can be used.
[[nodiscard]] DeviceInfo select_device(int local_rank, DevicePreference preference = DevicePreference::automatic);

namespace detail {
// Host memory of `bytes` bytes, aligned for any type the batches hold. With `page_locked`
// in a CUDA build it is pinned (cudaHostAlloc); if the system refuses to pin it (a memlock
// limit, a container runtime), ordinary memory is returned and a warning says so once. Throws
// std::bad_alloc when no memory is left. free_host takes either kind.
[[nodiscard]] void* allocate_host(std::size_t bytes, bool page_locked);
void free_host(void* p) noexcept;
// True when p came from allocate_host and is pinned.
[[nodiscard]] bool is_page_locked(const void* p) noexcept;
}  // namespace detail

// Allocator for the host buffers a rank fills with batches for its model. Page-locked on a
// CUDA device: the model's host-to-device copy then goes by DMA straight from the buffer,
// instead of through the driver's pageable staging buffer, as a pinned data loader does.
// Pinning maps and locks pages, which is slow, so such vectors should grow rarely (std::vector
// grows geometrically; reserve the expected size once). On the host backend, and with
// page_locked false, it is an ordinary allocator.
template <class T>
class PinnedAllocator {
  static_assert(std::is_trivially_copyable_v<T>, "batch buffers hold plain data");

 public:
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  PinnedAllocator() noexcept = default;
  explicit PinnedAllocator(bool page_locked) noexcept : page_locked_(page_locked) {}
  template <class U>
  PinnedAllocator(const PinnedAllocator<U>& other) noexcept : page_locked_(other.page_locked()) {}  // NOLINT

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(detail::allocate_host(n * sizeof(T), page_locked_));
  }
  void deallocate(T* p, std::size_t /*n*/) noexcept { detail::free_host(p); }

  [[nodiscard]] bool page_locked() const noexcept { return page_locked_; }
  template <class U>
  bool operator==(const PinnedAllocator<U>& other) const noexcept {
    return page_locked_ == other.page_locked();
  }

 private:
  bool page_locked_ = false;
};

// A vector of batch data in (possibly) page-locked host memory; see PinnedAllocator.
template <class T>
using HostVector = std::vector<T, PinnedAllocator<T>>;

}  // namespace antdt
