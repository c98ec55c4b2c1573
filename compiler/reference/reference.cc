// Naive reference outputs of every task, the tuner's correctness check.
#include "compiler/reference/reference.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "compiler/runtime/runtime.h"
#include "compiler/support/status.h"

namespace tuneforge {

Tolerance ToleranceFor(const TuningTask& task) {
  if (task.op() == "qmatmul" || task.op() == "qconv2d" || task.op() == "qdepthwise_conv2d") return {0, 0};
  // batch_matmul: each matrix is a matmul of the same K.
  if (task.op() == "matmul" || task.op() == "batch_matmul" || task.op() == "dense")
    return {4e-6 * task.Param("K") + 1e-5, 1e-4};
  // A convolution output is a sum of C/G*R*S (depthwise: R*S) products.
  if (task.op() == "conv2d")
    return {4e-6 * (task.Param("C") / task.Param("groups")) * task.Param("R") * task.Param("S") + 1e-5, 1e-4};
  if (task.op() == "depthwise_conv2d")
    return {4e-6 * task.Param("R") * task.Param("S") + 1e-5, 1e-4};
  TF_CHECK(false, "no tolerance for op ", task.op());
}

std::vector<InputSpec> InputSpecs(const TuningTask& task) {
  std::vector<int64_t> sizes;
  if (task.op() == "matmul") {
    sizes = {task.Param("M") * task.Param("K"), task.Param("K") * task.Param("N")};
  } else if (task.op() == "batch_matmul") {
    int64_t b = task.Param("B");
    sizes = {b * task.Param("M") * task.Param("K"), b * task.Param("K") * task.Param("N")};
  } else if (task.op() == "dense") {
    // X, W, then b when the task has a bias; the prepacked W is not an input.
    sizes = {task.Param("M") * task.Param("K"), task.Param("K") * task.Param("N")};
    if (task.Param("bias")) sizes.push_back(task.Param("N"));
  } else if (task.op() == "conv2d" || task.op() == "depthwise_conv2d") {
    // I (NCHW), then F (OIHW, I = C/G; depthwise: C x R x S).
    sizes = {task.Param("N") * task.Param("C") * task.Param("H") * task.Param("W"), task.ConvFilterElements()};
  } else if (task.op() == "qmatmul" || task.op() == "qconv2d" || task.op() == "qdepthwise_conv2d") {
    // A (I), B (F), [bias], [scale]: `k` products per output, `n` output channels.
    using runtime::ElementType;
    const bool matmul = task.op() == "qmatmul", depthwise = task.op() == "qdepthwise_conv2d";
    const int64_t n = matmul ? task.Param("N") : depthwise ? task.Param("C") : task.Param("K");
    const int64_t rs = matmul ? 1 : task.Param("R") * task.Param("S");
    const int64_t k = matmul ? task.Param("K") : depthwise ? rs : task.Param("C") * rs;
    const int64_t a_elements =
        matmul ? task.Param("M") * k : task.Param("N") * task.Param("C") * task.Param("H") * task.Param("W");
    std::vector<InputSpec> specs = {{a_elements, runtime::DefaultFill(ElementType::kUInt8)},
                                    {matmul ? k * n : task.ConvFilterElements(), runtime::DefaultFill(ElementType::kInt8)}};
    if (task.Param("bias")) specs.push_back({n, runtime::DefaultFill(ElementType::kInt32)});
    if (task.QuantizedOutput() != "s32") {
      // A sum of K products of about +-74 x +-74 has a spread of about 5500 sqrt(K).
      const double unit = 40.0 / (5500.0 * std::sqrt(static_cast<double>(k)));
      specs.push_back({task.Param("per_channel") ? n : 1, {ElementType::kFloat32, 0.5 * unit, 1.5 * unit}});
    }
    return specs;
  }
  TF_CHECK(!sizes.empty(), "no inputs for op ", task.op());
  std::vector<InputSpec> specs;
  for (int64_t size : sizes) specs.push_back({size, runtime::FillSpec{}});
  return specs;
}

runtime::ElementType OutputType(const TuningTask& task) {
  if (task.op() != "qmatmul" && task.op() != "qconv2d" && task.op() != "qdepthwise_conv2d")
    return runtime::ElementType::kFloat32;
  const std::string out = task.QuantizedOutput();
  return out == "s32" ? runtime::ElementType::kInt32
         : out == "u8" ? runtime::ElementType::kUInt8
                       : runtime::ElementType::kFloat32;
}

runtime::ElementType ElementTypeOf(const ir::BufferParam& param) {
  switch (param.dtype) {
    case ir::DType::kUInt8:
      return runtime::ElementType::kUInt8;
    case ir::DType::kInt8:
      return runtime::ElementType::kInt8;
    case ir::DType::kInt32:
      return runtime::ElementType::kInt32;
    case ir::DType::kFloat32:
      return runtime::ElementType::kFloat32;
    default:
      TF_CHECK(false, "buffer ", param.name, " has dtype ", ir::DTypeName(param.dtype), ", which no kernel argument has");
  }
}

HostBuffer::HostBuffer(runtime::ElementType type, int64_t elements)
    : type_(type), elements_(elements), storage_(static_cast<size_t>((bytes() + 7) / 8)) {}

HostBuffer HostBuffer::FromFloats(const std::vector<float>& values) {
  HostBuffer b(runtime::ElementType::kFloat32, static_cast<int64_t>(values.size()));
  std::copy(values.begin(), values.end(), b.As<float>());
  return b;
}

std::string HostBuffer::Bytes() const {
  return std::string(static_cast<const char*>(data()), static_cast<size_t>(bytes()));
}

std::vector<HostBuffer> MakeTypedInputs(const TuningTask& task, uint64_t seed) {
  std::vector<HostBuffer> inputs;
  const std::vector<InputSpec> specs = InputSpecs(task);
  for (size_t i = 0; i < specs.size(); ++i) {
    inputs.emplace_back(specs[i].fill.type, specs[i].elements);
    runtime::FillBuffer(seed, static_cast<int>(i), specs[i].fill, inputs.back().data(), specs[i].elements);
  }
  return inputs;
}

std::vector<std::vector<float>> MakeInputs(const TuningTask& task, uint64_t seed) {
  std::vector<std::vector<float>> inputs;
  for (const HostBuffer& b : MakeTypedInputs(task, seed)) {
    TF_CHECK(b.type() == runtime::ElementType::kFloat32, "MakeInputs: ", task.CanonicalText(),
             " has non-float inputs (MakeTypedInputs)");
    inputs.emplace_back(b.As<float>(), b.As<float>() + b.elements());
  }
  return inputs;
}

namespace {

std::vector<float> Matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                          int64_t n, int64_t k) {
  // i-k-j order over a double row: cache friendly enough for 1024^3 in about a second.
  std::vector<float> c(m * n);
  std::vector<double> row(n);
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t kk = 0; kk < k; ++kk) {
      double av = a[i * k + kk];
      const float* brow = &b[kk * n];
      for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = static_cast<float>(row[j]);
  }
  return c;
}

