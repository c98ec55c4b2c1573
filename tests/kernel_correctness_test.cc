// Every candidate must compute what the reference computes: a few hundred random
// (shape, config) pairs of the matmul template, odd sizes included, built with the
// real LLVM codegen, loaded and run in this process, compared with the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "compiler/codegen/build.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/support/status.h"
#include "compiler/templates/template.h"

namespace tuneforge {
namespace {

struct Case {
  int64_t m, n, k;
};

void CheckRandomPairs(int pairs, const std::vector<int64_t>& sizes, uint64_t seed) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(seed);
  for (int p = 0; p < pairs; ++p) {
    int64_t m = sizes[rng() % sizes.size()], n = sizes[rng() % sizes.size()],
            k = sizes[rng() % sizes.size()];
    TuningTask task = *MakeTask("matmul", {{"M", m}, {"N", n}, {"K", k}}, "float32");
    const Template* tmpl = *FindTemplate(task);
    auto config = tmpl->Space(task, target).Sample(rng);
    ASSERT_TRUE(config.ok());
    auto func = tmpl->Instantiate(task, target, *config);
    ASSERT_TRUE(func.ok()) << func.status();
    auto artifact = BuildArtifact(*func, target);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    std::string error;
    auto module = runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
    ASSERT_NE(module, nullptr) << error;

    auto inputs = MakeInputs(task, p);
    auto expected = ReferenceOutput(task, inputs);
    ASSERT_TRUE(expected.ok());
    std::vector<float> out(m * n, std::nanf(""));
    void* buffers[] = {inputs[0].data(), inputs[1].data(), out.data()};
    ASSERT_EQ(module->Run(buffers), 0);
    Tolerance tol = ToleranceFor(task);
    int64_t bad = runtime::FirstMismatch(out.data(), expected->data(), m * n, tol.atol, tol.rtol);
    ASSERT_EQ(bad, -1) << task.CanonicalText() << " config " << config->ToJson() << ": index "
                       << bad << " got " << out[bad] << " expected " << (*expected)[bad];
    // Run twice: kernels must not depend on the output's previous contents.
    ASSERT_EQ(module->Run(buffers), 0);
    ASSERT_EQ(runtime::FirstMismatch(out.data(), expected->data(), m * n, tol.atol, tol.rtol), -1);
  }
}

// The template's heuristics (packed B in a heap scratch buffer, parallel packing and
// compute with 2 threads) built by LLVM, on shapes with tails in M and K.
TEST(KernelCorrectnessTest, HeuristicConfigsWithPackedB) {
  Target target = DetectHostTarget("test");
  target.num_threads = 2;
  int packed = 0;
  for (Case c : {Case{64, 96, 50}, Case{37, 128, 33}, Case{1, 64, 17}, Case{100, 48, 300}}) {
    TuningTask task = *MakeTask("matmul", {{"M", c.m}, {"N", c.n}, {"K", c.k}}, "float32");
    const Template* tmpl = *FindTemplate(task);
    std::vector<Config> configs = tmpl->Heuristics(task, target);
    ASSERT_FALSE(configs.empty());
    configs.resize(std::min<size_t>(configs.size(), 3));
    auto inputs = MakeInputs(task, 5);
    auto expected = ReferenceOutput(task, inputs);
    ASSERT_TRUE(expected.ok());
    Tolerance tol = ToleranceFor(task);
    for (const Config& config : configs) {
      packed += config.Int("pack_b");
      auto func = tmpl->Instantiate(task, target, config);
      ASSERT_TRUE(func.ok()) << func.status();
      auto artifact = BuildArtifact(*func, target);
      ASSERT_TRUE(artifact.ok()) << artifact.status();
      std::string error;
      auto module =
          runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
      ASSERT_NE(module, nullptr) << error;
      std::vector<float> out(c.m * c.n, std::nanf(""));
      void* buffers[] = {inputs[0].data(), inputs[1].data(), out.data()};
      for (int run = 0; run < 2; ++run) {
        ASSERT_EQ(module->Run(buffers), 0);
        int64_t bad =
            runtime::FirstMismatch(out.data(), expected->data(), c.m * c.n, tol.atol, tol.rtol);
        ASSERT_EQ(bad, -1) << task.CanonicalText() << " config " << config.ToJson();
      }
    }
  }
  EXPECT_GT(packed, 0);
}

// batch_matmul built by LLVM: random shapes and batch counts x random configs.
TEST(KernelCorrectnessTest, BatchMatmulRandomPairs) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(13);
  const std::vector<int64_t> sizes = {1, 3, 7, 8, 16, 17, 33, 64};
  for (int p = 0; p < 40; ++p) {
    int64_t b = 1 + rng() % 6, m = sizes[rng() % sizes.size()], n = sizes[rng() % sizes.size()],
            k = sizes[rng() % sizes.size()];
    TuningTask task =
        *MakeTask("batch_matmul", {{"B", b}, {"M", m}, {"N", n}, {"K", k}}, "float32");
    const Template* tmpl = *FindTemplate(task);
    auto config = tmpl->Space(task, target).Sample(rng);
    ASSERT_TRUE(config.ok());
    auto func = tmpl->Instantiate(task, target, *config);
    ASSERT_TRUE(func.ok()) << func.status();
    auto artifact = BuildArtifact(*func, target);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    std::string error;
    auto module =
        runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
    ASSERT_NE(module, nullptr) << error;
    auto inputs = MakeInputs(task, p);
    auto expected = ReferenceOutput(task, inputs);
    ASSERT_TRUE(expected.ok());
    std::vector<float> out(b * m * n, std::nanf(""));
    void* buffers[] = {inputs[0].data(), inputs[1].data(), out.data()};
    ASSERT_EQ(module->Run(buffers), 0);
    Tolerance tol = ToleranceFor(task);
    int64_t bad = runtime::FirstMismatch(out.data(), expected->data(), b * m * n, tol.atol, tol.rtol);
    ASSERT_EQ(bad, -1) << task.CanonicalText() << " config " << config->ToJson();
  }
}

TEST(KernelCorrectnessTest, OddAndSmallShapes) {
  CheckRandomPairs(220, {1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 48, 64, 65}, 11);
}

TEST(KernelCorrectnessTest, LargerShapesWithTails) {
  CheckRandomPairs(40, {1, 7, 33, 100, 128, 257}, 12);
}

}  // namespace
}  // namespace tuneforge
