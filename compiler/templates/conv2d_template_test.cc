// conv2d_cpu and depthwise_conv2d_cpu without LLVM: prepack (layouts, padding), the
// blocked kernel and unpack, run by the interpreter, must match the reference.
#include "compiler/target/testing/test_target.h"
#include "compiler/templates/testing/interpret.h"
#include "compiler/templates/conv2d_template.h"
#include "compiler/templates/conv2d_winograd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <thread>

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

// The default schedule (the first heuristic) on AVX2: Winograd for a 3x3 stride-1
// convolution (F(4,3) unless F(2,3) does less work), two channel vectors for a 1x1
// convolution (output rows outside unless the weights outweigh the input and there
// are channel blocks enough for the threads; three vectors or one where two do not
// divide K),
// otherwise the direct tile whose accumulators (at most 10 of AVX2's 16 registers)
// do the most useful work; each computes the reference's answer.
TEST(Conv2dTemplateTest, DefaultSchedulesOnAvx2) {
  struct Case {
    const char* text;
    const char* algorithm;
    int64_t oc_vecs, ow_reg;
    const char* outer;
  };
  for (const Case& c : std::vector<Case>{
           {"conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1", "winograd_f43", 4, 2, "koh"},
           {"conv2d N=1 C=16 H=6 W=6 K=32 R=3 S=3 stride=1 pad=1", "winograd_f23", 4, 3, "koh"},
           {"conv2d N=1 C=16 H=7 W=14 K=32 R=1 S=1 stride=1 pad=0", "direct", 2, 5, "ohk"},
           {"conv2d N=1 C=64 H=3 W=3 K=64 R=1 S=1 stride=1 pad=0", "direct", 2, 3, "koh"},
           // One output-channel block: rows outside, so both threads have work.
           {"conv2d N=1 C=8 H=9 W=13 K=24 R=5 S=5 stride=1 pad=2", "direct", 3, 3, "ohk"},
           // Partial tiles (2x2 of F(4,3) for 7x7): 0.9-1.1 us against the direct
           // tile's 1.4-2.5 (K=16), 2.6-3.7 against 3.1-6.4 (K=64) with AVX2 on a Zen 4.
           {"conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 stride=1 pad=1", "winograd_f43", 2, 2, "koh"},
           {"conv2d N=1 C=8 H=7 W=7 K=64 R=3 S=3 stride=1 pad=1", "winograd_f43", 4, 2, "koh"},
           // Few tiles of F(4,3) with its weights streamed from memory: F(2,3) first.
           {"conv2d N=1 C=64 H=7 W=7 K=128 R=3 S=3 stride=1 pad=1", "winograd_f23", 4, 2, "koh"},
           {"conv2d N=1 C=32 H=9 W=9 K=16 R=1 S=1 stride=1 pad=0", "direct", 2, 5, "ohk"},
           {"conv2d N=1 C=32 H=6 W=6 K=24 R=1 S=1 stride=1 pad=0", "direct", 3, 3, "ohk"}}) {
    TuningTask task = Conv(c.text);
    const Template* tmpl = *FindTemplate(task);
    const Config first = tmpl->Heuristics(task, Avx2TestTarget()).front();
    EXPECT_EQ(first.Str("algorithm", "direct"), c.algorithm) << c.text << " " << first.ToJson();
    EXPECT_EQ(first.Int("oc_vecs"), c.oc_vecs) << c.text << " " << first.ToJson();
    EXPECT_EQ(first.Int("ow_reg"), c.ow_reg) << c.text << " " << first.ToJson();
    EXPECT_EQ(first.Str("outer_order"), c.outer) << c.text << " " << first.ToJson();
    ExpectInterpretedCorrect(task, first);
    if (HasFatalFailure()) return;
  }
}

