// The emulated CUDA device checks what it claims to (emulated_cuda.hpp): host code cannot touch
// device memory, bad pointers, sizes, directions and devices are refused, its GEMMs compute
// the right numbers, and the CUDA model returns every byte it allocates.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <csetjmp>
#include <csignal>
#include <cstdlib>
#include <vector>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "comm/reduce.hpp"
#include "compute_test_support.hpp"
#include "emulated_cuda.hpp"
#include "model/model.hpp"
#include "runtime/device.hpp"
#include "transport/comm.hpp"

namespace {

sigjmp_buf g_jump;
void on_fault(int) { siglongjmp(g_jump, 1); }

// True when host code reading *p (or, with `write`, writing it back) faults.
bool host_access_faults(volatile float* p, bool write) {
  struct sigaction fault {
  }, old_segv{}, old_bus{};
  fault.sa_handler = on_fault;
  sigemptyset(&fault.sa_mask);
  sigaction(SIGSEGV, &fault, &old_segv);
  sigaction(SIGBUS, &fault, &old_bus);
  volatile bool faulted = true;  // volatile: it must survive the siglongjmp
  if (sigsetjmp(g_jump, 1) == 0) {
    if (write) {
      *p = 7.0f;
    } else {
      (void)*p;
    }
    faulted = false;
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return faulted;
}
bool host_read_faults(const volatile float* p) { return host_access_faults(const_cast<volatile float*>(p), false); }
bool host_write_faults(volatile float* p) { return host_access_faults(p, true); }

float* device_floats(std::size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return static_cast<float*>(p);
}

TEST(EmulatedCuda, HostCodeCannotTouchDeviceMemory) {
  float* d = device_floats(16);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(host_read_faults(d)) << "a host read of device memory must fault, as on a GPU";
  std::vector<float> h(16, 2.5f), back(16, 0.0f);
  ASSERT_EQ(cudaMemcpy(d, h.data(), 16 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d, 16 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h) << "the API itself can read and write it";
  EXPECT_TRUE(host_read_faults(d)) << "and it is inaccessible again afterwards";
  EXPECT_FALSE(host_read_faults(h.data()));
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

TEST(EmulatedCuda, TracksPageLockedHostRangesAsCudaDoes) {
  const std::size_t rejected = antdt::emulated_cuda::rejected_calls();
  std::vector<float> h(64, 1.0f);
  ASSERT_EQ(cudaHostRegister(h.data(), 32 * sizeof(float), cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(antdt::emulated_cuda::registered_host_ranges(), 1u);
  EXPECT_EQ(cudaHostRegister(h.data() + 16, 8 * sizeof(float), cudaHostRegisterDefault),
            cudaErrorHostMemoryAlreadyRegistered)
      << "a range inside a registered one";
  EXPECT_EQ(cudaHostRegister(h.data() + 31, 8 * sizeof(float), cudaHostRegisterDefault),
            cudaErrorHostMemoryAlreadyRegistered)
      << "a range overlapping its end";
  ASSERT_EQ(cudaHostRegister(h.data() + 32, 32 * sizeof(float), cudaHostRegisterDefault), cudaSuccess)
      << "the adjacent range does not overlap";
  float* d = device_floats(8);
  EXPECT_EQ(cudaHostRegister(d, 8 * sizeof(float), cudaHostRegisterDefault), cudaErrorInvalidValue)
      << "device memory is not host memory";
  EXPECT_EQ(cudaMemcpy(d, h.data() + 30, 8 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess)
      << "copies from registered memory work, across two ranges";
  EXPECT_EQ(cudaHostUnregister(h.data() + 1), cudaErrorHostMemoryNotRegistered) << "not the start of a range";
  EXPECT_EQ(cudaHostUnregister(h.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(h.data() + 32), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(h.data()), cudaErrorHostMemoryNotRegistered) << "unregistered twice";
  EXPECT_EQ(antdt::emulated_cuda::registered_host_ranges(), 0u);
  EXPECT_EQ(antdt::emulated_cuda::rejected_calls(), rejected + 5);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

TEST(EmulatedCuda, GuardsPinnedMemoryWhileAnAsynchronousCopyIsInFlight) {
  const std::size_t rejected = antdt::emulated_cuda::rejected_calls();
  void* raw = nullptr;
  ASSERT_EQ(cudaHostAlloc(&raw, 64 * sizeof(float), cudaHostAllocPortable), cudaSuccess);
  auto* h = static_cast<float*>(raw);
  for (int i = 0; i < 64; ++i) h[i] = static_cast<float>(i);
  EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 1u);
  float* d = device_floats(64);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);

  // H2D from pinned memory: the host may read it but not write it until the stream is synced.
  ASSERT_EQ(cudaMemcpyAsync(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice, stream), cudaSuccess);
  EXPECT_TRUE(host_write_faults(h + 5)) << "rewriting a batch while its copy is in flight is a race on a GPU";
  EXPECT_FALSE(host_read_faults(h + 5));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_FALSE(host_write_faults(h + 5)) << "the copy is done once its stream is synchronised";

  // D2H into pinned memory: no host access at all until an event after it has completed.
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(done, stream), cudaSuccess);
  EXPECT_TRUE(host_read_faults(h + 63)) << "the result is not there before the copy completes";
  ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
  EXPECT_FALSE(host_read_faults(h + 63));
  EXPECT_EQ(h[3], 3.0f) << "the round trip kept the data";

  // Synchronous copies, and asynchronous ones from pageable memory, are complete on return.
  ASSERT_EQ(cudaMemcpy(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_FALSE(host_write_faults(h));
  std::vector<float> pageable(64, 1.0f);
  // A synchronous D2H copy also waits for the earlier work of every stream; a synchronous H2D
  // copy from pageable memory may return before it.
  ASSERT_EQ(cudaMemcpyAsync(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, pageable.data(), 64 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_TRUE(host_write_faults(h)) << "a pageable H2D cudaMemcpy does not wait for the earlier copy";
  ASSERT_EQ(cudaMemcpy(pageable.data(), d, 64 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_FALSE(host_write_faults(h)) << "a D2H cudaMemcpy does";
  ASSERT_EQ(cudaMemcpyAsync(d, pageable.data(), 64 * sizeof(float), cudaMemcpyHostToDevice, stream), cudaSuccess);
  EXPECT_FALSE(host_write_faults(pageable.data()));
  // A copy in flight on the legacy stream ends with the device synchronisation.
  ASSERT_EQ(cudaMemcpyAsync(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  EXPECT_TRUE(host_write_faults(h));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE(host_write_faults(h));

  EXPECT_EQ(cudaHostRegister(h, 16, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered)
      << "cudaHostAlloc memory is page-locked already";
  EXPECT_EQ(cudaFreeHost(h + 1), cudaErrorInvalidValue) << "not the start of a block";
  ASSERT_EQ(cudaFreeHost(h), cudaSuccess);
  EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 0u);
  EXPECT_EQ(antdt::emulated_cuda::rejected_calls(), rejected + 2);
  ASSERT_EQ(cudaEventDestroy(done), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

// antdt::HostVector pins its memory on a CUDA build, and falls back to ordinary memory when
// pinning is refused (a memlock limit), without an error.
TEST(EmulatedCuda, HostVectorPinsAndFallsBackWhenPinningIsRefused) {
  const std::size_t rejected = antdt::emulated_cuda::rejected_calls();
  {
    antdt::HostVector<float> pinned{antdt::PinnedAllocator<float>(true)};
    pinned.resize(1000, 1.5f);
    EXPECT_TRUE(antdt::detail::is_page_locked(pinned.data()));
    EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 1u);
    antdt::HostVector<float> plain{antdt::PinnedAllocator<float>(false)};
    plain.resize(1000, 2.5f);
    EXPECT_FALSE(antdt::detail::is_page_locked(plain.data()));
    EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 1u) << "page_locked false never pins";
    pinned.resize(100000);  // grows into a new pinned block and frees the old one
    EXPECT_TRUE(antdt::detail::is_page_locked(pinned.data()));
    EXPECT_EQ(pinned[999], 1.5f) << "growth keeps the contents";
    EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 1u);
  }
  EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 0u) << "every pinned block is freed";

  ASSERT_EQ(setenv("ANTDT_EMULATED_CUDA_PIN_LIMIT", "4096", 1), 0);
  {
    antdt::HostVector<float> refused{antdt::PinnedAllocator<float>(true)};
    refused.resize(100000, 3.5f);  // 400 kB: past the limit
    EXPECT_FALSE(antdt::detail::is_page_locked(refused.data()));
    EXPECT_EQ(refused[99999], 3.5f) << "ordinary memory serves instead";
    EXPECT_EQ(antdt::emulated_cuda::pinned_host_blocks(), 0u);
  }
  ASSERT_EQ(unsetenv("ANTDT_EMULATED_CUDA_PIN_LIMIT"), 0);
  EXPECT_EQ(antdt::emulated_cuda::rejected_calls(), rejected) << "a refused pin is not a misuse";
}

TEST(EmulatedCuda, RefusesWrongDirectionsAndOverruns) {
  float* d = device_floats(8);
  std::vector<float> h(16, 1.0f);
  const std::size_t before = antdt::emulated_cuda::rejected_calls();
  EXPECT_EQ(cudaMemcpy(h.data(), h.data() + 8, 8 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_NE(antdt::emulated_cuda::last_rejection().find("is not device memory"), std::string::npos);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 8 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 9 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_NE(antdt::emulated_cuda::last_rejection().find("run past the end"), std::string::npos);
  EXPECT_EQ(cudaMemsetAsync(d + 4, 0, 5 * sizeof(float), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d + 1), cudaErrorInvalidValue);
  EXPECT_EQ(antdt::emulated_cuda::rejected_calls(), before + 5);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 8 * sizeof(float), cudaMemcpyDefault), cudaSuccess) << "Default infers H2D";
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

TEST(EmulatedCuda, RefusesMemoryOfAnotherDevice) {
  ASSERT_EQ(setenv("ANTDT_EMULATED_CUDA_DEVICES", "2", 1), 0);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  float* on_1 = device_floats(4);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::vector<float> h(4, 0.0f);
  EXPECT_EQ(cudaMemcpy(h.data(), on_1, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_NE(antdt::emulated_cuda::last_rejection().find("is on device 1 but device 0 is current"), std::string::npos);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaFree(on_1), cudaSuccess);
  ASSERT_EQ(unsetenv("ANTDT_EMULATED_CUDA_DEVICES"), 0);
}

// Stream order: work on one stream must not touch memory another stream wrote until that
// write is ordered before it (by synchronising the writer, or through the legacy stream).
TEST(EmulatedCuda, RefusesCrossStreamRacesUntilOrdered) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  float* d = device_floats(4);
  std::vector<float> h(4, 0.0f);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(float), a), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, 4 * sizeof(float), cudaMemcpyDeviceToHost, b), cudaErrorInvalidValue);
  EXPECT_NE(antdt::emulated_cuda::last_rejection().find("not ordered before this call"), std::string::npos);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, 4 * sizeof(float), cudaMemcpyDeviceToHost, a), cudaSuccess)
      << "the writer's own stream is ordered";
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, 4 * sizeof(float), cudaMemcpyDeviceToHost, b), cudaSuccess)
      << "after the writer is synchronised";
  EXPECT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(float), a), cudaErrorInvalidValue)
      << "overwriting what another stream may still be reading";
  EXPECT_NE(antdt::emulated_cuda::last_rejection().find("write after read"), std::string::npos);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(float), a), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess)
      << "the legacy stream waits for every blocking stream";
  EXPECT_EQ(cudaMemsetAsync(d, 0, 4 * sizeof(float), b), cudaSuccess) << "and orders them";
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(a), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

// Stream order is tracked per byte range, and events order what was queued before them: the
// host waiting for one (cudaEventSynchronize/Query), or another stream (cudaStreamWaitEvent).
TEST(EmulatedCuda, OrdersByRangeAndByEvents) {
  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  float* d = device_floats(8);
  std::vector<float> h(8, 0.0f);
  const std::size_t half = 4 * sizeof(float);
  ASSERT_EQ(cudaMemsetAsync(d, 0, half, a), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(d + 4, 0, half, b), cudaSuccess) << "disjoint ranges of one allocation do not race";
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d + 2, half, cudaMemcpyDeviceToHost, b), cudaErrorInvalidValue)
      << "overlaps a's pending write";
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d + 1, 0, sizeof(float), a), cudaSuccess);  // queued after the event
  ASSERT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d + 2, 2 * sizeof(float), cudaMemcpyDeviceToHost, b), cudaSuccess)
      << "the host saw the event complete: what a queued before it is done";
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d + 1, sizeof(float), cudaMemcpyDeviceToHost, b), cudaErrorInvalidValue)
      << "but not what a queued after it";
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d + 1, sizeof(float), cudaMemcpyDeviceToHost, b), cudaSuccess)
      << "b waits for the event on the device";
  EXPECT_EQ(cudaMemsetAsync(d + 6, 0, sizeof(float), a), cudaErrorInvalidValue)
      << "a may not overwrite what b wrote and has not been ordered";
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(a), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

