// oneDNN side of `tuneforge bench kernels` for conv2d, depthwise_conv2d and qconv2d: the
// vendor's own choice of blocked layouts (format `any`, as oneDNN's users and
// benchdnn do), inference, with the reorders into and out of those layouts done
// outside the timed call — the same split as tuneforge's prepack/unpack entries.
// Only the CLI links oneDNN.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/task/task.h"

namespace tuneforge::cli {

// A ready-to-run vendor convolution over the caller's NCHW / OIHW buffers.
// Not thread-safe; owns the oneDNN engine, primitive and blocked buffers.
class DnnlConv {
 public:
  virtual ~DnnlConv() = default;
  // The convolution alone, on the blocked input and weights (timed).
  virtual void Run() = 0;
  // Reorders the blocked output into the caller's NCHW output (untimed).
  virtual void Unpack() = 0;
  // oneDNN's implementation name, e.g. "jit:avx512_core".
  virtual std::string impl() const = 0;
};

// `threads` becomes OpenMP's thread count (Debian's oneDNN uses OpenMP). The input
// and filter are reordered once, here. `winograd`: oneDNN's Winograd convolution
// (algorithm::convolution_winograd) instead of its direct one; Unimplemented where
// oneDNN has none for the shape or CPU.
absl::StatusOr<std::unique_ptr<DnnlConv>> MakeDnnlConv(const TuningTask& task, const float* input,
                                                       const float* filter, float* output,
                                                       int threads, bool winograd = false);

// oneDNN's int8 convolution for a qconv2d task: input u8 NCHW, filter s8 OIHW, both
// reordered once, here, into the layouts oneDNN picks; the output of the task's type,
// NCHW after Unpack. Zero points and scales as creation-time attributes (see
// MakeDnnlQuantizedMatmul; `scale` ignored for an s32 output). Unimplemented for a task
// with a bias (oneDNN adds it after the scale; qconv2d before).
absl::StatusOr<std::unique_ptr<DnnlConv>> MakeDnnlQuantizedConv(const TuningTask& task, const uint8_t* input,
                                                                const int8_t* filter, const float* scale,
                                                                void* output, int threads);

// oneDNN's matmul primitive on row-major (plain-layout) A [batch,] m x k and B k x n
// into C (batch = 0: one 2-D product), on `threads` OpenMP threads; `impl` is the
// implementation oneDNN chose. The call runs the primitive and waits.
absl::StatusOr<std::function<void()>> MakeDnnlMatmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                                                     const float* a, const float* b, float* c, int threads,
                                                     std::string* impl);

// oneDNN's int8 matmul primitive for a qmatmul task (docs/int8.md): A uint8 row-major,
// B int8 given row-major and reordered once, here, into the layout oneDNN picks
// (format `any`), C s32 / f32 / u8 row-major; the activation zero point, the scales
// (per tensor or per column) and the output zero point as attributes fixed at creation,
// which lets oneDNN specialise on them. `scale` is ignored for an s32 output.
// Unimplemented for a task with a bias (oneDNN adds it after the scale; qmatmul before).
absl::StatusOr<std::function<void()>> MakeDnnlQuantizedMatmul(const TuningTask& task, const uint8_t* a,
                                                              const int8_t* b, const float* scale, void* c,
                                                              int threads, std::string* impl);

// oneDNN's row-major sgemm, C[m,n] = A[m,k] * B[k,n], on `DnnlSetThreads` threads.
void DnnlSgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c);
void DnnlSetThreads(int threads);

}  // namespace tuneforge::cli
