// Tests of the matmul template: every config against the reference.
#include "compiler/target/testing/test_target.h"
#include "compiler/templates/matmul_template.h"
#include "compiler/support/status.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"
#include "compiler/templates/testing/interpret.h"

namespace tuneforge {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TuningTask Task(int64_t m, int64_t n, int64_t k) {
  auto t = MakeTask("matmul", {{"M", m}, {"N", n}, {"K", k}}, "float32");
  TF_CHECK(t.ok());
  return *t;
}

// Interprets `f` on the task's inputs for `seed` and compares C with the reference.
void ExpectInterpretsToReference(const ir::LoweredFunc& f, const TuningTask& task, uint64_t seed) {
  auto inputs = MakeInputs(task, seed);
  auto expected = ReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok());
  auto buffers = InterpretOnInputs(f, inputs);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  const std::vector<float>& c = (*buffers)["C"];
  ASSERT_EQ(c.size(), expected->size());
  Tolerance tol = ToleranceFor(task);
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_LE(std::fabs(c[i] - (*expected)[i]), tol.atol + tol.rtol * std::fabs((*expected)[i]))
        << i << "\n" << ir::ToString(f);
}

TEST(MatmulTemplateTest, SpaceHasAtLeastAThousandValidPoints) {
  MatmulTemplate tmpl;
  ConfigSpace space = tmpl.Space(Task(512, 512, 512), Avx512TestTarget());
  EXPECT_GE(space.CountValid(200000), 1000u);
  // Vector width follows the target, not the build machine.
  Target avx2 = Avx512TestTarget();
  avx2.features = "+avx,+avx2,+fma";
  ConfigSpace avx2_space = tmpl.Space(Task(512, 512, 512), avx2);
  for (const Knob& k : avx2_space.knobs()) {
    if (k.name == "vec_lanes") {
      EXPECT_EQ(k.values.back(), 8);
    }
  }
}

// SpaceOf's memo gives each (template, task, target) its own space, whatever was asked
// for before it in the thread.
TEST(MatmulTemplateTest, SpaceOfIsTheSpaceOfEachTemplateTaskAndTarget) {
  MatmulTemplate matmul;
  MatmulTemplate batched(/*batched=*/true);
  TuningTask batch_task = *MakeTask("batch_matmul", {{"B", 2}, {"M", 64}, {"N", 48}, {"K", 32}}, "float32");
  Target avx2 = Avx2TestTarget();
  auto knobs = [](const ConfigSpace& space) {
    std::string out;
    for (const Knob& k : space.knobs()) out += k.name + nlohmann::json(k.values).dump() + " ";
    return out;
  };
  for (int round = 0; round < 2; ++round) {
    for (const TuningTask& task : {Task(64, 64, 64), Task(96, 40, 24), Task(64, 64, 64)}) {
      for (const Target& target : {Avx512TestTarget(), avx2}) {
        EXPECT_EQ(knobs(*SpaceOf(matmul, task, target)), knobs(matmul.Space(task, target)))
            << task.CanonicalText() << " " << target.Key();
      }
    }
    EXPECT_EQ(knobs(*SpaceOf(batched, batch_task, avx2)), knobs(batched.Space(batch_task, avx2)));
  }
  // The spaces differ (so the checks above can fail), and asked twice in a row the
  // memo gives the same space object.
  EXPECT_NE(knobs(matmul.Space(Task(64, 64, 64), avx2)), knobs(matmul.Space(Task(96, 40, 24), avx2)));
  EXPECT_NE(knobs(matmul.Space(Task(64, 64, 64), avx2)), knobs(matmul.Space(Task(64, 64, 64), Avx512TestTarget())));
  EXPECT_EQ(SpaceOf(matmul, Task(64, 64, 64), avx2), SpaceOf(matmul, Task(64, 64, 64), avx2));
}

