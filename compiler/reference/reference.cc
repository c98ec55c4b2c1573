// Naive reference outputs of every task, the tuner's correctness check.
#include "compiler/reference/reference.h"

#include <algorithm>

#include "compiler/runtime/runtime.h"
#include "compiler/support/status.h"

namespace tuneforge {

Tolerance ToleranceFor(const TuningTask& task) {
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

std::vector<std::vector<float>> MakeInputs(const TuningTask& task, uint64_t seed) {
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
  }
  TF_CHECK(!sizes.empty(), "no inputs for op ", task.op());
  std::vector<std::vector<float>> inputs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    inputs.emplace_back(sizes[i]);
    runtime::FillBuffer(seed, static_cast<int>(i), inputs.back().data(), sizes[i]);
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

}  // namespace tuneforge