// A rank with no samples this step runs only zero_gradients() (an asynchronous memset on the
// model's stream) before the reduction. The reducer must still read the zeroed buffer, even
// when the caller skips Model::synchronize().
TEST(EmulatedCuda, ReducersOrderAfterTheModelsQueuedWork) {
  using namespace antdt;
  const DeviceInfo dev = select_device(0, DevicePreference::cuda);
  Communicator comm = Communicator::duplicate(MPI_COMM_WORLD);
  auto reducer = make_reducer(comm, dev);
  EXPECT_EQ(reducer->name(), ANTDT_HAVE_NCCL ? "nccl" : "mpi") << "one rank on its own device";
  MlpConfig cfg;
  cfg.layers = {4, 8, 3};
  auto model = make_mlp(cfg, dev);
  const test::Samples data = test::gaussian_clusters(6, 4, 3, 2.0, 1);
  (void)model->accumulate(data.x(0), data.y(0), 6);  // stale sums a racing reduction would see
  model->zero_gradients();
  const std::size_t rejected = emulated_cuda::rejected_calls();
  EXPECT_NO_THROW(reducer->allreduce_sum(model->gradient_buffer(), model->gradient_count()))
      << emulated_cuda::last_rejection();
  EXPECT_EQ(emulated_cuda::rejected_calls(), rejected) << emulated_cuda::last_rejection();
  const std::vector<float> g = gradient_snapshot(*model);
  EXPECT_EQ(test::count_of(g), 0) << "the reduced count is this step's, not the stale one";
}

