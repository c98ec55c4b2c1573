// Tests of feature extraction from lowered loop IR and configs.
#include "compiler/target/testing/test_target.h"
#include "costmodel/features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "compiler/task/task.h"
#include "compiler/templates/quantized_matmul.h"
#include "compiler/templates/template.h"

namespace tuneforge::costmodel {
namespace {

struct Fixture {
  explicit Fixture(const std::string& text, Target t = Avx512TestTarget())
      : target(t),
        task(*ParseTask(text)),
        tmpl(*FindTemplate(task)),
        space(tmpl->Space(task, target)),
        extractor(space, target) {}
  FeatureVector Features(const Config& c) const {
    auto f = tmpl->Instantiate(task, target, c);
    EXPECT_TRUE(f.ok()) << f.status();
    return extractor.Extract(*f, c);
  }
  Target target;
  TuningTask task;
  const Template* tmpl;
  ConfigSpace space;
  FeatureExtractor extractor;
};

TEST(FeaturesTest, FixedLengthNamedAndDeterministic) {
  Fixture fx("matmul M=64 N=64 K=64");
  EXPECT_EQ(fx.extractor.Names().size(), static_cast<size_t>(fx.extractor.size()));
  EXPECT_EQ(IrFeatureNames().size(), static_cast<size_t>(kNumIrFeatures));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 50; ++i) {
    Config c = *fx.space.Sample(rng);
    FeatureVector a = fx.Features(c), b = fx.Features(c);
    ASSERT_EQ(a.size(), static_cast<size_t>(fx.extractor.size()));
    EXPECT_EQ(a, b);
    for (float x : a) EXPECT_TRUE(std::isfinite(x));
  }
}

// The richer set (compared offline, not the default) sits between the 44 and the
// knobs: the 44 are unchanged, the knobs move by kNumRichFeatures.
TEST(FeaturesTest, RicherSetKeepsTheFirst44AndTheKnobs) {
  Fixture fx("conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 stride=1 pad=1");
  FeatureOptions rich;
  rich.rich = true;
  FeatureExtractor extractor(fx.space, fx.target, rich);
  ASSERT_EQ(extractor.size(), fx.extractor.size() + kNumRichFeatures);
  std::vector<std::string> names = extractor.Names();
  ASSERT_EQ(names.size(), static_cast<size_t>(extractor.size()));
  EXPECT_EQ(names[kNumIrFeatures], "log2_intensity_inner0");
  EXPECT_EQ(names[kNumIrFeatures + kNumRichFeatures - 1], "vector_position");
  std::mt19937_64 rng(5);
  int differ = 0;
  for (int i = 0; i < 20; ++i) {
    Config c = *fx.space.Sample(rng);
    FeatureVector base = fx.Features(c);
    auto func = fx.tmpl->Instantiate(fx.task, fx.target, c);
    ASSERT_TRUE(func.ok());
    FeatureVector more = extractor.Extract(*func, c);
    EXPECT_TRUE(std::equal(base.begin(), base.begin() + kNumIrFeatures, more.begin()));
    EXPECT_TRUE(std::equal(base.begin() + kNumIrFeatures, base.end(),
                           more.begin() + kNumIrFeatures + kNumRichFeatures));
    for (float x : more) EXPECT_TRUE(std::isfinite(x));
    differ += std::any_of(more.begin() + kNumIrFeatures,
                          more.begin() + kNumIrFeatures + kNumRichFeatures, [](float x) { return x != 0; });
  }
  EXPECT_EQ(differ, 20);  // every config has some richer feature set
}

TEST(FeaturesTest, DistinguishesSchedules) {
  Fixture fx("matmul M=64 N=64 K=64");
  FeatureVector naive = fx.Features(fx.tmpl->Naive(fx.task, Avx512TestTarget()));
  std::mt19937_64 rng(4);
  int differ = 0;
  for (int i = 0; i < 20; ++i) {
    FeatureVector f = fx.Features(*fx.space.Sample(rng));
    differ += !std::equal(f.begin(), f.begin() + kNumIrFeatures, naive.begin());
  }
  EXPECT_GE(differ, 19);
  // The naive nest is scalar and serial.
  auto names = IrFeatureNames();
  auto at = [&](const std::string& n) {
    return naive[std::find(names.begin(), names.end(), n) - names.begin()];
  };
  EXPECT_EQ(at("log2_vector_lanes"), 0);
  EXPECT_EQ(at("has_parallel"), 0);
  EXPECT_EQ(at("float_ops_per_iter"), 2);  // a multiply and an add
}

TEST(FeaturesTest, ShapeGeneric) {
  // Same config on two shapes of an op: same length, same knob part, and the loop
  // features that only depend on the schedule (lanes, unroll, stride) agree.
  Fixture a("matmul M=128 N=128 K=128"), b("matmul M=256 N=512 K=384");
  ASSERT_EQ(a.extractor.size(), b.extractor.size());
  Config c(nlohmann::json::parse(
      R"({"accumulate":"registers","loop_order":"ijk","parallel":1,"tile_i_blocks":4,"tile_i_reg":4,)"
      R"("tile_j_blocks":2,"tile_j_vecs":2,"tile_k":16,"unroll_k":2,"vec_lanes":8})"));
  // Knobs added by later template versions take their first value.
  nlohmann::json values = c.values();
  for (const Knob& k : a.space.knobs())
    if (!values.contains(k.name)) values[k.name] = k.values[0];
  c = Config(values);
  ASSERT_TRUE(a.space.Check(c).ok());
  ASSERT_TRUE(b.space.Check(c).ok());
  FeatureVector fa = a.Features(c), fb = b.Features(c);
  for (int i = kNumIrFeatures; i < a.extractor.size(); ++i) EXPECT_EQ(fa[i], fb[i]);
  auto names = IrFeatureNames();
  for (const char* n : {"log2_vector_lanes", "log2_unroll_product", "access1_log2_stride_innermost",
                        "access2_log2_stride_innermost", "float_ops_per_iter"}) {
    size_t i = std::find(names.begin(), names.end(), n) - names.begin();
    EXPECT_EQ(fa[i], fb[i]) << n;
  }
}

// Knob features (kFeatureVersion 2): a GEMM's loop nest shows every knob but the
// prefetch hint, so only that one is a feature; conv2d (Winograd's stages) keeps all.
TEST(FeaturesTest, KnobFeaturesWhereTheSpaceAsks) {
  constexpr int kLoop = kNumIrFeatures + kNumRegisterFeatures;  // before the knobs
  Fixture avx512("matmul M=128 N=128 K=128");
  EXPECT_EQ(avx512.extractor.size(), kLoop);
  Fixture avx2("matmul M=128 N=128 K=128", Avx2TestTarget());
  std::vector<std::string> names = avx2.extractor.Names();
  ASSERT_EQ(avx2.extractor.size(), kLoop + 1);
  EXPECT_EQ(names.back(), "knob_prefetch_k");
  Fixture conv("conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 stride=1 pad=1");
  EXPECT_EQ(conv.extractor.size(), kLoop + static_cast<int>(conv.space.knobs().size()));
  FeatureOptions all;
  all.knobs = KnobFeatures::kAll;
  EXPECT_EQ(FeatureExtractor(avx512.space, avx512.target, all).size(),
            kLoop + static_cast<int>(avx512.space.knobs().size()));
  FeatureOptions none;
  none.knobs = KnobFeatures::kNone;
  EXPECT_EQ(FeatureExtractor(conv.space, conv.target, none).size(), kLoop);
}

// The register tile's demand (FeatureOptions::register_tile, on by default), in vector registers of
// the target: a GEMM's i_reg x j_vecs accumulators, its B row of j_vecs vectors and
// one broadcast of A; the k unroll inside the tile reuses them; on AVX-512 the same
// tile is half of a file twice the size.
TEST(FeaturesTest, RegisterTileCountsAccumulatorsAndOperands) {
  // The knobs the target's space has (prefetch_k is AVX2's), the others at their first value.
  auto gemm = [](const ConfigSpace& space, int i_reg, int j_vecs, int unroll_k, const char* accumulate) {
    const nlohmann::json wanted{{"accumulate", accumulate}, {"loop_order", "jik"}, {"pack_b", 1},
                                {"parallel", 1}, {"tile_i_blocks", 1}, {"tile_i_reg", i_reg},
                                {"tile_j_blocks", 1}, {"tile_j_vecs", j_vecs}, {"tile_k", 64},
                                {"unroll_k", unroll_k}, {"vec_lanes", 8}};
    nlohmann::json values;
    for (const Knob& k : space.knobs()) values[k.name] = wanted.value(k.name, k.values[0]);
    return Config(values);
  };
  FeatureOptions off;
  off.register_tile = false;
  for (Target target : {Avx2TestTarget(), Avx512TestTarget()}) {
    Fixture fx("matmul M=128 N=192 K=128", target);
    const FeatureExtractor& extractor = fx.extractor;  // the default: on
    FeatureExtractor without(fx.space, fx.target, off);
    ASSERT_EQ(extractor.size(), without.size() + kNumRegisterFeatures);
    const std::vector<std::string> names = extractor.Names();
    EXPECT_EQ(names[kNumIrFeatures], "accumulators_over_registers");
    EXPECT_EQ(names[kNumIrFeatures + 1], "register_tile_over_registers");
    const double regs = target.VectorRegisters();
    struct Case {
      int i_reg, j_vecs, unroll_k;
      const char* accumulate;
      double accumulators, tile;
    };
    for (const Case& c : {Case{4, 2, 1, "registers", 8, 11}, Case{4, 3, 4, "registers", 12, 16},
                          Case{8, 2, 2, "memory", 16, 19}, Case{1, 1, 1, "registers", 1, 3}}) {
      Config config = gemm(fx.space, c.i_reg, c.j_vecs, c.unroll_k, c.accumulate);
      ASSERT_TRUE(fx.space.Check(config).ok()) << config.ToJson() << ": " << fx.space.Check(config);
      auto func = fx.tmpl->Instantiate(fx.task, fx.target, config);
      ASSERT_TRUE(func.ok()) << func.status();
      FeatureVector f = extractor.Extract(*func, config);
      EXPECT_FLOAT_EQ(f[kNumIrFeatures], c.accumulators / regs) << config.ToJson();
      EXPECT_FLOAT_EQ(f[kNumIrFeatures + 1], c.tile / regs) << config.ToJson();
      // The rest of the vector is the one without them, the knobs after the two.
      FeatureVector base = without.Extract(*func, config);
      EXPECT_TRUE(std::equal(base.begin(), base.begin() + kNumIrFeatures, f.begin()));
      EXPECT_TRUE(std::equal(base.begin() + kNumIrFeatures, base.end(), f.begin() + kNumIrFeatures + kNumRegisterFeatures));
    }
  }
}

// A config from before a knob existed (no prefetch_k) means that knob's default, and
// its features say so: the same vector as the config with the default spelled out.
// An int8 GEMM (Dot4 over groups of four k) next to the float32 GEMM under the same
// schedule: its features are finite, and a Dot4 counts as the four multiply-adds per
// lane it does, 4x the float32 update's multiply and add.
TEST(FeaturesTest, QuantizedGemmCountsItsDotProducts) {
  Fixture fx("matmul M=64 N=64 K=256");
  nlohmann::json knobs{{"tile_i_reg", 4},    {"vec_lanes", 16},   {"tile_j_vecs", 2},
                       {"tile_i_blocks", 2}, {"tile_j_blocks", 1}, {"tile_k", 16},
                       {"unroll_k", 4},      {"loop_order", "ijk"}, {"parallel", 0},
                       {"accumulate", "registers"}};
  QuantizedMatmulShape shape;
  shape.m = 64, shape.n = 64, shape.k = 256, shape.a_zero = 128;
  absl::StatusOr<ir::LoweredFunc> int8 = QuantizedMatmulKernel(shape, Config(knobs), fx.target, "q");
  ASSERT_TRUE(int8.ok()) << int8.status();
  knobs["pack_b"] = 1;
  absl::StatusOr<ir::LoweredFunc> fp32 = fx.tmpl->Instantiate(fx.task, fx.target, Config(knobs));
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  // The IR's features come first; the knob features after them are the same config's.
  const FeatureVector q = fx.extractor.Extract(*int8, Config(knobs));
  const FeatureVector f = fx.extractor.Extract(*fp32, Config(knobs));
  for (float x : q) EXPECT_TRUE(std::isfinite(x));
  const std::vector<std::string>& names = IrFeatureNames();
  const size_t ops = std::find(names.begin(), names.end(), "float_ops_per_iter") - names.begin();
  ASSERT_LT(ops, names.size());
  EXPECT_EQ(q[ops], 8);
  EXPECT_EQ(f[ops], 2);
}

TEST(FeaturesTest, AbsentKnobHasItsDefaultValue) {
  Fixture fx("matmul M=128 N=128 K=128", Avx2TestTarget());  // where prefetch_k exists
  nlohmann::json old = nlohmann::json::parse(
      R"({"accumulate":"registers","loop_order":"ijk","parallel":1,"tile_i_blocks":4,"tile_i_reg":4,)"
      R"("tile_j_blocks":2,"tile_j_vecs":2,"tile_k":16,"unroll_k":2,"vec_lanes":8,"pack_b":0})");
  nlohmann::json spelled = old;
  spelled["prefetch_k"] = 0;
  EXPECT_EQ(fx.Features(Config(old)), fx.Features(Config(spelled)));
  spelled["prefetch_k"] = 16;
  EXPECT_NE(fx.Features(Config(old)), fx.Features(Config(spelled)));
}

TEST(FeaturesTest, CheapEnough) {
  // Not a timed assertion: prints the cost so regressions are visible in the log.
  Fixture fx("matmul M=512 N=512 K=512");
  std::mt19937_64 rng(5);
  std::vector<Config> configs;
  for (int i = 0; i < 200; ++i) configs.push_back(*fx.space.Sample(rng));
  std::vector<ir::LoweredFunc> funcs;
  auto t0 = std::chrono::steady_clock::now();
  for (const Config& c : configs) funcs.push_back(*fx.tmpl->Instantiate(fx.task, Avx512TestTarget(), c));
  auto t1 = std::chrono::steady_clock::now();
  size_t total = 0;
  for (size_t i = 0; i < configs.size(); ++i)
    total += fx.extractor.Extract(funcs[i], configs[i]).size();
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(total, configs.size() * fx.extractor.size());
  std::printf("lowering %.1f us/candidate, feature extraction %.1f us/candidate\n",
              std::chrono::duration<double, std::micro>(t1 - t0).count() / configs.size(),
              std::chrono::duration<double, std::micro>(t2 - t1).count() / configs.size());
}

}  // namespace
}  // namespace tuneforge::costmodel
