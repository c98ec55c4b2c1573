// conv2d_cpu and depthwise_conv2d_cpu without LLVM: prepack (layouts, padding), the
// blocked kernel and unpack, run by the interpreter, must match the reference.
#include "compiler/target/test_target.h"
#include "compiler/templates/test_interpret.h"
#include "compiler/templates/conv2d_template.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

// `edit` (optional) changes the lowered function before it runs.
void ExpectInterpretedCorrect(const TuningTask& task, const Config& config,
                              const std::function<void(ir::LoweredFunc*)>& edit = nullptr) {
  const Template* tmpl = *FindTemplate(task);
  auto f = tmpl->Instantiate(task, Avx512TestTarget(), config);
  ASSERT_TRUE(f.ok()) << task.CanonicalText() << " " << config.ToJson() << ": " << f.status();
  if (edit) edit(&*f);
  auto inputs = MakeInputs(task, 3);
  auto expected = ReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok());
  auto buffers = InterpretOnInputs(*f, inputs);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  const std::vector<float>& o = (*buffers)["O"];
  ASSERT_EQ(o.size(), expected->size());
  Tolerance tol = ToleranceFor(task);
  for (size_t i = 0; i < o.size(); ++i) {
    ASSERT_LE(std::fabs(o[i] - (*expected)[i]), tol.atol + tol.rtol * std::fabs((*expected)[i]))
        << task.CanonicalText() << " " << config.ToJson() << " index " << i;
  }
}

TuningTask Conv(const std::string& text) {
  auto t = ParseTask(text);
  TF_CHECK(t.ok(), t.status().ToString());
  return *t;
}

TEST(Conv2dTemplateTest, NaiveAndHeuristicsMatchTheReference) {
  for (const char* text : {"conv2d N=1 C=8 H=6 W=7 K=16 R=3 S=3 stride=1 pad=1",
                           "conv2d N=2 C=4 H=9 W=9 K=32 R=1 S=1 stride=2 pad=0",
                           "conv2d N=1 C=3 H=8 W=5 K=8 R=3 S=2 stride=2 pad=2",
                           "depthwise_conv2d N=1 C=32 H=7 W=9 R=3 S=3 stride=1 pad=1",
                           "depthwise_conv2d N=2 C=16 H=10 W=10 R=3 S=3 stride=2 pad=1"}) {
    TuningTask task = Conv(text);
    const Template* tmpl = *FindTemplate(task);
    ExpectInterpretedCorrect(task, tmpl->Naive(task, Avx512TestTarget()));
    std::vector<Config> h = tmpl->Heuristics(task, Avx512TestTarget());
    ASSERT_FALSE(h.empty()) << text;
    for (size_t i = 0; i < h.size(); i += 3) ExpectInterpretedCorrect(task, h[i]);
    if (HasFatalFailure()) return;
  }
}

TEST(Conv2dTemplateTest, RandomConfigsInterpreted) {
  std::mt19937_64 rng(9);
  for (int i = 0; i < 16; ++i) {
    const bool depthwise = i % 2;
    int64_t c = std::vector<int64_t>{4, 8, 16, 32}[rng() % 4];
    int64_t h = 3 + rng() % 7, w = 3 + rng() % 9, r = 1 + rng() % 3, s = 1 + rng() % 3;
    int64_t stride = 1 + rng() % 2, pad = rng() % 2;
    std::string text =
        std::string(depthwise ? "depthwise_conv2d" : "conv2d") + " N=1 C=" + std::to_string(c) +
        " H=" + std::to_string(h) + " W=" + std::to_string(w) +
        (depthwise ? "" : " K=" + std::to_string(std::vector<int64_t>{8, 16, 32}[rng() % 3])) +
        " R=" + std::to_string(r) + " S=" + std::to_string(s) + " stride=" + std::to_string(stride) +
        " pad=" + std::to_string(pad);
    TuningTask task = Conv(text);
    auto config = (*FindTemplate(task))->Space(task, Avx512TestTarget()).Sample(rng);
    ASSERT_TRUE(config.ok()) << text;
    ExpectInterpretedCorrect(task, *config);
    if (HasFatalFailure()) return;
  }
}