// The quantized tasks' inputs after A and B, and their output arithmetic: in float32
// exactly as the kernels' contract states it.
struct QuantizedEpilogue {
  const TuningTask& task;
  const int32_t* bias = nullptr;
  const float* scale = nullptr;
  HostBuffer* out = nullptr;

  // Output element `at` (of channel `channel`) from the integer sum `acc`.
  void Write(int64_t at, int64_t channel, int64_t acc) const {
    acc += bias ? bias[channel] : 0;
    TF_CHECK(acc >= INT32_MIN && acc <= INT32_MAX, task.op(), " reference: int32 overflow at ", at);
    const std::string kind = task.QuantizedOutput();
    if (kind == "s32") {
      out->As<int32_t>()[at] = static_cast<int32_t>(acc);
      return;
    }
    const float value = static_cast<float>(acc) * scale[task.Param("per_channel") ? channel : 0];
    if (kind == "f32") {
      out->As<float>()[at] = value;
    } else {
      const float shifted = std::nearbyint(value) + static_cast<float>(task.Param("out_zero"));
      out->As<uint8_t>()[at] = static_cast<uint8_t>(std::clamp(shifted, 0.0f, 255.0f));
    }
  }
};

absl::StatusOr<QuantizedEpilogue> EpilogueOf(const TuningTask& t, const std::vector<HostBuffer>& in, HostBuffer* out) {
  const bool bias = t.Param("bias") == 1, scaled = t.QuantizedOutput() != "s32";
  const size_t want = 2 + (bias ? 1 : 0) + (scaled ? 1 : 0);
  if (in.size() != want) return absl::InvalidArgumentError(t.op() + " needs " + std::to_string(want) + " inputs");
  QuantizedEpilogue e{t};
  e.bias = bias ? in[2].As<int32_t>() : nullptr;
  e.scale = scaled ? in.back().As<float>() : nullptr;
  e.out = out;
  return e;
}

