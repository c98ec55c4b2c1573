// dense_cpu without LLVM: the lowered IR, run by the interpreter (prepack first), must
// match the reference for every way the epilogue can be placed: fused into a complete
// register tile, into the last k-step of an incomplete one, or a separate pass.
#include "compiler/target/testing/test_target.h"
#include "compiler/templates/testing/interpret.h"
#include "compiler/templates/dense_template.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

TuningTask Dense(int64_t m, int64_t n, int64_t k, int64_t bias, int64_t relu) {
  auto t = MakeTask("dense", {{"M", m}, {"N", n}, {"K", k}, {"bias", bias}, {"relu", relu}},
                    "float32");
  TF_CHECK(t.ok(), t.status().ToString());
  return *t;
}

void ExpectInterpretedCorrect(const TuningTask& task, const Config& config) {
  DenseTemplate tmpl;
  auto f = tmpl.Instantiate(task, Avx512TestTarget(), config);
  ASSERT_TRUE(f.ok()) << f.status();
  auto inputs = MakeInputs(task, 3);
  auto expected = ReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok());
  auto buffers = InterpretOnInputs(*f, inputs);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  const std::vector<float>& y = (*buffers)["Y"];
  Tolerance tol = ToleranceFor(task);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_LE(std::fabs(y[i] - (*expected)[i]), tol.atol + tol.rtol * std::fabs((*expected)[i]))
        << task.CanonicalText() << " " << config.ToJson() << " index " << i;
  }
}

Config Make(int64_t ri, int64_t lanes, int64_t vecs, int64_t tile_k, const char* accumulate,
            int64_t pack, const char* order = "ijk") {
  return Config(nlohmann::json{{"tile_i_reg", ri}, {"vec_lanes", lanes}, {"tile_j_vecs", vecs},
                               {"tile_i_blocks", 2}, {"tile_j_blocks", 2}, {"tile_k", tile_k},
                               {"unroll_k", 2}, {"loop_order", order}, {"parallel", 1},
                               {"accumulate", accumulate}, {"pack_w", pack}});
}

TEST(DenseTemplateTest, EpiloguePlacements) {
  for (int64_t bias : {0, 1}) {
    for (int64_t relu : {0, 1}) {
      TuningTask task = Dense(7, 32, 20, bias, relu);
      // Complete tile (tile_k = K), packed and not.
      ExpectInterpretedCorrect(task, Make(3, 8, 2, 20, "registers", 1));
      ExpectInterpretedCorrect(task, Make(3, 8, 2, 20, "registers", 0));
      // k split outside the tile: the epilogue runs on the last k-step only.
      ExpectInterpretedCorrect(task, Make(2, 4, 2, 8, "registers", 1));
      ExpectInterpretedCorrect(task, Make(2, 4, 2, 8, "registers", 0, "ikj"));
      // No local tile: the epilogue is a pass over the finished output.
      ExpectInterpretedCorrect(task, Make(2, 4, 1, 8, "memory", 0));
      ExpectInterpretedCorrect(task, Make(1, 1, 1, 20, "memory", 1));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(DenseTemplateTest, ParamsAndPrepack) {
  DenseTemplate tmpl;
  TuningTask task = Dense(8, 64, 16, 1, 1);
  auto packed = tmpl.Instantiate(task, Avx512TestTarget(), Make(2, 16, 2, 16, "registers", 1));
  ASSERT_TRUE(packed.ok()) << packed.status();
  std::vector<std::string> names;
  for (const ir::BufferParam& p : packed->params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"X", "W", "bias", "W.packed", "Y"}));
  EXPECT_TRUE(packed->params[3].is_internal);
  EXPECT_TRUE(packed->params[4].is_output);
  EXPECT_NE(packed->prepack, nullptr);
  auto unpacked = tmpl.Instantiate(task, Avx512TestTarget(), Make(2, 16, 2, 16, "registers", 0));
  ASSERT_TRUE(unpacked.ok());
  EXPECT_EQ(unpacked->prepack, nullptr);
  EXPECT_EQ(unpacked->params[3].NumElements(), packed->params[3].NumElements());
  // A panel that does not divide N cannot be packed.
  TuningTask odd = Dense(8, 40, 16, 0, 0);
  EXPECT_FALSE(tmpl.Instantiate(odd, Avx512TestTarget(), Make(2, 16, 1, 16, "registers", 1)).ok());
  // Flags other than 0|1 are rejected with the range.
  auto bad = MakeTask("dense", {{"M", 1}, {"N", 1}, {"K", 1}, {"bias", 2}, {"relu", 0}}, "float32");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bias=2 must be in 0..1"), std::string::npos);
}

TEST(DenseTemplateTest, RandomConfigsInterpreted) {
  DenseTemplate tmpl;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 12; ++i) {
    TuningTask task = Dense(1 + rng() % 9, 1 + rng() % 40, 1 + rng() % 30, rng() % 2, rng() % 2);
    auto config = tmpl.Space(task, Avx512TestTarget()).Sample(rng);
    ASSERT_TRUE(config.ok());
    ExpectInterpretedCorrect(task, *config);
    if (HasFatalFailure()) return;
  }
}

// What the cost model lowers (InstantiateKernel) is Instantiate's kernel under a fixed
// name, without the prepack entry its features do not read.
TEST(DenseTemplateTest, InstantiateKernelIsTheKernelAlone) {
  DenseTemplate tmpl;
  TuningTask task = Dense(4, 96, 40, 1, 1);
  const ConfigSpace space = tmpl.Space(task, Avx512TestTarget());
  std::mt19937_64 rng(11);
  int packed = 0;
  for (int i = 0; i < 40; ++i) {
    auto config = space.Sample(rng);
    ASSERT_TRUE(config.ok());
    auto full = tmpl.Instantiate(task, Avx512TestTarget(), *config);
    auto kernel = tmpl.InstantiateKernel(task, Avx512TestTarget(), *config);
    ASSERT_TRUE(full.ok() && kernel.ok()) << config->ToJson();
    const bool pack = config->Int("pack_w") == 1;
    packed += pack;
    EXPECT_EQ(full->prepack != nullptr, pack);
    EXPECT_EQ(kernel->prepack, nullptr);
    EXPECT_EQ(kernel->name, "tf_dense_kernel");
    EXPECT_NE(full->name, kernel->name);
    ExpectSameKernel(*kernel, *full, config->ToJson());
  }
  EXPECT_GT(packed, 0);
  EXPECT_LT(packed, 40);
}

}  // namespace
}  // namespace tuneforge