TEST(MatmulTemplateTest, InvalidConfigsAreRejectedWithTheKnobName) {
  MatmulTemplate tmpl;
  TuningTask task = Task(64, 64, 64);
  Config naive = tmpl.Naive(task, Avx512TestTarget());
  ASSERT_TRUE(tmpl.Instantiate(task, Avx512TestTarget(), naive).ok());
  nlohmann::json j = naive.values();
  j["vec_lanes"] = 5;
  auto r = tmpl.Instantiate(task, Avx512TestTarget(), Config(j));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("vec_lanes"), std::string::npos);
  j = naive.values();
  j["bogus"] = 1;
  EXPECT_FALSE(tmpl.Instantiate(task, Avx512TestTarget(), Config(j)).ok());
  j = naive.values();
  j.erase("tile_k");
  EXPECT_FALSE(tmpl.Instantiate(task, Avx512TestTarget(), Config(j)).ok());
}

// v1 configs (no pack_b) stay valid and mean what they meant: pack_b = 0.
TEST(MatmulTemplateTest, ConfigsWithoutPackBDefaultToUnpacked) {
  MatmulTemplate tmpl;
  TuningTask task = Task(64, 64, 64);
  nlohmann::json j = tmpl.Heuristics(task, Avx512TestTarget()).front().values();
  j["pack_b"] = 0;
  nlohmann::json old = j;
  old.erase("pack_b");
  auto with = tmpl.Instantiate(task, Avx512TestTarget(), Config(j));
  auto without = tmpl.Instantiate(task, Avx512TestTarget(), Config(old));
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(ir::ToString(with->body), ir::ToString(without->body));
  EXPECT_TRUE(tmpl.Space(task, Avx512TestTarget()).Check(Config(old)).ok());
}

TEST(MatmulTemplateTest, NaiveIsThePlainLoopNest) {
  MatmulTemplate tmpl;
  TuningTask task = Task(16, 16, 16);
  auto f = tmpl.Instantiate(task, Avx512TestTarget(), tmpl.Naive(task, Avx512TestTarget()));
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(f->body);
  EXPECT_EQ(text.find("vectorized"), std::string::npos) << text;
  EXPECT_EQ(text.find("parallel"), std::string::npos) << text;
}

TEST(MatmulTemplateTest, HeuristicsAreValidAndInterpretToTheReference) {
  MatmulTemplate tmpl;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 33, 17}, {64, 100, 300},
                         {512, 512, 512}, {13, 7, 2}}) {
    TuningTask task = Task(m, n, k);
    for (int threads : {1, 2}) {
      Target target = Avx512TestTarget();
      target.num_threads = threads;
      std::vector<Config> configs = tmpl.Heuristics(task, target);
      ASSERT_FALSE(configs.empty()) << task.CanonicalText();
      for (const Config& c : configs) {
        auto f = tmpl.Instantiate(task, target, c);
        ASSERT_TRUE(f.ok()) << task.CanonicalText() << " " << c.ToJson() << ": " << f.status();
        if (threads == 1) {
          EXPECT_EQ(c.Int("parallel"), 0);
        }
      }
      if (m * n * k > 100000) continue;  // the interpreter is slow; small shapes suffice
      auto inputs = MakeInputs(task, 7);
      auto expected = ReferenceOutput(task, inputs);
      ASSERT_TRUE(expected.ok());
      auto f = tmpl.Instantiate(task, target, configs.front());
      std::map<std::string, std::vector<float>> buffers{
          {"A", inputs[0]}, {"B", inputs[1]}, {"C", std::vector<float>(m * n, std::nanf(""))}};
      ASSERT_TRUE(ir::Interpret(*f, &buffers).ok());
      Tolerance tol = ToleranceFor(task);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_LE(std::fabs(buffers["C"][i] - (*expected)[i]),
                  tol.atol + tol.rtol * std::fabs((*expected)[i]))
            << task.CanonicalText() << " " << configs.front().ToJson() << " index " << i;
    }
  }
}

