// Device discovery and selection. Each rank picks GPU (local_rank % device_count). When the
// build has no CUDA, when cudaGetDeviceCount fails (no driver, error 35 on GPU-less
// machines) or returns 0, the rank uses the host backend; the reason is reported once.
#pragma once

#include <cstddef>
#include <string>

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

}  // namespace antdt