// The kernel skips every tap on the zero border when the row tiles divide the row
// (rows always; columns in the border tiles' own copies): with NaN written over the
// border after prepack, the output still matches the reference. Any border tap the
// kernel still read would turn its pixel into NaN.
TEST(Conv2dTemplateTest, BorderTapsAreSkipped) {
  using namespace ir;  // NOLINT
  int checked = 0;
  for (const char* text : {"conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=4 H=6 W=12 K=16 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=4 H=9 W=16 K=16 R=3 S=3 stride=2 pad=1",
                           "conv2d N=1 C=4 H=5 W=8 K=8 R=5 S=5 stride=1 pad=2",
                           "depthwise_conv2d N=1 C=16 H=7 W=14 R=3 S=3 stride=1 pad=1",
                           "depthwise_conv2d N=1 C=16 H=8 W=8 R=3 S=3 stride=2 pad=1"}) {
    TuningTask task = Conv(text);
    const Template* tmpl = *FindTemplate(task);
    const bool depthwise = task.op() == "depthwise_conv2d";
    const int64_t ow = task.ConvOutW(), pad = task.Param("pad");
    const int64_t hp = task.Param("H") + 2 * pad, wp = task.Param("W") + 2 * pad;
    std::mt19937_64 rng(5);
    for (int i = 0; i < 12; ++i) {
      Config config = tmpl->Heuristics(task, Avx512TestTarget())[0];
      if (i > 0) {
        auto sampled = tmpl->Space(task, Avx512TestTarget()).Sample(rng);
        ASSERT_TRUE(sampled.ok());
        config = *sampled;
      }
      if (ow % config.Int("ow_reg") != 0) continue;  // tail tiles keep their columns
      // I.blocked is [N, C/x, Hp, Wp, x]: NaN wherever h or w is on the border.
      const int64_t x = depthwise ? config.Int("vec_lanes") * config.Int("oc_vecs")
                                  : config.Int("ic_block");
      const int64_t blocks = task.Param("N") * task.Param("C") / x;
      Expr inside = And(And(LE(IntImm(pad), Var("z.h")), LT(Var("z.h"), IntImm(hp - pad))),
                        And(LE(IntImm(pad), Var("z.w")), LT(Var("z.w"), IntImm(wp - pad))));
      Expr index = Add(Mul(Add(Mul(Add(Mul(Var("z.b"), IntImm(hp)), Var("z.h")), IntImm(wp)),
                               Var("z.w")),
                           IntImm(x)),
                       Var("z.c"));
      Stmt poison = For(
          "z.b", IntImm(blocks), blocks, ForKind::kSerial,
          For("z.h", IntImm(hp), hp, ForKind::kSerial,
              For("z.w", IntImm(wp), wp, ForKind::kSerial,
                  For("z.c", IntImm(x), x, ForKind::kSerial,
                      IfThenElse(inside, Block({}),
                                 Store("I.blocked", index, FloatImm(std::nan(""))))))));
      ExpectInterpretedCorrect(task, config, [&](LoweredFunc* f) {
        f->prepack = Block({f->prepack, poison});
      });
      if (HasFatalFailure()) return;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

TEST(Conv2dTemplateTest, TaskValidation) {
  EXPECT_FALSE(ParseTask("conv2d N=1 C=8 H=2 W=2 K=8 R=5 S=5 stride=1 pad=0").ok());
  EXPECT_TRUE(ParseTask("conv2d N=1 C=8 H=2 W=2 K=8 R=5 S=5 stride=1 pad=2").ok());
  auto bad = ParseTask("conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=0 pad=1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stride=0 must be in 1..64"), std::string::npos);
  TuningTask t = Conv("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1");
  EXPECT_EQ(t.ConvOutH(), 56);
  EXPECT_DOUBLE_EQ(t.Flops(), 2.0 * 64 * 56 * 56 * 64 * 9);
  TuningTask d = Conv("depthwise_conv2d N=1 C=96 H=56 W=56 R=3 S=3 stride=2 pad=1");
  EXPECT_EQ(d.ConvOutW(), 28);
}

}  // namespace
}  // namespace tuneforge
