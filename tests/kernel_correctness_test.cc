// Every candidate must compute what the reference computes: a few hundred random
// (shape, config) pairs of the matmul template, odd sizes included, built with the
// real LLVM codegen, loaded and run in this process, compared with the reference.
#include <gtest/gtest.h>

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

TEST(KernelCorrectnessTest, OddAndSmallShapes) {
  CheckRandomPairs(220, {1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 48, 64, 65}, 11);
}

TEST(KernelCorrectnessTest, LargerShapesWithTails) {
  CheckRandomPairs(40, {1, 7, 33, 100, 128, 257}, 12);
}

}  // namespace
}  // namespace tuneforge
