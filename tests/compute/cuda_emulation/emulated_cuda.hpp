// The emulated CUDA device of the tests (emulated_cuda.cpp): what it is, and its introspection.
//
// libantdt_emulated_cuda is libantdt built from the same sources, except that the CUDA
// runtime, cuBLAS, NCCL and the launchers of kernels/cuda/mlp_kernels.cu are replaced by a
// host emulation. It lets the CUDA backend's host code (cuBLAS argument conventions, buffer
// sizes, copy directions, device guards, the staged and NCCL reducers, and the Session and
// antdt-train on a "cuda" device) run on machines without a GPU, against the same test bodies
// as the host backend. What it checks, beyond computing the right numbers:
//   - device memory is inaccessible to host code: it is mapped PROT_NONE except while an
//     emulated API call runs, so a host dereference of a device pointer crashes the test;
//   - every pointer an API call reads or writes lies inside one live allocation of the right
//     kind (device or host) and, for device memory, on the current device;
//   - cuBLAS leading dimensions and sizes are valid, as cuBLAS itself would check;
//   - stream order, per byte range: work queued on one stream must not read device memory
//     that work on another stream writes, nor write memory that such work reads or writes,
//     unless that work is ordered before it: its stream synchronised, an event queued after
//     it synchronised or queried complete by the host, or waited for by this stream
//     (cudaStreamWaitEvent), or the legacy default stream passed in between. Everything runs
//     at once here, so without this check such a race would pass unnoticed; on a GPU it reads
//     stale or half-written data, or overwrites what is still being read.
//   - pinned host memory (cudaHostAlloc) is not reused while an asynchronous copy is in flight:
//     until the copy's stream (or the device) is synchronised, host writes to the block of an
//     H2D copy fault, and any host access to the block of a D2H copy faults. From pageable
//     memory the driver stages the data before returning, so such buffers are safe at once.
// What it cannot check: kernel launch geometry, the loss kernel's shared-memory block
// reduction, other hazards of asynchrony (non-blocking streams, which it treats as blocking;
// reuse of memory page-locked with cudaHostRegister, which is not page-aligned and so is not
// guarded), and performance. perf/gpu-check.sh covers the GPU itself.
//
// Devices: ANTDT_EMULATED_CUDA_DEVICES (default 1) emulated devices per process, each with
// 4 GiB. ANTDT_EMULATED_CUDA_PIN_LIMIT (bytes) caps live pinned memory, as a memlock limit
// does. NCCL communicators are MPI communicators split from MPI_COMM_WORLD, so every world
// rank must create its communicator together (true of antdt's reducer).
#pragma once

#include <cstddef>
#include <string>

namespace antdt::emulated_cuda {

// Live device allocations and their bytes, over all emulated devices.
[[nodiscard]] std::size_t live_allocations();
[[nodiscard]] std::size_t live_bytes();

// Number of API calls rejected so far (invalid pointer, size, direction, handle...), and
// the message of the last one.
[[nodiscard]] std::size_t rejected_calls();
[[nodiscard]] std::string last_rejection();

// Host ranges page-locked with cudaHostRegister and not yet unregistered.
[[nodiscard]] std::size_t registered_host_ranges();

// Live cudaHostAlloc blocks.
[[nodiscard]] std::size_t pinned_host_blocks();

}  // namespace antdt::emulated_cuda