// qmatmul: integer sums in int64, then the output's arithmetic.
absl::StatusOr<HostBuffer> QuantizedMatmul(const TuningTask& t, const std::vector<HostBuffer>& in) {
  const int64_t m = t.Param("M"), n = t.Param("N"), k = t.Param("K"), a_zero = t.Param("a_zero");
  HostBuffer c(OutputType(t), m * n);
  ASSIGN_OR_RETURN(const QuantizedEpilogue epilogue, EpilogueOf(t, in, &c));
  const uint8_t* a = in[0].As<uint8_t>();
  const int8_t* b = in[1].As<int8_t>();
  std::vector<int64_t> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0);
    for (int64_t x = 0; x < k; ++x) {
      const int64_t av = static_cast<int64_t>(a[i * k + x]) - a_zero;
      for (int64_t j = 0; j < n; ++j) row[j] += av * b[x * n + j];
    }
    for (int64_t j = 0; j < n; ++j) epilogue.Write(i * n + j, j, row[j]);
  }
  return c;
}

// qconv2d and qdepthwise_conv2d: direct convolution in int64, NCHW / OIHW (depthwise:
// C x R x S, output channel k reads input channel k only); a padded position holds
// a_zero, so it adds nothing.
absl::StatusOr<HostBuffer> QuantizedConv2d(const TuningTask& t, const std::vector<HostBuffer>& in) {
  const bool depthwise = t.op() == "qdepthwise_conv2d";
  const int64_t n = t.Param("N"), c = t.Param("C"), h = t.Param("H"), w = t.Param("W");
  const int64_t k = depthwise ? c : t.Param("K"), r = t.Param("R"), s = t.Param("S");
  const int64_t stride = t.Param("stride"), pad = t.Param("pad"), a_zero = t.Param("a_zero");
  const int64_t oh = t.ConvOutH(), ow = t.ConvOutW();
  HostBuffer out(OutputType(t), n * k * oh * ow);
  ASSIGN_OR_RETURN(const QuantizedEpilogue epilogue, EpilogueOf(t, in, &out));
  const uint8_t* image = in[0].As<uint8_t>();
  const int8_t* filter = in[1].As<int8_t>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ko = 0; ko < k; ++ko) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          int64_t sum = 0;
          for (int64_t ci = depthwise ? ko : 0; ci < (depthwise ? ko + 1 : c); ++ci) {
            const int64_t f0 = depthwise ? ko * r * s : (ko * c + ci) * r * s;
            for (int64_t ry = 0; ry < r; ++ry) {
              const int64_t iy = y * stride + ry - pad;
              if (iy < 0 || iy >= h) continue;
              for (int64_t sx = 0; sx < s; ++sx) {
                const int64_t ix = x * stride + sx - pad;
                if (ix < 0 || ix >= w) continue;
                sum += (static_cast<int64_t>(image[((b * c + ci) * h + iy) * w + ix]) - a_zero) *
                       filter[f0 + ry * s + sx];
              }
            }
          }
          epilogue.Write(((b * k + ko) * oh + y) * ow + x, ko, sum);
        }
      }
    }
  }
  return out;
}

