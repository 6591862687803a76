// RAII owners for the CUDA handles antdt uses: device memory, streams, events, cuBLAS handles,
// and a guard that restores the current device. Destructors never throw: a failure to free
// is ignored (the context is being torn down or is already lost, and there is nothing a
// destructor could do about it). CUDA builds only; private to libantdt.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "antdt/config.hpp"
#include "antdt/error.hpp"

#if !ANTDT_HAVE_CUDA
#error "cuda/cuda_raii.hpp is for CUDA builds only (ANTDT_HAVE_CUDA == 0)"
#endif

namespace antdt::cuda {

// Makes `device` current for the scope and restores the previous device on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    ANTDT_CHECK_CUDA(cudaGetDevice(&previous_));
    if (previous_ != device) ANTDT_CHECK_CUDA(cudaSetDevice(device));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// A device array of T, uninitialised. Grow-only resize (contents are not kept).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) { resize(count); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void resize(std::size_t count) {
    if (count <= count_) return;
    release();
    void* p = nullptr;
    ANTDT_CHECK_CUDA(cudaMalloc(&p, count * sizeof(T)));
    data_ = static_cast<T*>(p);
    count_ = count;
  }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// A blocking stream (ordered with the legacy default stream, so plain cudaMemcpy calls made
// elsewhere see this stream's finished work).
class Stream {
 public:
  Stream() { ANTDT_CHECK_CUDA(cudaStreamCreate(&stream_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  void synchronize() const { ANTDT_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { ANTDT_CHECK_CUDA(cudaEventCreate(&event_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  void record(cudaStream_t stream) { ANTDT_CHECK_CUDA(cudaEventRecord(event_, stream)); }
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }
  // Seconds from `start` to this event; both must have completed.
  [[nodiscard]] double seconds_since(const Event& start) const {
    float ms = 0.0f;
    ANTDT_CHECK_CUDA(cudaEventElapsedTime(&ms, start.event_, event_));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class CublasHandle {
 public:
  CublasHandle() { ANTDT_CHECK_CUBLAS(cublasCreate(&handle_)); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() {
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
  }
  [[nodiscard]] cublasHandle_t get() const noexcept { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace antdt::cuda
