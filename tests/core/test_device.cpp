#include <gtest/gtest.h>

#include <cstdint>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "runtime/device.hpp"

using namespace antdt;

TEST(Device, HostPreferenceAlwaysGivesHost) {
  auto d = select_device(0, DevicePreference::host);
  EXPECT_EQ(d.backend, Backend::host);
  EXPECT_EQ(d.device_id, -1);
  EXPECT_EQ(d.reason, "host backend requested");
}

TEST(Device, AutomaticFallsBackToHostWithReasonWhenNoGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present; this test covers GPU-less machines";
  auto d = select_device(3, DevicePreference::automatic);
  EXPECT_EQ(d.backend, Backend::host);
  EXPECT_EQ(d.device_count, 0);
  EXPECT_NE(d.reason.find("using the host backend"), std::string::npos) << d.reason;
#if ANTDT_HAVE_CUDA
  // No driver or no device: one plain line, not CUDA's error names (issue 24).
  EXPECT_EQ(d.reason, "no GPU visible: using the host backend");
#else
  EXPECT_NE(d.reason.find("no CUDA support"), std::string::npos) << d.reason;
#endif
}

TEST(Device, CudaPreferenceWithoutGpuIsADeviceError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW((void)select_device(0, DevicePreference::cuda), DeviceError);
}

TEST(Device, LocalRankPicksItsGpu) {
  const int n = cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no CUDA device: GPU selection cannot be exercised here (host path tested above)";
  auto d = select_device(n + 1, DevicePreference::cuda);
  EXPECT_EQ(d.backend, Backend::cuda);
  EXPECT_EQ(d.device_id, (n + 1) % n);
  EXPECT_GT(d.total_memory, 0u);
}

TEST(Device, ParsePreference) {
  EXPECT_EQ(parse_device_preference("auto"), DevicePreference::automatic);
  EXPECT_EQ(parse_device_preference("host"), DevicePreference::host);
  EXPECT_EQ(parse_device_preference("cuda"), DevicePreference::cuda);
  EXPECT_THROW((void)parse_device_preference("tpu"), UsageError);
}

// Batch buffers: usable with or without pinning, on any machine. Without a GPU (or CUDA
// support) a pinning request falls back to ordinary memory; with one it is pinned.
TEST(Device, HostVectorServesAlignedMemoryPinnedOrNot) {
  for (const bool page_locked : {false, true}) {
    HostVector<float> v{PinnedAllocator<float>(page_locked)};
    v.resize(3000, 0.25f);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u) << "aligned for vector loads";
    v.push_back(9.0f);
    EXPECT_EQ(v[2999], 0.25f);
    EXPECT_EQ(v.back(), 9.0f);
    EXPECT_EQ(v.get_allocator().page_locked(), page_locked);
    // Pinned only when asked and a GPU is there (a memlock limit may still refuse it there).
    if (!page_locked || cuda_device_count() == 0) {
      EXPECT_FALSE(detail::is_page_locked(v.data()));
    }
    HostVector<float> moved = std::move(v);
    EXPECT_EQ(moved.get_allocator().page_locked(), page_locked) << "the allocator travels with the buffer";
  }
  EXPECT_EQ(PinnedAllocator<float>(true), PinnedAllocator<int>(true));
  EXPECT_NE(PinnedAllocator<float>(true), PinnedAllocator<float>(false));
  EXPECT_FALSE(detail::is_page_locked(nullptr));
  detail::free_host(nullptr);  // a no-op, like free(nullptr)
}
