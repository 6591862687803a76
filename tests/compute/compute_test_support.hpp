// Shared helpers of the compute tests: backend parameterisation (the same bodies run on every
// enabled backend; CUDA skips with the reason when there is no device), plus the synthetic
// data, reference MLP and comparisons of mlp_reference.hpp.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "antdt/config.hpp"
#include "mlp_reference.hpp"
#include "model/model.hpp"
#include "runtime/device.hpp"

namespace antdt::test {

inline std::string backend_param_name(const testing::TestParamInfo<Backend>& info) {
  return std::string(backend_name(info.param));
}

// Why `backend` cannot run here, or "" when it can.
inline std::string backend_unavailable(Backend backend) {
  if (backend == Backend::host) return "";
  if (!ANTDT_HAVE_CUDA) return "this build has no CUDA backend (ANTDT_ENABLE_CUDA=OFF)";
  if (cuda_device_count() == 0) return "no CUDA device visible (cudaGetDeviceCount failed or returned 0)";
  return "";
}

inline DeviceInfo device_for(Backend backend) {
  return select_device(0, backend == Backend::cuda ? DevicePreference::cuda : DevicePreference::host);
}

// Fixture base: skips the CUDA instantiation with a visible reason when it cannot run.
class BackendTest : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const std::string why = backend_unavailable(GetParam());
    if (!why.empty()) GTEST_SKIP() << "skipping the " << backend_name(GetParam()) << " backend: " << why;
    device_ = device_for(GetParam());
  }
  std::unique_ptr<Model> make(const MlpConfig& config) const { return make_mlp(config, device_); }
  DeviceInfo device_;
};

}  // namespace antdt::test