// Direct convolution in double, NCHW / OIHW, grouped: output channel k reads the C/G
// input channels of its group k / (K/G). Depthwise when `depthwise` (then K == C == G
// and output channel k reads only input channel k).
std::vector<float> Conv2d(const TuningTask& t, const std::vector<float>& in,
                          const std::vector<float>& filter, bool depthwise) {
  const int64_t n = t.Param("N"), c = t.Param("C"), h = t.Param("H"), w = t.Param("W");
  const int64_t k = depthwise ? c : t.Param("K"), r = t.Param("R"), s = t.Param("S");
  const int64_t stride = t.Param("stride"), pad = t.Param("pad");
  const int64_t oh = t.ConvOutH(), ow = t.ConvOutW();
  const int64_t groups = depthwise ? c : t.Param("groups"), cg = c / groups, kg = k / groups;
  std::vector<float> out(n * k * oh * ow);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ko = 0; ko < k; ++ko) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          double sum = 0;
          const int64_t c_begin = ko / kg * cg, c_end = c_begin + cg;
          for (int64_t ci = c_begin; ci < c_end; ++ci) {
            for (int64_t ry = 0; ry < r; ++ry) {
              const int64_t iy = y * stride + ry - pad;
              if (iy < 0 || iy >= h) continue;
              for (int64_t sx = 0; sx < s; ++sx) {
                const int64_t ix = x * stride + sx - pad;
                if (ix < 0 || ix >= w) continue;
                const double f = filter[((ko * cg + ci - c_begin) * r + ry) * s + sx];
                sum += static_cast<double>(in[((b * c + ci) * h + iy) * w + ix]) * f;
              }
            }
          }
          out[((b * k + ko) * oh + y) * ow + x] = static_cast<float>(sum);
        }
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<float>> ReferenceOutput(const TuningTask& task,
                                                   const std::vector<std::vector<float>>& inputs) {
  if (task.op() == "matmul") {
    if (inputs.size() != 2) return absl::InvalidArgumentError("matmul needs 2 inputs");
    return Matmul(inputs[0], inputs[1], task.Param("M"), task.Param("N"), task.Param("K"));
  }
  if (task.op() == "batch_matmul") {
    if (inputs.size() != 2) return absl::InvalidArgumentError("batch_matmul needs 2 inputs");
    int64_t b = task.Param("B"), m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
    std::vector<float> c;
    c.reserve(b * m * n);
    for (int64_t x = 0; x < b; ++x) {
      std::vector<float> a_x(inputs[0].begin() + x * m * k, inputs[0].begin() + (x + 1) * m * k);
      std::vector<float> b_x(inputs[1].begin() + x * k * n, inputs[1].begin() + (x + 1) * k * n);
      std::vector<float> c_x = Matmul(a_x, b_x, m, n, k);
      c.insert(c.end(), c_x.begin(), c_x.end());
    }
    return c;
  }
  if (task.op() == "dense") {
    const bool bias = task.Param("bias") == 1, relu = task.Param("relu") == 1;
    if (inputs.size() != (bias ? 3u : 2u))
      return absl::InvalidArgumentError("dense needs " + std::to_string(bias ? 3 : 2) + " inputs");
    int64_t m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
    std::vector<float> y = Matmul(inputs[0], inputs[1], m, n, k);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float v = y[i * n + j] + (bias ? inputs[2][j] : 0.0f);
        y[i * n + j] = relu ? std::max(v, 0.0f) : v;
      }
    }
    return y;
  }
  if (task.op() == "conv2d" || task.op() == "depthwise_conv2d") {
    if (inputs.size() != 2) return absl::InvalidArgumentError(task.op() + " needs 2 inputs");
    return Conv2d(task, inputs[0], inputs[1], task.op() == "depthwise_conv2d");
  }
  return absl::UnimplementedError("no reference for op " + task.op());
}

absl::StatusOr<HostBuffer> TypedReferenceOutput(const TuningTask& task, const std::vector<HostBuffer>& inputs) {
  if (task.op() == "qmatmul") return QuantizedMatmul(task, inputs);
  if (task.op() == "qconv2d" || task.op() == "qdepthwise_conv2d") return QuantizedConv2d(task, inputs);
  std::vector<std::vector<float>> floats;
  for (const HostBuffer& b : inputs) {
    if (b.type() != runtime::ElementType::kFloat32)
      return absl::InvalidArgumentError(task.op() + " takes float32 inputs");
    floats.emplace_back(b.As<float>(), b.As<float>() + b.elements());
  }
  ASSIGN_OR_RETURN(std::vector<float> out, ReferenceOutput(task, floats));
  return HostBuffer::FromFloats(out);
}

}  // namespace tuneforge
