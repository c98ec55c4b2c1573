// The int8 GEMM kernel under several schedules: lowered IR run by the interpreter
// (prepack first), and the kernel built by LLVM for the host with and without its
// dot-product instruction, must both equal plain integer loops exactly.
#include "compiler/templates/quantized_matmul.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/build.h"
#include "compiler/ir/interpreter.h"
#include "compiler/runtime/module_loader.h"

namespace tuneforge {
namespace {

struct Case {
  QuantizedMatmulShape shape;
  std::vector<int64_t> a, b;  // u8 M x K, s8 K x N

  std::vector<int64_t> Expected() const {
    const int64_t m = shape.m, n = shape.n, k = shape.k;
    std::vector<int64_t> c(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (int64_t x = 0; x < k; ++x) sum += (a[i * k + x] - shape.a_zero) * b[x * n + j];
        c[i * n + j] = sum;
      }
    }
    return c;
  }
};

Case MakeCase(int64_t m, int64_t n, int64_t k, int64_t a_zero) {
  Case c{{m, n, k, a_zero}, {}, {}};
  uint64_t state = static_cast<uint64_t>(m * 1000003 + n * 1009 + k);
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(state >> 33);
  };
  // The extremes first (255 x -128 four at a time must not saturate anywhere).
  for (int64_t x = 0; x < m * k; ++x) c.a.push_back(x < k ? 255 : next() % 256);
  for (int64_t x = 0; x < k * n; ++x) c.b.push_back(x < 4 * n ? -128 : next() % 256 - 128);
  return c;
}

Config Gemm(int64_t ri, int64_t lanes, int64_t vecs, int64_t bi, int64_t bj, int64_t tk, int64_t u,
            const std::string& order, int64_t parallel, const std::string& accumulate) {
  return Config(nlohmann::json{{"tile_i_reg", ri},   {"vec_lanes", lanes}, {"tile_j_vecs", vecs},
                               {"tile_i_blocks", bi}, {"tile_j_blocks", bj}, {"tile_k", tk},
                               {"unroll_k", u},       {"loop_order", order}, {"parallel", parallel},
                               {"accumulate", accumulate}});
}

// Register tiles holding the whole reduction, tiles adding partial sums into C, sums
// kept in C itself, a parallel jik order; 16-, 8- and 4-lane vectors.
std::vector<Config> Schedules() {
  return {Gemm(3, 16, 2, 2, 1, 6, 2, "ijk", 0, "registers"), Gemm(2, 8, 1, 1, 2, 2, 1, "ikj", 0, "registers"),
          Gemm(1, 4, 2, 1, 1, 3, 1, "ijk", 0, "memory"), Gemm(4, 16, 1, 1, 1, 6, 3, "jik", 1, "registers")};
}

Target Host(int threads) {
  Target target = DetectHostTarget("test");
  target.num_threads = threads;
  return target;
}

TEST(QuantizedMatmulTest, InterpretedKernelsAreExact) {
  for (int64_t a_zero : {0, 128}) {
    const Case c = MakeCase(7, 32, 24, a_zero);
    for (const Config& config : Schedules()) {
      SCOPED_TRACE(config.ToJson() + " a_zero " + std::to_string(a_zero));
      absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(c.shape, config, Host(2), "qmm");
      ASSERT_TRUE(func.ok()) << func.status();
      ir::IntBuffers ints;
      for (const ir::BufferParam& p : func->params) ints[p.name] = std::vector<int64_t>(p.NumElements(), 0);
      ints["A"] = c.a;
      ints["B"] = c.b;
      ir::FloatBuffers floats;
      absl::Status st = ir::Interpret(*func, &floats, &ints);
      ASSERT_TRUE(st.ok()) << st << "\n" << ir::ToString(*func);
      EXPECT_EQ(ints["C"], c.Expected());
    }
  }
}

// Runs the built kernel: prepack, then the kernel, on typed copies of the case.
std::vector<int64_t> RunBuilt(const ir::LoweredFunc& func, const Case& c, const Target& target) {
  absl::StatusOr<Artifact> artifact = BuildArtifact(func, target);
  EXPECT_TRUE(artifact.ok()) << artifact.status();
  if (!artifact.ok()) return {};
  std::string error;
  std::unique_ptr<runtime::LoadedModule> module =
      runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
  EXPECT_NE(module, nullptr) << error;
  if (!module) return {};
  std::vector<uint8_t> a(c.a.begin(), c.a.end());
  std::vector<int8_t> b(c.b.begin(), c.b.end());
  std::vector<std::vector<char>> scratch;
  std::vector<int32_t> out(c.shape.m * c.shape.n, -1);
  std::vector<void*> buffers;
  for (const ir::BufferParam& p : func.params) {
    if (p.name == "A") {
      buffers.push_back(a.data());
    } else if (p.name == "B") {
      buffers.push_back(b.data());
    } else if (p.name == "C") {
      buffers.push_back(out.data());
    } else {
      scratch.emplace_back(p.NumElements() * ir::DTypeBytes(p.dtype));
      buffers.push_back(scratch.back().data());
    }
  }
  EXPECT_TRUE(module->has_prepack());
  EXPECT_EQ(module->Prepack(buffers.data()), 0);
  EXPECT_EQ(module->Run(buffers.data()), 0);
  return std::vector<int64_t>(out.begin(), out.end());
}

TEST(QuantizedMatmulTest, BuiltKernelsAreExactWithAndWithoutTheDotProductInstruction) {
  Target plain = Host(2);
  plain.features += ",-avx512vnni,-avxvnni";
  for (const Target& target : {Host(2), plain}) {
    for (int64_t a_zero : {0, 131}) {
      const Case c = MakeCase(13, 64, 40, a_zero);
      for (const Config& config : Schedules()) {
        SCOPED_TRACE(config.ToJson() + " a_zero " + std::to_string(a_zero) + " on " + target.features.substr(0, 30));
        absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(c.shape, config, target, "qmm");
        ASSERT_TRUE(func.ok()) << func.status();
        EXPECT_EQ(RunBuilt(*func, c, target), c.Expected());
      }
    }
  }
}

TEST(QuantizedMatmulTest, UnsupportedShapesAndConfigsAreRefused) {
  const Config config = Gemm(2, 16, 1, 1, 1, 2, 1, "ijk", 0, "registers");
  auto error = [&](QuantizedMatmulShape shape, const Config& c) {
    absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(shape, c, Host(1), "qmm");
    EXPECT_FALSE(func.ok());
    return std::string(func.status().message());
  };
  EXPECT_NE(error({4, 32, 10, 0}, config).find("K = 10 is not a multiple of 4"), std::string::npos);
  EXPECT_NE(error({4, 24, 8, 0}, config).find("must divide N = 24"), std::string::npos);
  EXPECT_NE(error({4, 32, 8, 256}, config).find("a_zero = 256"), std::string::npos);
  EXPECT_NE(error({4, 32, 8, 0}, Gemm(2, 16, 1, 1, 1, 4, 1, "ijk", 0, "registers")).find("tile_k"),
            std::string::npos);
}

}  // namespace
}  // namespace tuneforge
