// Reference implementations: plain C++ loops, accumulating in double, that share no
// code with lowering or LLVM codegen. They define what a correct kernel computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/runtime/runtime.h"
#include "compiler/task/task.h"

namespace tuneforge {

// Allowed error of a kernel's output: |out - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// qmatmul, qconv2d: 0 (exact). matmul and batch_matmul: float32 accumulation in any order has an error that grows
// with K; inputs are uniform in [-1, 1). atol = 4e-6 * K + 1e-5, rtol = 1e-4 (see
// docs/architecture.md).
Tolerance ToleranceFor(const TuningTask& task);

// One input of a task, in entry-point order: its elements and how they are filled.
struct InputSpec {
  int64_t elements = 0;
  runtime::FillSpec fill;  // fill.type is the element type
};
// Every task's inputs. float32 tasks: [-1, 1) each. qmatmul: A uint8 [0, 256), B int8
// [-128, 128), bias int32 [-2^16, 2^16), scale float32 in [0.5, 1.5) x 40 / (5500
// sqrt(K)), which spreads a u8 output over its range instead of saturating it.
// qconv2d: the same, I for A, F for B, K = C*R*S.
std::vector<InputSpec> InputSpecs(const TuningTask& task);
// The output's element type.
runtime::ElementType OutputType(const TuningTask& task);
// A kernel argument's element type (every buffer dtype has one: float32, u8, s8, s32).
runtime::ElementType ElementTypeOf(const ir::BufferParam& param);

// A buffer of one element type on the host, 8-byte aligned.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(runtime::ElementType type, int64_t elements);
  static HostBuffer FromFloats(const std::vector<float>& values);

  runtime::ElementType type() const { return type_; }
  int64_t elements() const { return elements_; }
  int64_t bytes() const { return elements_ * runtime::ElementBytes(type_); }
  void* data() { return storage_.data(); }
  const void* data() const { return storage_.data(); }
  template <typename T>
  T* As() { return static_cast<T*>(data()); }
  template <typename T>
  const T* As() const { return static_cast<const T*>(data()); }
  std::string Bytes() const;  // the wire format: little-endian elements

 private:
  runtime::ElementType type_ = runtime::ElementType::kFloat32;
  int64_t elements_ = 0;
  std::vector<uint64_t> storage_;
};

// Input buffers of any task in entry-point order, filled with
// runtime::FillBuffer(seed, index, InputSpecs(task)[index].fill).
std::vector<HostBuffer> MakeTypedInputs(const TuningTask& task, uint64_t seed);
// The expected output for those inputs, of OutputType(task). Integer outputs are
// exact; qmatmul's and qconv2d's f32 and u8 outputs are computed as the kernel's contract states
// (f32(acc) * scale in float32; then round half to even, + out_zero, saturate), so
// they are exact too.
absl::StatusOr<HostBuffer> TypedReferenceOutput(const TuningTask& task, const std::vector<HostBuffer>& inputs);

// The same for float32 tasks (inputs and output float32), which most tests use.
std::vector<std::vector<float>> MakeInputs(const TuningTask& task, uint64_t seed);
absl::StatusOr<std::vector<float>> ReferenceOutput(const TuningTask& task,
                                                   const std::vector<std::vector<float>>& inputs);

}  // namespace tuneforge
