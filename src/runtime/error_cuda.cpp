// Decoding of CUDA, cuBLAS and NCCL errors. Compiled only into CUDA builds.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#if ANTDT_HAVE_NCCL
#include <nccl.h>
#endif

namespace antdt::detail {

namespace {
std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file + ":" + std::to_string(line);
}

// Errors after which the CUDA context is unusable: every later call fails with the same
// error, so throwing would only let the program stumble on. Abort with the message instead
// (the same triage as Kokkos' Cuda error handling).
bool poisons_context(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
      return true;
    default:
      return false;
  }
}
}  // namespace

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  const auto err = static_cast<cudaError_t>(code);
  const std::string msg = std::string("CUDA error ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + " in " +
                          where(call, file, line);
  if (poisons_context(err)) {
    std::fprintf(stderr, "antdt: fatal (CUDA context lost): %s\n", msg.c_str());
    std::fflush(stderr);
    std::abort();
  }
  throw CudaError(code, msg);
}

void throw_cublas_error(int code, const char* call, const char* file, int line) {
  const auto status = static_cast<cublasStatus_t>(code);
  throw CudaError(code, std::string("cuBLAS error ") + cublasGetStatusName(status) + ": " +
                            cublasGetStatusString(status) + " in " + where(call, file, line));
}

#if ANTDT_HAVE_NCCL
void throw_nccl_error(int code, const char* call, const char* file, int line) {
  throw NcclError(code, std::string("NCCL error ") + std::to_string(code) + ": " +
                            ncclGetErrorString(static_cast<ncclResult_t>(code)) + " in " + where(call, file, line));
}
#endif

}  // namespace antdt::detail