// Column-major C (m x n) = op(A) op(B), checked against a loop, for all four transpose pairs.
TEST(EmulatedCuda, SgemmComputesAndChecksLeadingDimensions) {
  const int m = 3, n = 4, k = 5, ld = 7;  // padded leading dimensions
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  std::vector<float> a(static_cast<std::size_t>(ld * 7)), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 11) - 5.0f;
    b[i] = static_cast<float>(i % 7) * 0.5f;
  }
  float* da = device_floats(a.size());
  float* db = device_floats(b.size());
  float* dc = device_floats(static_cast<std::size_t>(ld * n));
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  const float one = 1.0f, zero = 0.0f;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      ASSERT_EQ(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, da, ld,
                            db, ld, &zero, dc, ld),
                CUBLAS_STATUS_SUCCESS);
      std::vector<float> c(static_cast<std::size_t>(ld * n));
      ASSERT_EQ(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          double want = 0.0;
          for (int p = 0; p < k; ++p) {
            const float av = ta ? a[static_cast<std::size_t>(p + i * ld)] : a[static_cast<std::size_t>(i + p * ld)];
            const float bv = tb ? b[static_cast<std::size_t>(j + p * ld)] : b[static_cast<std::size_t>(p + j * ld)];
            want += static_cast<double>(av) * bv;
          }
          EXPECT_NEAR(c[static_cast<std::size_t>(i + j * ld)], want, 1e-4) << "ta=" << ta << " tb=" << tb;
        }
      }
    }
  }
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m - 1, db, ld, &zero, dc, ld),
            CUBLAS_STATUS_INVALID_VALUE)
      << "lda < m";
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, 8, k, &one, da, ld, db, ld, &zero, dc, ld),
            CUBLAS_STATUS_INVALID_VALUE)
      << "B and C have too few columns for n = 8";
  EXPECT_NE(antdt::emulated_cuda::last_rejection().find("run past the end"), std::string::npos);
  std::vector<float> host_a(a);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, host_a.data(), ld, db, ld, &zero, dc, ld),
            CUBLAS_STATUS_INVALID_VALUE)
      << "A in host memory";
  ASSERT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  for (float* p : {da, db, dc}) ASSERT_EQ(cudaFree(p), cudaSuccess);
}

