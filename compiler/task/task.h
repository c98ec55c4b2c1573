// TuningTask: an operator with its shape and dtype, e.g.
//   matmul M=512 N=512 K=512 dtype=float32
//   qmatmul M=128 N=768 K=768 a_zero=128 per_channel=1 dtype=u8s8u8  (int8, docs/int8.md)
//   qconv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 a_zero=128 dtype=u8s8u8
// The canonical text lists the op's parameters in the op's order and always names
// the dtype, so the same task typed twice (in any parameter order, with or without
// dtype) has the same canonical text and the same workload key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge {

// Parameters and cost of one operator kind. The table of ops lives in task.cc.
struct OpInfo {
  std::string name;
  std::vector<std::string> params;  // canonical order
  std::string summary;              // one line for --help and errors
  // Allowed range of a parameter when it is not [1, kMaxDim] (flags 0|1, padding).
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  // Parameters that may be left out, with the value they then have. A task whose
  // value is the default leaves it out of its canonical text, so adding an optional
  // parameter to an op keeps the workload keys of the tasks already stored.
  std::map<std::string, int64_t> defaults;
  // The element types the op is defined for, in the dtype= spelling. An op whose list
  // holds float32 takes it when the task names none; any other op needs its dtype.
  std::vector<std::string> dtypes = {"float32"};
};
const std::vector<OpInfo>& KnownOps();

// Limits for user input: a dimension above kMaxDim, or a task whose buffers need more
// than kMaxTaskBytes, is rejected as absurd rather than attempted.
inline constexpr int64_t kMaxDim = 1 << 20;
inline constexpr int64_t kMaxTaskBytes = int64_t{4} << 30;

class TuningTask {
 public:
  const std::string& op() const { return op_; }
  const std::string& dtype() const { return dtype_; }
  // Value of a parameter (an optional one's default when left out); TF_CHECKs that
  // the op has it.
  int64_t Param(const std::string& name) const;
  const std::vector<std::pair<std::string, int64_t>>& params() const { return params_; }

  std::string CanonicalText() const;
  std::string ToJson() const;       // {"op":"matmul","params":{"M":512,...},"dtype":"float32"}
  std::string WorkloadKey() const;  // "<op>-" + hash of the canonical text
  double Flops() const;             // arithmetic operations of one run (int8: multiply-adds x 2)
  int64_t BufferBytes() const;      // inputs + output
  // qmatmul, qconv2d, qdepthwise_conv2d: int8 tasks.
  bool IsQuantized() const { return op_ == "qmatmul" || op_ == "qconv2d" || op_ == "qdepthwise_conv2d"; }
  // The output's element type of an int8 task ("s32", "f32", "u8": the dtype's last part).
  std::string QuantizedOutput() const;
  // conv2d / depthwise_conv2d: output height and width.
  int64_t ConvOutH() const;
  int64_t ConvOutW() const;
  // conv2d / depthwise_conv2d: elements of the filter (K x C/G x R x S; C x R x S).
  int64_t ConvFilterElements() const;

 private:
  friend absl::StatusOr<TuningTask> MakeTask(const std::string&, std::vector<std::pair<std::string, int64_t>>, const std::string&);
  std::string op_;
  std::vector<std::pair<std::string, int64_t>> params_;  // canonical order
  std::string dtype_ = "float32";
};

// Builds and validates a task. Errors name the offending part of the input.
absl::StatusOr<TuningTask> MakeTask(const std::string& op,
                                    std::vector<std::pair<std::string, int64_t>> params,
                                    const std::string& dtype);
// Parses "matmul M=512 N=512 K=512 [dtype=float32]"; dtype may be left out for an op
// defined for float32 (OpInfo::dtypes).
absl::StatusOr<TuningTask> ParseTask(const std::string& text);
absl::StatusOr<TuningTask> TaskFromJson(const std::string& json);

}  // namespace tuneforge
