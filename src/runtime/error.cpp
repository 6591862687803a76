#include "antdt/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <hdf5.h>
#include <mpi.h>

#include "antdt/config.hpp"

namespace antdt::detail {

namespace {
std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file + ":" + std::to_string(line);
}
}  // namespace

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  int error_class = code;
  // MPI_Error_string is callable even after a failure; fall back to the number if not.
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    std::snprintf(text, sizeof text, "unknown MPI error");
  }
  MPI_Error_class(code, &error_class);
  throw MpiError(code, "MPI error " + std::to_string(code) + " (class " + std::to_string(error_class) + "): " + text +
                           " in " + where(call, file, line));
}

void throw_hdf5_error(const char* call, const char* file, int line) {
  // HDF5 keeps its own error stack; take the innermost message, which names the cause.
  std::string detail;
  auto walker = [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    if (out->empty() && err && err->desc) *out = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walker, &detail);
  H5Eclear2(H5E_DEFAULT);
  throw FileError("HDF5 call failed: " + where(call, file, line) + (detail.empty() ? "" : ": " + detail));
}

#if !ANTDT_HAVE_CUDA
void throw_cuda_error(int code, const char* call, const char* file, int line) {
  throw CudaError(code, "CUDA error " + std::to_string(code) + " in " + where(call, file, line));
}
void throw_cublas_error(int code, const char* call, const char* file, int line) {
  throw CudaError(code, "cuBLAS error " + std::to_string(code) + " in " + where(call, file, line));
}
#endif
#if !ANTDT_HAVE_NCCL
void throw_nccl_error(int code, const char* call, const char* file, int line) {
  throw NcclError(code, "NCCL error " + std::to_string(code) + " in " + where(call, file, line));
}
#endif

}  // namespace antdt::detail