TEST(EmulatedCuda, CudaModelRunsWithoutRejectionsAndFreesEverything) {
  using namespace antdt;
  const std::size_t allocations = emulated_cuda::live_allocations();
  const std::size_t rejected = emulated_cuda::rejected_calls();
  {
    const DeviceInfo dev = select_device(0, DevicePreference::cuda);
    ASSERT_EQ(dev.backend, Backend::cuda);
    EXPECT_NE(dev.name.find("emulated"), std::string::npos) << dev.name;
    MlpConfig cfg;
    cfg.layers = {6, 12, 3};
    cfg.optimizer = OptimizerKind::adam;
    auto model = make_mlp(cfg, dev);
    EXPECT_GT(emulated_cuda::live_bytes(), 0u);
    EXPECT_TRUE(host_read_faults(model->gradient_buffer())) << "the gradient buffer lives on the device";
    const test::Samples data = test::gaussian_clusters(50, 6, 3, 3.0, 5);
    for (int step = 0; step < 3; ++step) {
      model->zero_gradients();
      (void)accumulate_micro_batches(*model, data.x(0), data.y(0), 50, 16);
      model->apply_update();
    }
    EXPECT_EQ(model->optimizer_steps(), 3);
    std::vector<std::int32_t> bad(data.labels.begin(), data.labels.begin() + 4);
    bad[2] = 3;
    EXPECT_THROW((void)model->accumulate(data.x(0), bad.data(), 4), UsageError) << "labels are checked before launch";
  }
  EXPECT_EQ(emulated_cuda::rejected_calls(), rejected) << emulated_cuda::last_rejection();
  EXPECT_EQ(emulated_cuda::live_allocations(), allocations) << "the model's RAII owners free every buffer";
}

}  // namespace