// pack_b: B copied into panels first, in a heap scratch buffer; tails in M and K.
TEST(MatmulTemplateTest, PackedBInterpretsToTheReference) {
  MatmulTemplate tmpl;
  TuningTask task = Task(13, 48, 7);
  nlohmann::json j = {{"tile_i_reg", 3}, {"vec_lanes", 8}, {"tile_j_vecs", 2},
                      {"tile_i_blocks", 2}, {"tile_j_blocks", 2}, {"tile_k", 4},
                      {"unroll_k", 2}, {"loop_order", "ikj"}, {"parallel", 1},
                      {"accumulate", "registers"}, {"pack_b", 1}};
  auto f = tmpl.Instantiate(task, Avx512TestTarget(), Config(j));
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(*f);
  EXPECT_NE(text.find("allocate heap B.packed"), std::string::npos) << text;
  ASSERT_EQ(f->params[1].name, "B");
  ExpectInterpretsToReference(*f, task, 3);
  // A panel that does not divide N is an invalid config, named by its knob.
  j["tile_j_vecs"] = 4;
  auto bad = tmpl.Instantiate(Task(13, 40, 7), Avx512TestTarget(), Config(j));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("pack_b"), std::string::npos);
}

// prefetch_k (AVX2 and narrower targets): one prefetch per vector of the tile's row
// and k of the unrolled step,
// `distance` k ahead (16 = 8 steps of unroll_k 2), before the step's FMAs; no effect
// on the result. Without the knob (earlier configs) there is none.
TEST(MatmulTemplateTest, PrefetchRunsAheadOfTheTilesLoadsOfB) {
  MatmulTemplate tmpl;
  TuningTask task = Task(13, 48, 37);
  nlohmann::json j = {{"tile_i_reg", 3}, {"vec_lanes", 8}, {"tile_j_vecs", 2},
                      {"tile_i_blocks", 2}, {"tile_j_blocks", 2}, {"tile_k", 16},
                      {"unroll_k", 2}, {"loop_order", "ijk"}, {"parallel", 0},
                      {"accumulate", "registers"}, {"pack_b", 1}};
  auto plain = tmpl.Instantiate(task, Avx2TestTarget(), Config(j));
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Offered below AVX-512 only (no gain on the AVX-512 host, see GemmSpace).
  j["prefetch_k"] = 16;
  auto avx512 = tmpl.Instantiate(task, Avx512TestTarget(), Config(j));
  ASSERT_FALSE(avx512.ok());
  EXPECT_NE(std::string(avx512.status().message()).find("unknown knob 'prefetch_k'"),
            std::string::npos);
  j.erase("prefetch_k");
  EXPECT_EQ(ir::ToString(*plain).find("prefetch"), std::string::npos);
  j["prefetch_k"] = 16;
  auto f = tmpl.Instantiate(task, Avx2TestTarget(), Config(j));
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string text = ir::ToString(*f);
  EXPECT_NE(text.find("prefetch B.packed[") , std::string::npos) << text;
  EXPECT_NE(text.find("(k.m + 8)*2 + k.u"), std::string::npos) << text;
  ExpectInterpretsToReference(*f, task, 5);
  j["prefetch_k"] = 12;  // not a candidate value
  auto bad = tmpl.Instantiate(task, Avx2TestTarget(), Config(j));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("prefetch_k"), std::string::npos);
}

// pack_a (AVX2 and narrower targets): A copied into row panels (the tile's rows of one
// k-step next to each other)
// in a heap scratch buffer, before the compute; its loads read the panels. Valid only
// when the tile's height divides M, and the error names the knob.
TEST(MatmulTemplateTest, PackedAInterpretsToTheReference) {
  MatmulTemplate tmpl;
  TuningTask task = Task(12, 40, 7);
  nlohmann::json j = {{"tile_i_reg", 3}, {"vec_lanes", 8}, {"tile_j_vecs", 2},
                      {"tile_i_blocks", 2}, {"tile_j_blocks", 2}, {"tile_k", 4},
                      {"unroll_k", 2}, {"loop_order", "jik"}, {"parallel", 1},
                      {"accumulate", "registers"}, {"pack_b", 0}, {"pack_a", 1}};
  auto f = tmpl.Instantiate(task, Avx2TestTarget(), Config(j));
  ASSERT_TRUE(f.ok()) << f.status();
  std::string text = ir::ToString(*f);
  EXPECT_NE(text.find("allocate heap A.packed"), std::string::npos) << text;
  EXPECT_NE(text.find("+ A.packed[(i.o"), std::string::npos) << text;  // the FMA reads the panel
  ASSERT_EQ(f->params[0].name, "A");
  ExpectInterpretsToReference(*f, task, 4);
  auto bad = tmpl.Instantiate(Task(13, 40, 7), Avx2TestTarget(), Config(j));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("pack_a"), std::string::npos);
}

