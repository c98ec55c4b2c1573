// TuningTask: operators' parameters, validation, canonical text and FLOPs.
#include "compiler/task/task.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/support/hash.h"
#include "compiler/support/status.h"
#include "nlohmann/json.hpp"

namespace tuneforge {

namespace {

// The int8 ops' own parameters (zero points, bias, scale kind), their ranges, defaults
// and output kinds: the same for qmatmul, qconv2d and qdepthwise_conv2d.
// (Functions, not namespace-scope constants: KnownOps may run during another file's
// static initialisation.)
using Ranges = std::map<std::string, std::pair<int64_t, int64_t>>;
Ranges QuantizedRanges(bool conv) {
  Ranges r = {{"a_zero", {0, 255}}, {"bias", {0, 1}}, {"per_channel", {0, 1}}, {"out_zero", {0, 255}}};
  if (conv) r.insert({{"pad", {0, 64}}, {"stride", {1, 64}}});
  return r;
}
std::map<std::string, int64_t> QuantizedDefaults() {
  return {{"a_zero", 0}, {"bias", 0}, {"per_channel", 0}, {"out_zero", 0}};
}
std::vector<std::string> QuantizedDtypes() { return {"u8s8s32", "u8s8f32", "u8s8u8"}; }

}  // namespace

const std::vector<OpInfo>& KnownOps() {
  static const std::vector<OpInfo> ops = {
      {"matmul", {"M", "N", "K"}, "C[M,N] = A[M,K] * B[K,N], row-major", {}, {}},
      {"batch_matmul", {"B", "M", "N", "K"},
       "C[b,M,N] = A[b,M,K] * B[b,K,N] for b < B, row-major, batch outermost", {}, {}},
      {"dense", {"M", "N", "K", "bias", "relu"},
       "inference layer Y[M,N] = act(X[M,K] * W[K,N] (+ b[N])), W and b constant; "
       "bias=0|1, relu=0|1",
       {{"bias", {0, 1}}, {"relu", {0, 1}}},
       {}},
      {"conv2d", {"N", "C", "H", "W", "K", "R", "S", "stride", "pad", "groups"},
       "inference convolution O[N,K,OH,OW] = sum_c,r,s I[N,g*C/G+c,H,W] * F[K,C/G,R,S] "
       "(g = k / (K/G): the output channel's group), NCHW/OIHW, dilation 1, zero padding pad on "
       "every side; OH = (H+2pad-R)/stride+1; groups G (default 1) divides C and K",
       {{"pad", {0, 64}}, {"stride", {1, 64}}},
       {{"groups", 1}}},
      {"depthwise_conv2d", {"N", "C", "H", "W", "R", "S", "stride", "pad"},
       "depthwise convolution O[N,C,OH,OW] = sum_r,s I[N,C,H,W] * F[C,R,S] (channel "
       "multiplier 1), NCHW, zero padding pad on every side",
       {{"pad", {0, 64}}, {"stride", {1, 64}}},
       {}},
      {"qmatmul", {"M", "N", "K", "a_zero", "bias", "per_channel", "out_zero"},
       "int8 matmul acc[M,N] = sum_k (A[M,K] - a_zero) * B[K,N] (+ bias[N]), A uint8, B int8 "
       "(constant weights, zero point 0), accumulated in int32, row-major; dtype=u8s8s32 "
       "outputs acc, u8s8f32 acc * scale, u8s8u8 round(acc * scale) + out_zero saturated to "
       "uint8; scale float32, one (per_channel=0) or one per column (per_channel=1); "
       "K a multiple of 4, at most 32768",
       QuantizedRanges(false), QuantizedDefaults(), QuantizedDtypes()},
      {"qconv2d",
       {"N", "C", "H", "W", "K", "R", "S", "stride", "pad", "a_zero", "bias", "per_channel", "out_zero"},
       "int8 convolution acc[N,K,OH,OW] = sum_c,r,s (I[N,C,H,W] - a_zero) * F[K,C,R,S] (+ bias[K]), "
       "NCHW/OIHW, I uint8 padded with a_zero (a real zero) pad on every side, F int8 (constant "
       "weights, zero point 0), groups 1, dilation 1, accumulated in int32; dtype as qmatmul's "
       "(s32 acc, f32 acc * scale, u8 round(acc * scale) + out_zero saturated), scale per tensor "
       "or per output channel; C*R*S at most 32768",
       QuantizedRanges(true), QuantizedDefaults(), QuantizedDtypes()},
      {"qdepthwise_conv2d",
       {"N", "C", "H", "W", "R", "S", "stride", "pad", "a_zero", "bias", "per_channel", "out_zero"},
       "int8 depthwise convolution acc[N,C,OH,OW] = sum_r,s (I[N,C,H,W] - a_zero) * F[C,R,S] "
       "(+ bias[C]), NCHW, I uint8 padded with a_zero, F int8 (zero point 0), channel multiplier 1; "
       "dtype and scales as qconv2d's",
       QuantizedRanges(true), QuantizedDefaults(), QuantizedDtypes()},
  };
  return ops;
}

namespace {

const OpInfo* FindOp(const std::string& name) {
  for (const OpInfo& op : KnownOps())
    if (op.name == name) return &op;
  return nullptr;
}

std::string OpNames() {
  std::vector<std::string> names;
  for (const OpInfo& op : KnownOps()) names.push_back(op.name);
  return absl::StrJoin(names, ", ");
}

std::string Usage(const OpInfo& op) {
  std::string s = op.name;
  for (const std::string& p : op.params)
    s += op.defaults.count(p) ? " [" + p + "=<int>]" : " " + p + "=<int>";
  const std::string dtypes = absl::StrJoin(op.dtypes, "|");
  return s + (op.dtypes.front() == "float32" ? " [dtype=" + dtypes + "]" : " dtype=" + dtypes);
}

}  // namespace

int64_t TuningTask::Param(const std::string& name) const {
  for (const auto& [k, v] : params_)
    if (k == name) return v;
  const OpInfo* info = FindOp(op_);
  TF_CHECK(info && info->defaults.count(name), "task ", op_, " has no parameter ", name);
  return info->defaults.at(name);
}

std::string TuningTask::CanonicalText() const {
  std::string s = op_;
  for (const auto& [k, v] : params_) s += " " + k + "=" + std::to_string(v);
  return s + " dtype=" + dtype_;
}

std::string TuningTask::ToJson() const {
  nlohmann::ordered_json j;
  j["op"] = op_;
  j["params"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : params_) j["params"][k] = v;
  j["dtype"] = dtype_;
  return j.dump();
}

int64_t TuningTask::ConvOutH() const {
  return (Param("H") + 2 * Param("pad") - Param("R")) / Param("stride") + 1;
}

int64_t TuningTask::ConvOutW() const {
  return (Param("W") + 2 * Param("pad") - Param("S")) / Param("stride") + 1;
}

int64_t TuningTask::ConvFilterElements() const {
  const int64_t rs = Param("R") * Param("S");
  if (op_ == "depthwise_conv2d" || op_ == "qdepthwise_conv2d") return Param("C") * rs;
  if (op_ == "qconv2d") return Param("K") * Param("C") * rs;
  return Param("K") * (Param("C") / Param("groups")) * rs;
}

std::string TuningTask::WorkloadKey() const { return op_ + "-" + HashHex(CanonicalText()); }

double TuningTask::Flops() const {
  if (op_ == "matmul") return 2.0 * Param("M") * Param("N") * Param("K");
  if (op_ == "batch_matmul") return 2.0 * Param("B") * Param("M") * Param("N") * Param("K");
  // The epilogue (bias add, ReLU) is not counted: GFLOP/s compare with sgemm's.
  if (op_ == "dense") return 2.0 * Param("M") * Param("N") * Param("K");
  if (op_ == "conv2d") {
    return 2.0 * Param("N") * Param("K") * ConvOutH() * ConvOutW() * (Param("C") / Param("groups")) *
           Param("R") * Param("S");
  }
  if (op_ == "depthwise_conv2d")
    return 2.0 * Param("N") * Param("C") * ConvOutH() * ConvOutW() * Param("R") * Param("S");
  // Integer multiply-adds, counted as float's are: int8 GOP/s compare with GFLOP/s.
  if (op_ == "qmatmul") return 2.0 * Param("M") * Param("N") * Param("K");
  if (op_ == "qconv2d" || op_ == "qdepthwise_conv2d")
    return 2.0 * Param("N") * ConvOutH() * ConvOutW() * ConvFilterElements();
  TF_CHECK(false, "no flop count for op ", op_);
}

int64_t TuningTask::BufferBytes() const {
  if (op_ == "matmul") {
    int64_t m = Param("M"), n = Param("N"), k = Param("K");
    return 4 * (m * k + k * n + m * n);
  }
  if (op_ == "batch_matmul") {
    int64_t b = Param("B"), m = Param("M"), n = Param("N"), k = Param("K");
    return 4 * b * (m * k + k * n + m * n);
  }
  if (op_ == "dense") {
    int64_t m = Param("M"), n = Param("N"), k = Param("K");
    return 4 * (m * k + k * n + Param("bias") * n + m * n);
  }
  if (op_ == "conv2d") {
    int64_t n = Param("N"), c = Param("C"), k = Param("K");
    return 4 * (n * c * Param("H") * Param("W") + ConvFilterElements() +
                n * k * ConvOutH() * ConvOutW());
  }
  if (op_ == "depthwise_conv2d") {
    int64_t n = Param("N"), c = Param("C");
    return 4 * (n * c * Param("H") * Param("W") + ConvFilterElements() +
                n * c * ConvOutH() * ConvOutW());
  }
  if (op_ == "qmatmul") {
    int64_t m = Param("M"), n = Param("N"), k = Param("K");
    const std::string out = QuantizedOutput();
    const int64_t scale = out == "s32" ? 0 : 4 * (Param("per_channel") ? n : 1);
    return m * k + k * n + 4 * Param("bias") * n + scale + (out == "u8" ? 1 : 4) * m * n;
  }
  if (op_ == "qconv2d" || op_ == "qdepthwise_conv2d") {
    const int64_t k = op_ == "qconv2d" ? Param("K") : Param("C"), outputs = Param("N") * k * ConvOutH() * ConvOutW();
    const std::string out = QuantizedOutput();
    const int64_t scale = out == "s32" ? 0 : 4 * (Param("per_channel") ? k : 1);
    return Param("N") * Param("C") * Param("H") * Param("W") + ConvFilterElements() + 4 * Param("bias") * k +
           scale + (out == "u8" ? 1 : 4) * outputs;
  }
  TF_CHECK(false, "no buffer size for op ", op_);
}

std::string TuningTask::QuantizedOutput() const {
  TF_CHECK(IsQuantized(), "task ", op_, " is not quantized");
  return dtype_.substr(4);  // u8s8 + s32|f32|u8
}

absl::StatusOr<TuningTask> MakeTask(const std::string& op,
                                    std::vector<std::pair<std::string, int64_t>> params,
                                    const std::string& dtype) {
  const OpInfo* info = FindOp(op);
  if (!info) {
    return absl::InvalidArgumentError("unknown op '" + op + "' (known: " + OpNames() + ")");
  }
  const std::string dtypes = absl::StrJoin(info->dtypes, ", ");
  if (dtype.empty() && info->dtypes.front() != "float32")
    return absl::InvalidArgumentError(op + " needs a dtype (one of " + dtypes + ")");
  const std::string type = dtype.empty() ? "float32" : dtype;
  if (std::find(info->dtypes.begin(), info->dtypes.end(), type) == info->dtypes.end()) {
    return absl::InvalidArgumentError("unsupported dtype '" + type + "' for " + op + " (supported: " + dtypes + ")");
  }
  std::map<std::string, int64_t> given;
  for (const auto& [k, v] : params) {
    bool known = false;
    for (const std::string& p : info->params) known |= (p == k);
    if (!known) {
      return absl::InvalidArgumentError("unknown parameter '" + k + "' for " + op +
                                        " (usage: " + Usage(*info) + ")");
    }
    if (!given.emplace(k, v).second) {
      return absl::InvalidArgumentError("parameter '" + k + "' given twice");
    }
    auto range = info->ranges.find(k);
    if (range != info->ranges.end()) {
      auto [lo, hi] = range->second;
      if (v < lo || v > hi) {
        return absl::InvalidArgumentError("parameter " + k + "=" + std::to_string(v) + " must be in " +
                                          std::to_string(lo) + ".." + std::to_string(hi));
      }
    } else if (v < 1) {
      return absl::InvalidArgumentError("parameter " + k + "=" + std::to_string(v) +
                                        " must be at least 1");
    }
    if (v > kMaxDim) {
      return absl::InvalidArgumentError("parameter " + k + "=" + std::to_string(v) +
                                        " is too large (at most " + std::to_string(kMaxDim) + ")");
    }
  }
  TuningTask task;
  task.op_ = op;
  task.dtype_ = type;
  for (const std::string& p : info->params) {
    auto it = given.find(p);
    auto optional = info->defaults.find(p);
    if (optional != info->defaults.end() && (it == given.end() || it->second == optional->second)) continue;
    if (it == given.end()) {
      return absl::InvalidArgumentError("missing parameter " + p + " (usage: " + Usage(*info) + ")");
    }
    task.params_.emplace_back(p, it->second);
  }
  if (op == "conv2d" || op == "depthwise_conv2d" || op == "qconv2d" || op == "qdepthwise_conv2d") {
    const int64_t pad = task.Param("pad");
    if (op == "conv2d") {
      const int64_t groups = task.Param("groups");
      if (task.Param("C") % groups != 0 || task.Param("K") % groups != 0) {
        return absl::InvalidArgumentError("groups=" + std::to_string(groups) + " must divide both C=" +
                                          std::to_string(task.Param("C")) + " and K=" +
                                          std::to_string(task.Param("K")));
      }
    }
    if (task.Param("H") + 2 * pad < task.Param("R") || task.Param("W") + 2 * pad < task.Param("S")) {
      return absl::InvalidArgumentError("the " + std::to_string(task.Param("R")) + "x" +
                                        std::to_string(task.Param("S")) +
                                        " filter is larger than the padded input of " +
                                        task.CanonicalText());
    }
    if (task.Param("R") > 64 || task.Param("S") > 64)
      return absl::InvalidArgumentError("filter sizes R and S must be at most 64");
    // Four-factor products may overflow int64: estimate in double first.
    double n = static_cast<double>(task.Param("N")), c = static_cast<double>(task.Param("C"));
    double k = op == "depthwise_conv2d" || op == "qdepthwise_conv2d" ? 1.0 : static_cast<double>(task.Param("K"));
    double hw = static_cast<double>(task.Param("H") + 2 * pad) * static_cast<double>(task.Param("W") + 2 * pad);
    double rs = static_cast<double>(task.Param("R") * task.Param("S"));
    if (4.0 * (n * c * hw * (1.0 + k) + k * c * rs) > static_cast<double>(kMaxTaskBytes)) {
      return absl::InvalidArgumentError("task '" + task.CanonicalText() + "' needs more than " +
                                        std::to_string(kMaxTaskBytes >> 20) + " MiB of buffers");
    }
  }
  if (op == "qmatmul" || op == "qconv2d" || op == "qdepthwise_conv2d") {
    // The products summed into one output: at most 32768 of 255 x 128 stay inside
    // int32 with the zero-point correction (R*S of a depthwise one is at most 4096).
    const bool conv = op == "qconv2d";
    const int64_t k = conv ? task.Param("C") * task.Param("R") * task.Param("S")
                           : op == "qmatmul" ? task.Param("K") : task.Param("R") * task.Param("S");
    const std::string what = conv ? "qconv2d: C*R*S=" : op == "qmatmul" ? "qmatmul: K=" : "qdepthwise_conv2d: R*S=";
    // The matmul kernel reduces groups of four k (one 32-bit word of bytes).
    if (op == "qmatmul" && k % 4 != 0) {
      return absl::InvalidArgumentError(what + std::to_string(k) +
                                        " must be a multiple of 4 (pad the reduction with zeros)");
    }
    if (k > 32768) {
      return absl::InvalidArgumentError(what + std::to_string(k) +
                                        " is above 32768, where int32 sums of uint8 x int8 products may overflow");
    }
    if (op == "qdepthwise_conv2d" && task.Param("C") % 4 != 0) {
      return absl::InvalidArgumentError("qdepthwise_conv2d: C=" + std::to_string(task.Param("C")) +
                                        " must be a multiple of 4 (the kernel's channel vectors)");
    }
    const std::string out = task.QuantizedOutput();
    if (out == "s32" && (task.Param("per_channel") != 0 || task.Param("out_zero") != 0)) {
      return absl::InvalidArgumentError(
          op + " dtype=u8s8s32 has no scale and no output zero point: per_channel and out_zero must be 0");
    }
    if (out == "f32" && task.Param("out_zero") != 0)
      return absl::InvalidArgumentError(op + " dtype=u8s8f32 has no output zero point: out_zero must be 0");
  }
  // Products of dims up to 2^20 each fit in int64 for three factors (2^60).
  if (task.BufferBytes() > kMaxTaskBytes) {
    return absl::InvalidArgumentError(
        "task '" + task.CanonicalText() + "' needs " + std::to_string(task.BufferBytes() >> 20) +
        " MiB of buffers (at most " + std::to_string(kMaxTaskBytes >> 20) + " MiB)");
  }
  return task;
}

absl::StatusOr<TuningTask> ParseTask(const std::string& text) {
  std::vector<std::string> words = absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (words.empty()) {
    return absl::InvalidArgumentError("empty task (expected e.g. \"matmul M=512 N=512 K=512\")");
  }
  const std::string& op = words[0];
  if (op.find('=') != std::string::npos) {
    return absl::InvalidArgumentError("task must start with an op name, got '" + op + "'");
  }
  std::string dtype;  // the op's default when left out
  std::vector<std::pair<std::string, int64_t>> params;
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == w.size()) {
      return absl::InvalidArgumentError("malformed task parameter '" + w + "' (expected NAME=VALUE)");
    }
    std::string key = w.substr(0, eq), value = w.substr(eq + 1);
    if (key == "dtype") {
      dtype = value;
      continue;
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(value, &v)) {
      return absl::InvalidArgumentError("parameter " + key + "='" + value +
                                        "' is not an integer");
    }
    params.emplace_back(key, v);
  }
  return MakeTask(op, std::move(params), dtype);
}

absl::StatusOr<TuningTask> TaskFromJson(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("op") || !j["op"].is_string() ||
      !j.contains("params") || !j["params"].is_object()) {
    return absl::InvalidArgumentError("task JSON must be {\"op\": ..., \"params\": {...}}");
  }
  std::vector<std::pair<std::string, int64_t>> params;
  for (auto it = j["params"].begin(); it != j["params"].end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError("task JSON parameter " + it.key() + " is not an integer");
    }
    params.emplace_back(it.key(), it.value().get<int64_t>());
  }
  if (j.contains("dtype") && !j["dtype"].is_string())
    return absl::InvalidArgumentError("task JSON dtype is not a string");
  std::string dtype = j.value("dtype", std::string());
  return MakeTask(j["op"].get<std::string>(), std::move(params), dtype);
}

}  // namespace tuneforge
