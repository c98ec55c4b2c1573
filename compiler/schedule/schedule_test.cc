// Tests of the schedule primitives and their lowering.
#include "compiler/schedule/schedule.h"

#include <gtest/gtest.h>

#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"
#include "compiler/task/task.h"
#include "compiler/templates/matmul_template.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

// Runs `f` in the interpreter on the reference's inputs and returns the max error.
double MaxErrorVsReference(const ir::LoweredFunc& f, int64_t m, int64_t n, int64_t k) {
  auto task = MakeTask("matmul", {{"M", m}, {"N", n}, {"K", k}}, "float32");
  TF_CHECK(task.ok());
  auto inputs = MakeInputs(*task, 7);
  auto expected = ReferenceOutput(*task, inputs);
  TF_CHECK(expected.ok());
  std::map<std::string, std::vector<float>> buffers{
      {"A", inputs[0]}, {"B", inputs[1]}, {"C", std::vector<float>(m * n, std::nanf(""))}};
  absl::Status st = ir::Interpret(f, &buffers);
  EXPECT_TRUE(st.ok()) << st << "\n" << ir::ToString(f);
  double worst = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    double d = std::fabs(buffers["C"][i] - (*expected)[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

TEST(LowerTest, UnscheduledMatmulIsThePlainLoopNest) {
  Schedule s(MatmulCompute(4, 5, 6));
  auto f = Lower(s, "mm");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ir::ToString(f->body),
            "for (i, 0, 4) {\n"
            "  for (j, 0, 5) {\n"
            "    C[i*5 + j] = 0f\n"
            "    for (k, 0, 6) {\n"
            "      C[i*5 + j] = C[i*5 + j] + A[i*6 + k]*B[k*5 + j]\n"
            "    }\n"
            "  }\n"
            "}\n");
  EXPECT_LT(MaxErrorVsReference(*f, 4, 5, 6), 1e-5);
}

// An unsplit axis of extent 1 vanishes like a split loop of extent 1: its variable
// is 0 (it used to stay as an unbound variable).
TEST(LowerTest, UnsplitAxisOfExtentOneIsZero) {
  Schedule s(MatmulCompute(1, 5, 1));
  auto f = Lower(s, "mm");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ir::ToString(f->body),
            "for (j, 0, 5) {\n"
            "  C[j] = A[0]*B[j]\n"
            "}\n");
  EXPECT_LT(MaxErrorVsReference(*f, 1, 5, 1), 1e-5);
}

TEST(LowerTest, SplitWithTailUsesMinExtent) {
  Schedule s(MatmulCompute(10, 3, 2));
  ASSERT_TRUE(s.Split("i", 4, "i.o", "i.i").ok());
  auto f = Lower(s, "mm");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(f->body);
  EXPECT_NE(text.find("for (i.o, 0, 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("for (i.i, 0, min(4, 10 - i.o*4))"), std::string::npos) << text;
  EXPECT_LT(MaxErrorVsReference(*f, 10, 3, 2), 1e-5);
}

TEST(LowerTest, VectorisedTailIsVersioned) {
  Schedule s(MatmulCompute(3, 19, 5));
  ASSERT_TRUE(s.Split("j", 8, "j.o", "j.i").ok());
  ASSERT_TRUE(s.Reorder({"i", "k", "j.o", "j.i"}).ok());
  ASSERT_TRUE(s.Vectorize("j.i").ok());
  auto f = Lower(s, "mm");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(f->body);
  EXPECT_NE(text.find("vectorized for (j.i, 0, 8)"), std::string::npos) << text;
  EXPECT_NE(text.find("if (min(8, 19 - j.o*8) == 8)"), std::string::npos) << text;
  EXPECT_LT(MaxErrorVsReference(*f, 3, 19, 5), 1e-5);
}

// Tails on two axes: the tile gets a copy per pair of row and column extents (9 rows
// in tiles of 4: 4, 4, 1; 20 columns in tiles of 8: 8, 8, 4), the most frequent first
// and the last (the corner) unguarded. The two axes' loops are walked separately.
TEST(LowerTest, CacheWriteAccumulatesLocallyWithFullTileVersion) {
  Schedule s(MatmulCompute(9, 20, 7));
  ASSERT_TRUE(s.Split("i", 4, "i.o", "i.i").ok());
  ASSERT_TRUE(s.Split("j", 8, "j.o", "j.i").ok());
  ASSERT_TRUE(s.Reorder({"i.o", "j.o", "k", "i.i", "j.i"}).ok());
  ASSERT_TRUE(s.Unroll("i.i").ok());
  ASSERT_TRUE(s.Vectorize("j.i").ok());
  ASSERT_TRUE(s.CacheWrite("k").ok());
  auto f = Lower(s, "mm");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(f->body);
  EXPECT_NE(text.find("allocate C.local[float32 * 32]"), std::string::npos) << text;
  EXPECT_NE(text.find("unrolled for (i.i, 0, 4)"), std::string::npos) << text;
  // 4 full tiles, 2 + 2 with one tail (in the order of their extents), the corner.
  const std::vector<std::string> in_order = {
      "if (min(4, 9 - i.o*4) == 4 && min(8, 20 - j.o*8) == 8) {",
      "if (min(4, 9 - i.o*4) == 1 && min(8, 20 - j.o*8) == 8) {",
      "if (min(4, 9 - i.o*4) == 4 && min(8, 20 - j.o*8) == 4) {",
      "unrolled for (i.i, 0, 1) {\n            vectorized for (j.i, 0, 4) {"};
  size_t at = 0;
  for (const std::string& part : in_order) {
    at = text.find(part, at);
    ASSERT_NE(at, std::string::npos) << part << " missing or out of order in\n" << text;
  }
  size_t copies = 0;
  for (size_t p = text.find("allocate C.local"); p != std::string::npos; p = text.find("allocate C.local", p + 1))
    ++copies;
  EXPECT_EQ(copies, 4u) << text;
  EXPECT_LT(MaxErrorVsReference(*f, 9, 20, 7), 1e-5);
}

TEST(LowerTest, RejectsWhatCannotBeLowered) {
  {
    Schedule s(MatmulCompute(8, 8, 8));
    EXPECT_FALSE(s.Vectorize("k").ok());
    EXPECT_FALSE(s.Parallel("k").ok());
    EXPECT_FALSE(s.Split("nope", 2, "a", "b").ok());
    EXPECT_FALSE(s.Split("i", 0, "a", "b").ok());
  }
  {
    // The inner loop of a split with a tail cannot move outside its outer loop.
    Schedule s(MatmulCompute(10, 8, 8));
    ASSERT_TRUE(s.Split("i", 4, "i.o", "i.i").ok());
    ASSERT_TRUE(s.Reorder({"i.i", "i.o"}).ok());
    auto f = Lower(s, "mm");
    EXPECT_FALSE(f.ok());
  }
  {
    Schedule s(MatmulCompute(8, 8, 8));
    ASSERT_TRUE(s.Vectorize("j").ok());
    auto f = Lower(s, "mm");  // j is not innermost: k is inside it
    EXPECT_FALSE(f.ok());
  }
}

}  // namespace
}  // namespace tuneforge
