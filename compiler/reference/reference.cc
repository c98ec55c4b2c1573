#include "compiler/reference/reference.h"

#include "compiler/runtime/runtime.h"
#include "compiler/support/status.h"

namespace tuneforge {

Tolerance ToleranceFor(const TuningTask& task) {
  // batch_matmul: each matrix is a matmul of the same K.
  if (task.op() == "matmul" || task.op() == "batch_matmul")
    return {4e-6 * task.Param("K") + 1e-5, 1e-4};
  TF_CHECK(false, "no tolerance for op ", task.op());
}

std::vector<std::vector<float>> MakeInputs(const TuningTask& task, uint64_t seed) {
  std::vector<int64_t> sizes;
  if (task.op() == "matmul") {
    sizes = {task.Param("M") * task.Param("K"), task.Param("K") * task.Param("N")};
  } else if (task.op() == "batch_matmul") {
    int64_t b = task.Param("B");
    sizes = {b * task.Param("M") * task.Param("K"), b * task.Param("K") * task.Param("N")};
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
  return absl::UnimplementedError("no reference for op " + task.op());
}

}  // namespace tuneforge