// batch_matmul: the property test of the operator — random shapes (1, primes,
// tails) and batch counts x random valid configs, interpreted, against the reference.
TEST(BatchMatmulTemplateTest, RandomConfigsInterpretToTheReference) {
  std::mt19937_64 rng(99);
  const int64_t sizes[] = {1, 2, 3, 5, 7, 8, 13, 16, 17};
  int packed = 0, parallel_batch = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int64_t b = 1 + rng() % 5, m = sizes[rng() % 9], n = sizes[rng() % 9], k = sizes[rng() % 9];
    auto task = MakeTask("batch_matmul", {{"B", b}, {"M", m}, {"N", n}, {"K", k}}, "float32");
    ASSERT_TRUE(task.ok()) << task.status();
    auto tmpl = FindTemplate(*task);
    ASSERT_TRUE(tmpl.ok());
    EXPECT_EQ((*tmpl)->name(), "batch_matmul_cpu");
    EXPECT_DOUBLE_EQ(task->Flops(), 2.0 * b * m * n * k);
    Target target = Avx512TestTarget();
    target.num_threads = 1 + trial % 2;
    auto config = (*tmpl)->Space(*task, target).Sample(rng);
    ASSERT_TRUE(config.ok());
    auto f = (*tmpl)->Instantiate(*task, target, *config);
    ASSERT_TRUE(f.ok()) << task->CanonicalText() << " " << config->ToJson() << ": " << f.status();
    packed += config->Int("pack_b");
    std::string text = ir::ToString(*f);
    parallel_batch += text.find("parallel for (b,") != std::string::npos;
    auto inputs = MakeInputs(*task, trial);
    auto expected = ReferenceOutput(*task, inputs);
    ASSERT_TRUE(expected.ok());
    std::map<std::string, std::vector<float>> buffers{
        {"A", inputs[0]}, {"B", inputs[1]}, {"C", std::vector<float>(b * m * n, std::nanf(""))}};
    absl::Status st = ir::Interpret(*f, &buffers);
    ASSERT_TRUE(st.ok()) << st << "\n" << text;
    Tolerance tol = ToleranceFor(*task);
    for (int64_t i = 0; i < b * m * n; ++i) {
      float e = (*expected)[i], a = buffers["C"][i];
      ASSERT_LE(std::fabs(a - e), tol.atol + tol.rtol * std::fabs(e))
          << task->CanonicalText() << " " << config->ToJson() << " index " << i << "\n" << text;
    }
  }
  EXPECT_GT(packed, 10);
  EXPECT_GT(parallel_batch, 10);
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
    ConfigSpace space = tmpl.Space(task, Avx512TestTarget());
    auto config = space.Sample(rng);
    ASSERT_TRUE(config.ok()) << task.CanonicalText();
    auto f = tmpl.Instantiate(task, Avx512TestTarget(), *config);
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


// Tails in every dimension (97 x 131 x 61 under a 6 x 32 register tile, 24 x 64 cache
// tile, k slices of 16 unrolled by 4): the register tile is lowered once per shape it
// takes, each with constant extents (no generic copy with run-time extents), and the
// result is the reference's.
TEST(MatmulTemplateTest, TailTilesGetOneConstantCopyPerShape) {
  MatmulTemplate tmpl;
  TuningTask task = Task(97, 131, 61);
  Config c(nlohmann::json{{"tile_i_reg", 6}, {"vec_lanes", 16}, {"tile_j_vecs", 2},
                          {"tile_i_blocks", 4}, {"tile_j_blocks", 2}, {"tile_k", 16},
                          {"unroll_k", 4}, {"loop_order", "ijk"}, {"parallel", 1},
                          {"accumulate", "registers"}, {"pack_b", 0}});
  auto f = tmpl.Instantiate(task, Avx512TestTarget(), c);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string text = ir::ToString(*f);
  int copies = 0;
  for (size_t p = text.find("allocate C.local"); p != std::string::npos;
       p = text.find("allocate C.local", p + 1)) {
    ++copies;
  }
  // Rows: 6 or 1 (97 = 16 * 6 + 1); columns: 32 or 3 (131 = 4 * 32 + 3); k slice: 16
  // or 13 (61 = 3 * 16 + 13). Eight shapes, each its own copy.
  EXPECT_EQ(copies, 8) << text;
  auto inputs = MakeInputs(task, 7);
  auto expected = ReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok());
  std::map<std::string, std::vector<float>> buffers{
      {"A", inputs[0]}, {"B", inputs[1]}, {"C", std::vector<float>(97 * 131, std::nanf(""))}};
  ASSERT_TRUE(ir::Interpret(*f, &buffers).ok());
  Tolerance tol = ToleranceFor(task);
  for (int64_t i = 0; i < 97 * 131; ++i) {
    float e = (*expected)[i], a = buffers["C"][i];
    ASSERT_LE(std::fabs(a - e), tol.atol + tol.rtol * std::fabs(e)) << "index " << i;
  }
}


