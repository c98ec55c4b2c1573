#include "compiler/templates/matmul_template.h"
#include "compiler/support/status.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"

namespace tuneforge {
namespace {

Target Avx512() {
  Target t;
  t.triple = "x86_64-pc-linux-gnu";
  t.cpu = "znver4";
  t.features = "+avx,+avx2,+avx512f,+fma";
  t.num_threads = 2;
  t.device_key = "test";
  return t;
}

TuningTask Task(int64_t m, int64_t n, int64_t k) {
  auto t = MakeTask("matmul", {{"M", m}, {"N", n}, {"K", k}}, "float32");
  TF_CHECK(t.ok());
  return *t;
}

TEST(MatmulTemplateTest, SpaceHasAtLeastAThousandValidPoints) {
  MatmulTemplate tmpl;
  ConfigSpace space = tmpl.Space(Task(512, 512, 512), Avx512());
  EXPECT_GE(space.CountValid(200000), 1000u);
  // Vector width follows the target, not the build machine.
  Target avx2 = Avx512();
  avx2.features = "+avx,+avx2,+fma";
  ConfigSpace avx2_space = tmpl.Space(Task(512, 512, 512), avx2);
  for (const Knob& k : avx2_space.knobs()) {
    if (k.name == "vec_lanes") {
      EXPECT_EQ(k.values.back(), 8);
    }
  }
}

TEST(MatmulTemplateTest, InvalidConfigsAreRejectedWithTheKnobName) {
  MatmulTemplate tmpl;
  TuningTask task = Task(64, 64, 64);
  Config naive = tmpl.Naive(task, Avx512());
  ASSERT_TRUE(tmpl.Instantiate(task, Avx512(), naive).ok());
  nlohmann::json j = naive.values();
  j["vec_lanes"] = 5;
  auto r = tmpl.Instantiate(task, Avx512(), Config(j));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("vec_lanes"), std::string::npos);
  j = naive.values();
  j["bogus"] = 1;
  EXPECT_FALSE(tmpl.Instantiate(task, Avx512(), Config(j)).ok());
  j = naive.values();
  j.erase("tile_k");
  EXPECT_FALSE(tmpl.Instantiate(task, Avx512(), Config(j)).ok());
}

TEST(MatmulTemplateTest, NaiveIsThePlainLoopNest) {
  MatmulTemplate tmpl;
  TuningTask task = Task(16, 16, 16);
  auto f = tmpl.Instantiate(task, Avx512(), tmpl.Naive(task, Avx512()));
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(f->body);
  EXPECT_EQ(text.find("vectorized"), std::string::npos) << text;
  EXPECT_EQ(text.find("parallel"), std::string::npos) << text;
}

// Lowering correctness, independent of LLVM: random (shape, config) pairs, odd
// sizes included, interpreted and compared with the reference.
TEST(MatmulTemplateTest, RandomConfigsInterpretToTheReference) {
  MatmulTemplate tmpl;
  std::mt19937_64 rng(1234);
  const int64_t sizes[] = {1, 2, 3, 7, 8, 13, 16, 17, 33};
  int checked = 0;
  for (int trial = 0; trial < 150; ++trial) {
    int64_t m = sizes[rng() % 9], n = sizes[rng() % 9], k = sizes[rng() % 9];
    TuningTask task = Task(m, n, k);
    ConfigSpace space = tmpl.Space(task, Avx512());
    auto config = space.Sample(rng);
    ASSERT_TRUE(config.ok()) << task.CanonicalText();
    auto f = tmpl.Instantiate(task, Avx512(), *config);
    ASSERT_TRUE(f.ok()) << task.CanonicalText() << " " << config->ToJson() << ": " << f.status();
    auto inputs = MakeInputs(task, trial);
    auto expected = ReferenceOutput(task, inputs);
    ASSERT_TRUE(expected.ok());
    std::map<std::string, std::vector<float>> buffers{
        {"A", inputs[0]}, {"B", inputs[1]}, {"C", std::vector<float>(m * n, std::nanf(""))}};
    absl::Status st = ir::Interpret(*f, &buffers);
    ASSERT_TRUE(st.ok()) << st << "\n" << config->ToJson() << "\n" << ir::ToString(*f);
    Tolerance tol = ToleranceFor(task);
    for (int64_t i = 0; i < m * n; ++i) {
      float e = (*expected)[i], a = buffers["C"][i];
      ASSERT_LE(std::fabs(a - e), tol.atol + tol.rtol * std::fabs(e))
          << task.CanonicalText() << " " << config->ToJson() << " index " << i << "\n"
          << ir::ToString(*f);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 150);
}

}  // namespace
}  // namespace tuneforge
