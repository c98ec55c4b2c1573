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

// Builds `config` with LLVM, loads it, runs it `runs` times on the seeded inputs and
// compares every run with the reference (a kernel must not depend on the output's
// previous contents).
void ExpectCorrect(const TuningTask& task, const Target& target, const Config& config,
                   uint64_t input_seed, int runs) {
  const Template* tmpl = *FindTemplate(task);
  auto func = tmpl->Instantiate(task, target, config);
  ASSERT_TRUE(func.ok()) << func.status();
  auto artifact = BuildArtifact(*func, target);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  std::string error;
  auto module = runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
  ASSERT_NE(module, nullptr) << error;
  auto inputs = MakeInputs(task, input_seed);
  auto expected = ReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok());
  const int64_t size = static_cast<int64_t>(expected->size());
  std::vector<float> out(size, std::nanf(""));
  void* buffers[] = {inputs[0].data(), inputs[1].data(), out.data()};
  Tolerance tol = ToleranceFor(task);
  for (int run = 0; run < runs; ++run) {
    ASSERT_EQ(module->Run(buffers), 0);
    int64_t bad = runtime::FirstMismatch(out.data(), expected->data(), size, tol.atol, tol.rtol);
    ASSERT_EQ(bad, -1) << task.CanonicalText() << " config " << config.ToJson() << ": index "
                       << bad << " got " << out[bad] << " expected " << (*expected)[bad];
  }
}

void CheckRandomPairs(int pairs, const std::vector<int64_t>& sizes, uint64_t seed) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(seed);
  for (int p = 0; p < pairs; ++p) {
    int64_t m = sizes[rng() % sizes.size()], n = sizes[rng() % sizes.size()],
            k = sizes[rng() % sizes.size()];
    TuningTask task = *MakeTask("matmul", {{"M", m}, {"N", n}, {"K", k}}, "float32");
    auto config = (*FindTemplate(task))->Space(task, target).Sample(rng);
    ASSERT_TRUE(config.ok());
    ExpectCorrect(task, target, *config, p, 2);
    if (::testing::Test::HasFatalFailure()) return;
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
    std::vector<Config> configs = (*FindTemplate(task))->Heuristics(task, target);
    ASSERT_FALSE(configs.empty());
    configs.resize(std::min<size_t>(configs.size(), 3));
    for (const Config& config : configs) {
      packed += config.Int("pack_b");
      ExpectCorrect(task, target, config, 5, 2);
      if (HasFatalFailure()) return;
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
    auto config = (*FindTemplate(task))->Space(task, target).Sample(rng);
    ASSERT_TRUE(config.ok());
    ExpectCorrect(task, target, *config, p, 1);
    if (HasFatalFailure()) return;
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