// The row and column tiles run as one parallel loop where that keeps both threads
// clearly busier (1024 rows in 96-row tiles: 11 tiles, 6 + 5), not where the outer
// tile loop alone already shares out evenly (1000 columns in 256-column tiles).
TEST(MatmulTemplateTest, FusesTheTileLoopsWhenThatBalancesTheThreads) {
  MatmulTemplate tmpl;
  Target two = Avx512TestTarget();
  two.num_threads = 2;
  auto config = [](const char* order) {
    return Config(nlohmann::json{{"tile_i_reg", 6}, {"vec_lanes", 16}, {"tile_j_vecs", 4},
                                 {"tile_i_blocks", 16}, {"tile_j_blocks", 4}, {"tile_k", 256},
                                 {"unroll_k", 2}, {"loop_order", order}, {"parallel", 1},
                                 {"accumulate", "registers"}, {"pack_b", 1}});
  };
  EXPECT_NEAR(GemmBusyShare(config("ijk"), 1024, 1024, 2, false), 1024.0 / (6 * 96 * 2), 1e-9);
  EXPECT_NEAR(GemmBusyShare(config("ijk"), 1024, 1024, 2, true), 1024.0 * 1024 / (22 * 96 * 256 * 2), 1e-9);
  EXPECT_EQ(GemmBusyShare(config("ikj"), 1024, 1024, 2, true), 0);
  auto lowered = [&](int64_t m, int64_t n, const char* order) {
    auto f = tmpl.Instantiate(Task(m, n, 256), two, config(order));
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? ir::ToString(*f) : std::string();
  };
  EXPECT_NE(lowered(1024, 1024, "ijk").find("ij.o"), std::string::npos);
  EXPECT_EQ(lowered(64, 1024, "jik").find("ij.o"), std::string::npos);
  // One thread: nothing to balance.
  Target one = Avx512TestTarget();
  one.num_threads = 1;
  auto f = tmpl.Instantiate(Task(1024, 1024, 256), one, config("ijk"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(ir::ToString(*f).find("ij.o"), std::string::npos);
}

// A short matrix per batch (a pointwise conv as a matmul per group: 40 rows of 196
// pixels, three groups) on two threads: the first heuristic's cache tiles leave
// both threads work (64 x 192 tiles gave one thread one tile and the other a
// 4-column tail: 0.067 ms against 0.038 on a Zen 4).
TEST(BatchMatmulTemplateTest, HeuristicsKeepTwoThreadsBusyOnShortMatrices) {
  auto task = MakeTask("batch_matmul", {{"B", 3}, {"M", 40}, {"N", 196}, {"K", 160}}, "float32");
  ASSERT_TRUE(task.ok());
  MatmulTemplate tmpl(/*batched=*/true);
  Target two = Avx512TestTarget();
  two.num_threads = 2;
  const Config first = tmpl.Heuristics(*task, two).front();
  EXPECT_EQ(first.Int("tile_i_blocks"), 1) << first.ToJson();
  EXPECT_GE(std::max(GemmBusyShare(first, 40, 196, 2, false), GemmBusyShare(first, 40, 196, 2, true)), 0.7)
      << first.ToJson();
}

// The epilogue a pointwise conv computed as a matmul brings (a bias per output
// channel b * M + i, a residual, relu) is applied to every result, tails included.
TEST(BatchMatmulTemplateTest, EpilogueAppliesToEveryResult) {
  const int64_t b = 3, m = 5, n = 19, k = 7;
  auto task = MakeTask("batch_matmul", {{"B", b}, {"M", m}, {"N", n}, {"K", k}}, "float32");
  ASSERT_TRUE(task.ok());
  MatmulTemplate tmpl(/*batched=*/true);
  GemmEpilogue extra;
  extra.inputs = {ir::BufferParam{"bias", ir::DType::kFloat32, {b * m}, false},
                  ir::BufferParam{"res", ir::DType::kFloat32, {b * m * n}, false}};
  extra.fn = [&](ir::Expr value, ir::Expr bb, ir::Expr i, ir::Expr j) {
    const ir::Expr row = ir::Add(ir::Mul(bb, ir::IntImm(m)), i);
    return ir::Max(ir::Add(ir::Add(value, ir::Load("bias", ir::DType::kFloat32, row)),
                           ir::Load("res", ir::DType::kFloat32, ir::Add(ir::Mul(row, ir::IntImm(n)), j))),
                   ir::FloatImm(0.0));
  };
  std::mt19937_64 rng(5);
  const std::vector<float> bias = RandomVector(b * m, 1), res = RandomVector(b * m * n, 2);
  for (int trial = 0; trial < 20; ++trial) {
    Target target = Avx512TestTarget();
    target.num_threads = 1 + trial % 2;
    auto config = tmpl.Space(*task, target).Sample(rng);
    ASSERT_TRUE(config.ok());
    auto f = tmpl.InstantiateWithEpilogue(*task, target, *config, extra);
    ASSERT_TRUE(f.ok()) << config->ToJson() << ": " << f.status();
    auto inputs = MakeInputs(*task, trial);
    auto expected = ReferenceOutput(*task, inputs);
    ASSERT_TRUE(expected.ok());
    std::map<std::string, std::vector<float>> buffers{{"A", inputs[0]}, {"B", inputs[1]}, {"bias", bias},
                                                      {"res", res}, {"C", std::vector<float>(b * m * n, std::nanf(""))}};
    absl::Status st = ir::Interpret(*f, &buffers);
    ASSERT_TRUE(st.ok()) << st << "\n" << ir::ToString(*f);
    for (int64_t e = 0; e < b * m * n; ++e) {
      const float want = std::max(0.0f, (*expected)[e] + bias[e / n] + res[e]);
      ASSERT_NEAR(buffers["C"][e], want, 1e-4 + 1e-4 * std::fabs(want)) << config->ToJson() << " index " << e;
    }
  }
}

// What the cost model lowers (InstantiateKernel) is Instantiate's kernel, packing nests
// included (they run inside the timed entry), under a fixed name.
TEST(MatmulTemplateTest, InstantiateKernelIsTheKernelUnderAFixedName) {
  for (bool batched : {false, true}) {
    MatmulTemplate tmpl(batched);
    auto task = batched ? MakeTask("batch_matmul", {{"B", 2}, {"M", 24}, {"N", 48}, {"K", 32}}, "float32")
                        : MakeTask("matmul", {{"M", 24}, {"N", 48}, {"K", 32}}, "float32");
    ASSERT_TRUE(task.ok());
    const ConfigSpace space = tmpl.Space(*task, Avx512TestTarget());
    std::mt19937_64 rng(13);
    for (int i = 0; i < 30; ++i) {
      auto config = space.Sample(rng);
      ASSERT_TRUE(config.ok());
      auto full = tmpl.Instantiate(*task, Avx512TestTarget(), *config);
      auto kernel = tmpl.InstantiateKernel(*task, Avx512TestTarget(), *config);
      ASSERT_TRUE(full.ok() && kernel.ok()) << config->ToJson();
      EXPECT_EQ(kernel->name, batched ? "tf_batch_matmul_kernel" : "tf_matmul_kernel");
      EXPECT_NE(full->name, kernel->name);
      ExpectSameKernel(*kernel, *full, config->ToJson());
    }
  }
}

}  // namespace
}  // namespace tuneforge
