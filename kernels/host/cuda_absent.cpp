// The CUDA side of the MLP bridge in builds without CUDA. No model or buffer ever lives on a
// device there, so make_cuda_mlp says why.
#include <cstddef>
#include <memory>

#include "antdt/error.hpp"
#include "host/mlp_common.hpp"

namespace antdt::detail {

std::unique_ptr<Model> make_cuda_mlp(const MlpConfig&, const DeviceInfo&) {
  throw DeviceError(
      "a CUDA model was requested but this build of antdt has no CUDA support; "
      "rebuild with -DANTDT_ENABLE_CUDA=ON or use the host device");
}

}  // namespace antdt::detail