// On AVX-512 a 3x3 convolution with more than 1 MB of weights on an image of at
// most 64 Winograd tiles starts direct (its weights stream from memory in a model,
// Winograd's are larger and used once per tile); smaller ones, larger images and
// AVX2 keep Winograd first.
TEST(Conv2dTemplateTest, DefaultAlgorithmByWeightSize) {
  auto first = [](const char* text, const Target& target) {
    TuningTask task = Conv(text);
    return (*FindTemplate(task))->Heuristics(task, target).front().Str("algorithm", "direct");
  };
  const char* large = "conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1";  // 2.4 MB
  const char* small = "conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1";  // 0.6 MB
  EXPECT_EQ(first(large, Avx512TestTarget()), "direct");
  EXPECT_EQ(first(large, Avx2TestTarget()), "winograd_f23");
  EXPECT_EQ(first(small, Avx512TestTarget()), "winograd_f43");
  EXPECT_EQ(first("conv2d N=1 C=256 H=56 W=56 K=256 R=3 S=3 stride=1 pad=1", Avx512TestTarget()), "winograd_f43");
  EXPECT_EQ(first("conv2d N=1 C=512 H=28 W=28 K=512 R=3 S=3 stride=1 pad=1", Avx512TestTarget()), "direct");
}

// A 1x1 conv whose channels do not fill the machine's vectors (a classifier's 1000
// on AVX-512: 8 lanes) starts with five vectors per block; where they fill them, or
// on AVX2, with two or three.
TEST(Conv2dTemplateTest, DefaultBlockOfNarrowVectors) {
  auto first = [](const char* text, const Target& target) {
    TuningTask task = Conv(text);
    const Config c = (*FindTemplate(task))->Heuristics(task, target).front();
    return std::make_pair(c.Int("vec_lanes"), c.Int("oc_vecs"));
  };
  const char* classifier = "conv2d N=1 C=512 H=13 W=13 K=1000 R=1 S=1 stride=1 pad=0";
  EXPECT_EQ(first(classifier, Avx512TestTarget()), std::make_pair(int64_t{8}, int64_t{5}));
  EXPECT_EQ(first(classifier, Avx2TestTarget()), std::make_pair(int64_t{8}, int64_t{1}));
  EXPECT_EQ(first("conv2d N=1 C=512 H=13 W=13 K=1024 R=1 S=1 stride=1 pad=0", Avx512TestTarget()),
            std::make_pair(int64_t{16}, int64_t{2}));
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
      // Winograd's transforms read every tap of a tile, border or not.
      if (config.values().value("algorithm", "direct") != "direct") continue;
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

// PrefetchNextWeightBlock: the kernel still computes the reference, and its
// prefetches cover every cache line of every output-channel block but the first (the
// one no block before it fetches) and nothing outside the packed weights. The test
// turns each prefetch into a store of 1 at its line in a buffer of the weights' lines.
// (Direct kernels: Winograd's read each transformed weight block once per work item
// and are built without prefetches.)
TEST(Conv2dTemplateTest, WeightPrefetchCoversTheNextBlock) {
  using namespace ir;  // NOLINT
  int checked = 0;
  for (const char* text : {"conv2d N=1 C=16 H=7 W=7 K=64 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=8 H=6 W=12 K=48 R=3 S=3 stride=2 pad=1",
                           "conv2d N=1 C=32 H=5 W=5 K=32 R=1 S=1 stride=1 pad=0"}) {
    TuningTask task = Conv(text);
    const Template* tmpl = *FindTemplate(task);
    std::mt19937_64 rng(11);
    for (int direct = 0; direct < 12;) {
      auto config = tmpl->Space(task, Avx512TestTarget()).Sample(rng);
      ASSERT_TRUE(config.ok());
      if (config->Str("algorithm", "direct") != "direct") continue;
      ++direct;
      auto f = tmpl->Instantiate(task, Avx512TestTarget(), *config);
      ASSERT_TRUE(f.ok());
      const int64_t y = config->Int("vec_lanes") * config->Int("oc_vecs");
      const int64_t blocks = task.Param("K") / y;
      const int64_t weights = task.Param("K") * task.Param("C") * task.Param("R") * task.Param("S");
      const int64_t lines = (weights * 4 / blocks + 63) / 64 * blocks;
      auto with = static_cast<const Conv2dTemplate*>(tmpl)->InstantiateStreamingWeights(task, Avx512TestTarget(), *config);
      ASSERT_TRUE(with.ok());
      if (blocks < 2) {
        EXPECT_EQ(ToString(*with), ToString(*f));
        continue;
      }
      ASSERT_NE(ToString(*with), ToString(*f)) << config->ToJson();
      const int64_t slab = weights / blocks, slab_lines = lines / blocks;
      ExpectInterpretedCorrect(task, *config, [&](LoweredFunc* g) {
        *g = *with;
        g->body = Rewrite(g->body, [&](const Stmt& st) -> Stmt {
          if (st->kind != StmtKind::kPrefetch) return st;
          // index = block * slab + line * 16: the line's number over all blocks.
          Expr line = Add(Mul(Div(st->index, IntImm(slab)), IntImm(slab_lines)),
                          Div(Mod(st->index, IntImm(slab)), IntImm(16)));
          return Store("pf.lines", line, FloatImm(1.0));
        });
        BufferParam hits{"pf.lines", DType::kFloat32, {lines}, false};
        hits.is_internal = true;
        g->params.push_back(hits);
        auto buffers = InterpretOnInputs(*g, MakeInputs(task, 3));
        ASSERT_TRUE(buffers.ok()) << buffers.status();
        const std::vector<float>& touched = (*buffers)["pf.lines"];
        for (int64_t l = slab_lines; l < lines; ++l) {
          ASSERT_EQ(touched[static_cast<size_t>(l)], 1.0f) << text << " " << config->ToJson() << " line " << l;
        }
      });
      if (HasFatalFailure()) return;
      ++checked;
    }
  }
  EXPECT_GE(checked, 12);
}

// InstantiateInto: the register tile writes the output straight into a reader's
// blocked, zero-bordered layout of z channels per block (z a multiple of y, equal,
// or dividing y into whole vectors), through the model's epilogue (here: + a
// per-channel value loaded at base + lane), and nothing outside the interior.
TEST(Conv2dTemplateTest, WritesIntoAReadersBlockedLayout) {
  using namespace ir;  // NOLINT
  int checked = 0, winograd = 0;
  for (const char* text : {"conv2d N=1 C=16 H=7 W=9 K=64 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=16 H=8 W=12 K=32 R=3 S=3 stride=1 pad=1",  // Winograd too
                           "conv2d N=1 C=8 H=8 W=8 K=32 R=1 S=1 stride=2 pad=0",
                           "conv2d N=1 C=16 H=7 W=9 K=64 R=3 S=3 stride=1 pad=1 groups=2",
                           "depthwise_conv2d N=1 C=32 H=9 W=7 R=3 S=3 stride=1 pad=1"}) {
    TuningTask task = Conv(text);
    const auto* tmpl = static_cast<const Conv2dTemplate*>(*FindTemplate(task));
    const bool depthwise = task.op() == "depthwise_conv2d";
    const int64_t k = depthwise ? task.Param("C") : task.Param("K");
    const int64_t oh = task.ConvOutH(), ow = task.ConvOutW();
    std::mt19937_64 rng(13);
    auto inputs = MakeInputs(task, 3);
    auto expected = ReferenceOutput(task, inputs);
    ASSERT_TRUE(expected.ok());
    std::vector<float> extra(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) extra[static_cast<size_t>(c)] = 0.25f * static_cast<float>(c % 7);
    for (int i = 0; i < 10; ++i) {
      auto config = tmpl->Space(task, Avx512TestTarget()).Sample(rng);
      ASSERT_TRUE(config.ok());
      for (int64_t z : {4, 8, 16, 32, 64}) {
        if (k % z != 0 || !Conv2dTemplate::CanWriteInto(*config, z, 0)) continue;
        ConvOutputSpec spec;
        spec.buffer = "next.I.blocked";
        spec.block = z;
        spec.pad_h = 1;
        spec.pad_w = 2;
        spec.inputs = {BufferParam{"extra", DType::kFloat32, {k}, false}};
        spec.epilogue = [](Expr sum, Expr, Expr base, Expr lane, Expr, Expr) {
          return Add(sum, Load("extra", DType::kFloat32, Add(base, lane)));
        };
        auto f = tmpl->InstantiateInto(task, Avx512TestTarget(), *config, true, spec);
        ASSERT_TRUE(f.ok()) << f.status();
        std::vector<std::vector<float>> in = inputs;
        in.push_back(extra);
        auto buffers = InterpretOnInputs(*f, in);
        ASSERT_TRUE(buffers.ok()) << buffers.status();
        const std::vector<float>& out = (*buffers)["next.I.blocked"];
        const int64_t hp = oh + 2, wp = ow + 4;
        ASSERT_EQ(static_cast<int64_t>(out.size()), k * hp * wp);
        Tolerance tol = ToleranceFor(task);
        for (int64_t c = 0; c < k; ++c) {
          for (int64_t h = 0; h < hp; ++h) {
            for (int64_t w = 0; w < wp; ++w) {
              const float got = out[static_cast<size_t>((((c / z) * hp + h) * wp + w) * z + c % z)];
              if (h < 1 || h >= oh + 1 || w < 2 || w >= ow + 2) {
                ASSERT_TRUE(std::isnan(got)) << "border written at " << c << "," << h << "," << w;
                continue;
              }
              const float want =
                  (*expected)[static_cast<size_t>((c * oh + h - 1) * ow + w - 2)] + extra[static_cast<size_t>(c)];
              ASSERT_LE(std::fabs(got - want), tol.atol + tol.rtol * std::fabs(want))
                  << text << " " << config->ToJson() << " z=" << z << " at " << c << "," << h << "," << w;
            }
          }
        }
        ++checked;
        winograd += config->values().value("algorithm", "direct") != "direct";
      }
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GE(checked, 12);
  EXPECT_GE(winograd, 3);
}

// Winograd F(2,3) and F(4,3) (the algorithm knob): random configs of each algorithm,
// both GEMM orders, several tile rows per work item, scalar and vector lanes, match
// the reference within conv2d's tolerance, pad 1 and pad 0, batch 1 and 2, with
// partial tiles in the last row, the last column or both (7x7: 2x2 tiles of F(4,3),
// 4x4 of F(2,3); 7x11; 6x4: F(4,3)'s rows only).
TEST(Conv2dTemplateTest, WinogradMatchesTheReference) {
  std::set<std::string> seen;  // algorithm/outer_order/tile_rows
  for (const char* text : {"conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1",
                           "conv2d N=2 C=8 H=12 W=4 K=16 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=4 H=10 W=6 K=8 R=3 S=3 stride=1 pad=0",
                           "conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 stride=1 pad=1",
                           "conv2d N=2 C=4 H=9 W=13 K=8 R=3 S=3 stride=1 pad=0",
                           "conv2d N=1 C=8 H=8 W=6 K=16 R=3 S=3 stride=1 pad=0"}) {
    TuningTask task = Conv(text);
    const Template* tmpl = *FindTemplate(task);
    const ConfigSpace space = tmpl->Space(task, Avx512TestTarget());
    std::mt19937_64 rng(17);
    int checked = 0;
    for (int i = 0; i < 400 && checked < 10; ++i) {
      auto config = space.Sample(rng);
      ASSERT_TRUE(config.ok());
      if (config->Str("algorithm") == "direct") continue;
      ExpectInterpretedCorrect(task, *config);
      if (HasFatalFailure()) return;
      seen.insert(config->Str("algorithm") + "/" + config->Str("outer_order") + "/" +
                  (config->Int("tile_rows") > 1 ? "rows" : "row"));
      ++checked;
    }
    EXPECT_EQ(checked, 10) << text;
  }
  for (const char* want : {"winograd_f23/koh/row", "winograd_f23/ohk/row", "winograd_f43/koh/row",
                           "winograd_f43/ohk/row", "winograd_f23/koh/rows", "winograd_f23/ohk/rows"}) {
    EXPECT_TRUE(seen.count(want)) << want;
  }
}

// Winograd kernels share the transform stages of the kernels built before them that
// read the same plan fields: every kernel built after many others (of two tasks,
// interleaved; on one thread or two at once) is the kernel built from scratch.
TEST(Conv2dTemplateTest, SharedWinogradTransformsChangeNoKernel) {
  std::vector<std::pair<TuningTask, Config>> kernels;
  for (const char* text : {"conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1",
                           "conv2d N=2 C=8 H=12 W=4 K=16 R=3 S=3 stride=1 pad=1"}) {
    TuningTask task = Conv(text);
    const ConfigSpace space = (*FindTemplate(task))->Space(task, Avx512TestTarget());
    std::mt19937_64 rng(23);
    int winograd = 0;
    for (int i = 0; i < 400 && winograd < 60; ++i) {
      auto config = space.Sample(rng);
      ASSERT_TRUE(config.ok());
      if (config->Str("algorithm") == "direct") continue;
      kernels.emplace_back(task, *config);
      ++winograd;
    }
    EXPECT_EQ(winograd, 60) << text;
  }
  auto text_of = [](const TuningTask& task, const Config& config) {
    auto f = (*FindTemplate(task))->InstantiateKernel(task, Avx512TestTarget(), config);
    TF_CHECK(f.ok(), f.status().ToString());
    return ir::ToString(f->body);
  };
  std::vector<std::string> alone;
  for (const auto& [task, config] : kernels) {
    winograd::ForgetSharedStages();
    alone.push_back(text_of(task, config));
  }
  std::mt19937_64 rng(3);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<size_t> order(kernels.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      ASSERT_EQ(text_of(kernels[i].first, kernels[i].second), alone[i]) << kernels[i].second.ToJson();
    }
  }
  // Two threads building them at once, in different orders, share the stages too.
  winograd::ForgetSharedStages();
  std::vector<std::vector<std::string>> built(2, std::vector<std::string>(kernels.size()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (size_t n = 0; n < kernels.size(); ++n) {
        const size_t i = t == 0 ? n : kernels.size() - 1 - n;
        built[t][i] = text_of(kernels[i].first, kernels[i].second);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_EQ(built[0][i], alone[i]) << kernels[i].second.ToJson();
    EXPECT_EQ(built[1][i], alone[i]) << kernels[i].second.ToJson();
  }
}

// What the cost model lowers (InstantiateKernel) is Instantiate's kernel, without the
// prepack and unpack its features do not read, for both algorithms.
TEST(Conv2dTemplateTest, InstantiateKernelIsTheKernelAlone) {
  TuningTask task = Conv("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1");
  const Template* tmpl = *FindTemplate(task);
  const ConfigSpace space = tmpl->Space(task, Avx512TestTarget());
  std::mt19937_64 rng(5);
  std::set<std::string> algorithms;
  for (int i = 0; i < 40; ++i) {
    auto config = space.Sample(rng);
    ASSERT_TRUE(config.ok());
    auto full = tmpl->Instantiate(task, Avx512TestTarget(), *config);
    auto kernel = tmpl->InstantiateKernel(task, Avx512TestTarget(), *config);
    ASSERT_TRUE(full.ok() && kernel.ok()) << config->ToJson();
    EXPECT_TRUE(full->prepack != nullptr);
    EXPECT_EQ(kernel->prepack, nullptr);
    EXPECT_EQ(kernel->unpack, nullptr);
    ExpectSameKernel(*kernel, *full, config->ToJson());
    algorithms.insert(config->Str("algorithm"));
  }
  EXPECT_EQ(algorithms.size(), 3u);  // direct, winograd_f23, winograd_f43
}

// The algorithm knob exists only where Winograd applies; bad combinations say why;
// a config from before the knob (no algorithm, no tile_rows) is the direct kernel.
TEST(Conv2dTemplateTest, WinogradSpaceRules) {
  const Template* tmpl = *FindTemplate(Conv("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1"));
  auto algorithms = [&](const char* text) {
    TuningTask task = Conv(text);
    const ConfigSpace space = tmpl->Space(task, Avx512TestTarget());
    for (const Knob& k : space.knobs())
      if (k.name == "algorithm") return nlohmann::json(k.values).dump();
    return std::string("none");
  };
  EXPECT_EQ(algorithms("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1"),
            R"(["direct","winograd_f23","winograd_f43"])");
  // Partial tiles where m does not divide the output; not where the output is smaller
  // than a tile.
  EXPECT_EQ(algorithms("conv2d N=1 C=16 H=14 W=14 K=32 R=3 S=3 stride=1 pad=1"),
            R"(["direct","winograd_f23","winograd_f43"])");
  EXPECT_EQ(algorithms("conv2d N=1 C=16 H=3 W=9 K=32 R=3 S=3 stride=1 pad=1"), R"(["direct","winograd_f23"])");
  EXPECT_EQ(algorithms("conv2d N=1 C=16 H=3 W=3 K=32 R=3 S=3 stride=1 pad=0"), R"(["direct"])");
  EXPECT_EQ(algorithms("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=2 pad=1"), R"(["direct"])");
  EXPECT_EQ(algorithms("conv2d N=1 C=16 H=8 W=8 K=32 R=1 S=1 stride=1 pad=0"), R"(["direct"])");

  TuningTask task = Conv("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1");
  const ConfigSpace space = tmpl->Space(task, Avx512TestTarget());
  nlohmann::json base = {{"ic_block", 16}, {"vec_lanes", 16}, {"oc_vecs", 1}, {"ow_reg", 4},
                         {"unroll_ci", 4}, {"reduce_order", "crs"}, {"outer_order", "koh"}, {"parallel", 0}};
  auto error = [&](nlohmann::json extra) {
    nlohmann::json c = base;
    c.update(extra);
    return std::string(space.Check(Config(c)).message());
  };
  EXPECT_EQ(error(nlohmann::json::object()), "");
  EXPECT_EQ(error({{"algorithm", "winograd_f43"}, {"tile_rows", 2}}), "");
  EXPECT_NE(error({{"tile_rows", 2}}).find("tile_rows is a Winograd knob"), std::string::npos);
  EXPECT_NE(error({{"algorithm", "winograd_f43"}, {"ow_reg", 3}}).find("ow_reg must divide"), std::string::npos);
  EXPECT_NE(error({{"algorithm", "winograd_f23"}, {"reduce_order", "rsc"}}).find("one reduce_order"),
            std::string::npos);
  EXPECT_NE(error({{"algorithm", "winograd_f23"}, {"tile_rows", 7}}).find("not one of"), std::string::npos)
      << error({{"algorithm", "winograd_f23"}, {"tile_rows", 7}});
  // FLOPs a config performs (what bounds a plausible time): F(4,3) 36 products per 16
  // outputs instead of 144, F(2,3) 16 per 4 instead of 36.
  nlohmann::json f43 = base, f23 = base;
  f43["algorithm"] = "winograd_f43";
  f23["algorithm"] = "winograd_f23";
  EXPECT_DOUBLE_EQ(tmpl->Flops(task, Config(base)), task.Flops());
  EXPECT_DOUBLE_EQ(tmpl->Flops(task, Config(f43)), task.Flops() / 4);
  EXPECT_DOUBLE_EQ(tmpl->Flops(task, Config(f23)), task.Flops() * 4 / 9);
  // With partial tiles, those of the whole tiles: 7x7 in F(4,3) is 2x2 tiles (64 outputs).
  TuningTask seven = Conv("conv2d N=1 C=16 H=7 W=7 K=32 R=3 S=3 stride=1 pad=1");
  EXPECT_DOUBLE_EQ(tmpl->Flops(seven, Config(f43)), seven.Flops() * 64 / 49 / 4);
  TuningTask strided = Conv("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=2 pad=1");
  nlohmann::json w = base;
  w["algorithm"] = "winograd_f23";
  EXPECT_FALSE(tmpl->Space(strided, Avx512TestTarget()).Check(Config(w)).ok());

  nlohmann::json explicit_direct = base;
  explicit_direct.update({{"algorithm", "direct"}, {"tile_rows", 1}});
  auto old_kernel = tmpl->Instantiate(task, Avx512TestTarget(), Config(base));
  auto new_kernel = tmpl->Instantiate(task, Avx512TestTarget(), Config(explicit_direct));
  ASSERT_TRUE(old_kernel.ok() && new_kernel.ok());
  EXPECT_EQ(ir::ToString(old_kernel->body), ir::ToString(new_kernel->body));
}

// The heuristics size the register tile by the target's vector registers (Target::
// VectorRegisters): up to 24 accumulators with 32 registers (AVX-512, aarch64's NEON,
// riscv64's RVV), 12 with AVX2's 16, the direct and the Winograd tiles alike.
TEST(Conv2dTemplateTest, HeuristicTilesFitTheTargetsRegisters) {
  Target arm = Avx512TestTarget();
  arm.triple = "aarch64-unknown-linux-gnu";
  arm.cpu = "cortex-a76";
  arm.features = "+neon";
  EXPECT_EQ(Avx512TestTarget().VectorRegisters(), 32);
  EXPECT_EQ(Avx2TestTarget().VectorRegisters(), 16);
  EXPECT_EQ(arm.VectorRegisters(), 32);
  TuningTask task = Conv("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1");
  const Template* tmpl = *FindTemplate(task);
  for (const auto& [target, limit] : std::vector<std::pair<Target, int64_t>>{
           {Avx512TestTarget(), 24}, {Avx2TestTarget(), 12}, {arm, 24}}) {
    int64_t largest = 0;
    for (const Config& c : tmpl->Heuristics(task, target)) {
      EXPECT_LE(c.Int("ow_reg") * c.Int("oc_vecs"), limit) << c.ToJson();
      largest = std::max(largest, c.Int("ow_reg") * c.Int("oc_vecs"));
    }
    EXPECT_GT(largest, limit / 2) << target.triple << " " << target.features;  // the registers are used
  }
}

// The reference's grouped convolution is the ungrouped one with a block-diagonal
// filter (zero between a group's output channels and other groups' inputs).
TEST(Conv2dTemplateTest, GroupedReferenceIsBlockDiagonal) {
  const TuningTask grouped = Conv("conv2d N=2 C=6 H=5 W=4 K=9 R=3 S=2 stride=1 pad=1 groups=3");
  const TuningTask whole = Conv("conv2d N=2 C=6 H=5 W=4 K=9 R=3 S=2 stride=1 pad=1");
  auto inputs = MakeInputs(grouped, 5);
  ASSERT_EQ(inputs[1].size(), 9u * 2 * 3 * 2);
  std::vector<float> full(9 * 6 * 3 * 2, 0.0f);
  for (int64_t k = 0; k < 9; ++k)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t rs = 0; rs < 6; ++rs)
        full[static_cast<size_t>((k * 6 + k / 3 * 2 + c) * 6 + rs)] = inputs[1][static_cast<size_t>((k * 2 + c) * 6 + rs)];
  auto want = ReferenceOutput(whole, {inputs[0], full});
  auto got = ReferenceOutput(grouped, inputs);
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) EXPECT_FLOAT_EQ((*got)[i], (*want)[i]) << i;
}

// Grouped convolutions: naive, every heuristic and random configs computed by one
// kernel over all groups match the reference; blocks never span a group, and
// Winograd is not offered.
TEST(Conv2dTemplateTest, GroupedConvolutions) {
  std::mt19937_64 rng(21);
  for (const char* text : {"conv2d N=1 C=12 H=7 W=9 K=24 R=1 S=1 stride=1 pad=0 groups=3",
                           "conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1 groups=2",
                           "conv2d N=2 C=60 H=6 W=6 K=60 R=1 S=1 stride=1 pad=0 groups=3",
                           "conv2d N=1 C=32 H=9 W=9 K=64 R=3 S=3 stride=2 pad=1 groups=4"}) {
    TuningTask task = Conv(text);
    const Template* tmpl = *FindTemplate(task);
    const int64_t cg = task.Param("C") / task.Param("groups"), kg = task.Param("K") / task.Param("groups");
    ExpectInterpretedCorrect(task, tmpl->Naive(task, Avx512TestTarget()));
    std::vector<Config> h = tmpl->Heuristics(task, Avx512TestTarget());
    ASSERT_FALSE(h.empty()) << text;
    for (const Config& c : h) {
      EXPECT_EQ(c.Str("algorithm", "direct"), "direct") << text;
      EXPECT_EQ(cg % c.Int("ic_block"), 0) << text << " " << c.ToJson();
      EXPECT_EQ(kg % (c.Int("vec_lanes") * c.Int("oc_vecs")), 0) << text << " " << c.ToJson();
    }
    for (size_t i = 0; i < h.size(); i += 2) ExpectInterpretedCorrect(task, h[i]);
    ConfigSpace space = tmpl->Space(task, Avx512TestTarget());
    for (int i = 0; i < 6; ++i) {
      auto config = space.Sample(rng);
      ASSERT_TRUE(config.ok()) << text;
      ExpectInterpretedCorrect(task, *config);
    }
    if (HasFatalFailure()) return;
  }
  // Five-vector channel blocks exist where K/G is a multiple of 20 (ShuffleNet's 20,
  // 40 and 80 channels per group), and only there.
  auto oc_vecs = [](const std::string& text) {
    TuningTask t = Conv(text);
    const ConfigSpace space = (*FindTemplate(t))->Space(t, Avx512TestTarget());
    for (const Knob& k : space.knobs())
      if (k.name == "oc_vecs") return k.values.size();
    return size_t{0};
  };
  EXPECT_EQ(oc_vecs("conv2d N=1 C=480 H=14 W=14 K=120 R=1 S=1 stride=1 pad=0 groups=3"), 5u);
  EXPECT_EQ(oc_vecs("conv2d N=1 C=64 H=14 W=14 K=64 R=1 S=1 stride=1 pad=0"), 4u);
  ExpectInterpretedCorrect(Conv("conv2d N=1 C=6 H=5 W=9 K=60 R=1 S=1 stride=1 pad=0 groups=3"),
                           Config(nlohmann::json{{"ic_block", 2}, {"vec_lanes", 4}, {"oc_vecs", 5}, {"ow_reg", 4},
                                                 {"unroll_ci", 2}, {"reduce_order", "crs"}, {"outer_order", "ohk"},
                                                 {"parallel", 0}}));
  // Winograd refused by name for a grouped 3x3.
  TuningTask task = Conv("conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1 groups=2");
  Config winograd(nlohmann::json{{"algorithm", "winograd_f23"}, {"tile_rows", 1}, {"ic_block", 8}, {"vec_lanes", 16},
                                 {"oc_vecs", 1}, {"ow_reg", 2}, {"unroll_ci", 4}, {"reduce_order", "crs"},
                                 {"outer_order", "koh"}, {"parallel", 0}});
  EXPECT_FALSE((*FindTemplate(task))->Space(task, Avx512TestTarget()).Check(winograd).ok());
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
  // groups: left out of the canonical text (and the workload key) when 1.
  EXPECT_EQ(t.Param("groups"), 1);
  TuningTask one = Conv("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 groups=1");
  EXPECT_EQ(one.CanonicalText(), t.CanonicalText());
  EXPECT_EQ(one.WorkloadKey(), t.WorkloadKey());
  TuningTask g = Conv("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 groups=4");
  EXPECT_EQ(g.CanonicalText(), "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 groups=4 dtype=float32");
  EXPECT_DOUBLE_EQ(g.Flops(), t.Flops() / 4);
  auto round_trip = TaskFromJson(g.ToJson());
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_EQ(round_trip->WorkloadKey(), g.WorkloadKey());
  auto uneven = ParseTask("conv2d N=1 C=8 H=8 W=8 K=12 R=3 S=3 stride=1 pad=1 groups=3");
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("groups=3 must divide both C=8 and K=12"), std::string::npos);
  EXPECT_FALSE(ParseTask("conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 groups=0").ok());
  EXPECT_FALSE(ParseTask("depthwise_conv2d N=1 C=8 H=8 W=8 R=3 S=3 stride=1 pad=1 groups=2").ok());
}

}  // namespace
}  // namespace tuneforge
