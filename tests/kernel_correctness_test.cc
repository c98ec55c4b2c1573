// Every candidate must compute what the reference computes: a few hundred random
// (shape, config) pairs of the matmul, batch_matmul and dense templates, odd sizes
// included, built with the
// real LLVM codegen, loaded and run in this process, compared with the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "compiler/codegen/build.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/support/status.h"
#include "compiler/templates/template.h"

namespace tuneforge {
namespace {

struct Case {
  int64_t m, n, k;
};

// Builds `config` with LLVM, loads it, runs its prepack entry (if any) once and the
// kernel `runs` times on the seeded inputs, and compares every run with the reference
// (a kernel must not depend on the output's previous contents). Buffers follow the
// kernel's params: inputs in MakeInputs order, prepacked scratch, the output.
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
  std::vector<std::vector<float>> prepacked;
  std::vector<void*> buffers;
  size_t next_input = 0;
  for (const ir::BufferParam& p : func->params) {
    if (p.is_output) {
      buffers.push_back(out.data());
    } else if (p.is_internal) {
      prepacked.emplace_back(p.NumElements(), std::nanf(""));
      buffers.push_back(prepacked.back().data());
    } else {
      ASSERT_LT(next_input, inputs.size());
      buffers.push_back(inputs[next_input++].data());
    }
  }
  ASSERT_EQ(next_input, inputs.size());
  ASSERT_EQ(module->has_prepack(), func->prepack != nullptr);
  ASSERT_EQ(module->has_unpack(), func->unpack != nullptr);
  ASSERT_EQ(module->Prepack(buffers.data()), 0);
  Tolerance tol = ToleranceFor(task);
  for (int run = 0; run < runs; ++run) {
    ASSERT_EQ(module->Run(buffers.data()), 0);
    ASSERT_EQ(module->Unpack(buffers.data()), 0);
    int64_t bad = runtime::FirstMismatch(out.data(), expected->data(), size, tol.atol, tol.rtol);
    ASSERT_EQ(bad, -1) << task.CanonicalText() << " config " << config.ToJson() << ": index "
                       << bad << " got " << out[bad] << " expected " << (*expected)[bad];
  }
}

// This host as an AVX2-only target (x86-64-v3): the code runs natively.
Target Avx2HostTarget() {
  Target target = DetectHostTarget("test-avx2");
  target.cpu = "x86-64-v3";
  target.features = "+avx,+avx2,+fma";
  return target;
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

// dense built by LLVM: random shapes, bias and ReLU flags x random configs (packed W
// from the prepack entry, the epilogue fused after the last reduction step), plus the
// heuristics, which pack where they can.
TEST(KernelCorrectnessTest, DenseRandomPairs) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(17);
  const std::vector<int64_t> sizes = {1, 2, 7, 16, 17, 32, 48, 64, 100};
  int packed = 0;
  for (int p = 0; p < 60; ++p) {
    int64_t m = sizes[rng() % sizes.size()], n = sizes[rng() % sizes.size()],
            k = sizes[rng() % sizes.size()];
    int64_t bias = rng() % 2, relu = rng() % 2;
    TuningTask task = *MakeTask(
        "dense", {{"M", m}, {"N", n}, {"K", k}, {"bias", bias}, {"relu", relu}}, "float32");
    const Template* tmpl = *FindTemplate(task);
    std::vector<Config> configs;
    if (p % 4 == 0) {
      target.num_threads = 2;
      std::vector<Config> h = tmpl->Heuristics(task, target);
      configs.assign(h.begin(), h.begin() + std::min<size_t>(h.size(), 2));
    } else {
      target.num_threads = 1 + p % 2;
      auto config = tmpl->Space(task, target).Sample(rng);
      ASSERT_TRUE(config.ok());
      configs.push_back(*config);
    }
    for (const Config& config : configs) {
      packed += config.Int("pack_w");
      ExpectCorrect(task, target, config, p, 2);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(packed, 0);
}

// conv2d and depthwise_conv2d built by LLVM: small random shapes (1x1 and 3x3 and
// odd filters, stride 1 and 2, padding 0-2, batch 1-2) x random configs, plus the
// first heuristics (parallel on 2 threads). The kernel runs between its prepack
// (blocked, padded input and blocked filter) and unpack (blocked output) entries.
TEST(KernelCorrectnessTest, ConvolutionRandomPairs) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(23);
  for (int p = 0; p < 60; ++p) {
    const bool depthwise = p % 3 == 2;
    auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
    int64_t c = pick({3, 4, 8, 16, 32}), k = pick({8, 16, 32, 48});
    int64_t r = pick({1, 3, 3, 2}), s = r == 2 ? 3 : r;
    int64_t h = pick({1, 4, 7, 9, 12}), w = pick({2, 5, 7, 14, 17});
    int64_t stride = pick({1, 2}), pad = r == 1 ? 0 : pick({0, 1, 2});
    if (depthwise) c = pick({8, 16, 32, 48});
    std::vector<std::pair<std::string, int64_t>> params = {
        {"N", 1 + p % 2}, {"C", c}, {"H", h + r}, {"W", w + s}, {"R", r}, {"S", s},
        {"stride", stride}, {"pad", pad}};
    if (!depthwise) params.push_back({"K", k});
    auto task = MakeTask(depthwise ? "depthwise_conv2d" : "conv2d", params, "float32");
    ASSERT_TRUE(task.ok()) << task.status();
    const Template* tmpl = *FindTemplate(*task);
    target.num_threads = 1 + p % 2;
    std::vector<Config> configs;
    if (p % 5 == 0) {
      std::vector<Config> h_configs = tmpl->Heuristics(*task, target);
      ASSERT_FALSE(h_configs.empty()) << task->CanonicalText();
      configs.push_back(h_configs[rng() % h_configs.size()]);
    } else {
      auto config = tmpl->Space(*task, target).Sample(rng);
      ASSERT_TRUE(config.ok()) << task->CanonicalText();
      configs.push_back(*config);
    }
    for (const Config& config : configs) {
      ExpectCorrect(*task, target, config, p, 2);
      if (HasFatalFailure()) return;
    }
  }
}

// Winograd F(2,3) and F(4,3) built by LLVM: ResNet-like 3x3 stride-1 layers (pad 1,
// and pad 0; 7x7 and 17x15 with partial tiles), random Winograd configs of each
// algorithm, on 1 and 2 threads.
TEST(KernelCorrectnessTest, WinogradConvolutions) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(29);
  int checked = 0;
  for (const char* text : {"conv2d N=1 C=32 H=16 W=16 K=64 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=64 H=14 W=14 K=32 R=3 S=3 stride=1 pad=1",
                           "conv2d N=2 C=16 H=10 W=18 K=16 R=3 S=3 stride=1 pad=0",
                           "conv2d N=1 C=32 H=7 W=7 K=32 R=3 S=3 stride=1 pad=1",
                           "conv2d N=1 C=16 H=17 W=15 K=32 R=3 S=3 stride=1 pad=1"}) {
    auto task = ParseTask(text);
    ASSERT_TRUE(task.ok()) << task.status();
    const ConfigSpace space = (*FindTemplate(*task))->Space(*task, target);
    int here = 0;
    for (int i = 0; i < 500 && here < 6; ++i) {
      auto config = space.Sample(rng);
      ASSERT_TRUE(config.ok());
      if (config->Str("algorithm") == "direct") continue;
      target.num_threads = 1 + here % 2;
      ExpectCorrect(*task, target, *config, i, 2);
      if (HasFatalFailure()) return;
      ++here;
    }
    checked += here;
  }
  EXPECT_EQ(checked, 30);
}

// Grouped convolutions built by LLVM (one kernel over every group): ShuffleNet's 1x1
// with 20 and 40 channels per group, ResNeXt's 3x3 with 4, a strided 3x3; the
// default schedule and random configs, on 1 and 2 threads.
TEST(KernelCorrectnessTest, GroupedConvolutions) {
  Target target = DetectHostTarget("test");
  std::mt19937_64 rng(37);
  for (const char* text : {"conv2d N=1 C=60 H=14 W=14 K=60 R=1 S=1 stride=1 pad=0 groups=3",
                           "conv2d N=1 C=120 H=7 W=7 K=120 R=1 S=1 stride=1 pad=0 groups=3",
                           "conv2d N=1 C=64 H=12 W=12 K=64 R=3 S=3 stride=1 pad=1 groups=16",
                           "conv2d N=2 C=32 H=9 W=11 K=64 R=3 S=3 stride=2 pad=1 groups=2"}) {
    auto task = ParseTask(text);
    ASSERT_TRUE(task.ok()) << task.status();
    const Template* tmpl = *FindTemplate(*task);
    const ConfigSpace space = tmpl->Space(*task, target);
    std::vector<Config> configs = {tmpl->Heuristics(*task, target).front()};
    for (int i = 0; i < 4; ++i) {
      auto config = space.Sample(rng);
      ASSERT_TRUE(config.ok());
      configs.push_back(*config);
    }
    for (size_t i = 0; i < configs.size(); ++i) {
      target.num_threads = 1 + static_cast<int>(i % 2);
      ExpectCorrect(*task, target, configs[i], static_cast<int>(i), 2);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(KernelCorrectnessTest, OddAndSmallShapes) {
  CheckRandomPairs(220, {1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 48, 64, 65}, 11);
}

TEST(KernelCorrectnessTest, LargerShapesWithTails) {
  CheckRandomPairs(40, {1, 7, 33, 100, 128, 257}, 12);
}

// Prime shapes put a tail in every dimension of every tile: the heuristic configs
// (the register tile's copies per tail shape, packed B, fused parallel tile loops
// where they balance the threads) and random ones, at 1 and 2 threads.
TEST(KernelCorrectnessTest, PrimeShapesAtOneAndTwoThreads) {
  const Case shapes[] = {{97, 131, 61}, {61, 97, 131}, {131, 61, 97}, {1, 131, 97}};
  for (int threads : {1, 2}) {
    Target target = DetectHostTarget("test");
    target.num_threads = threads;
    std::mt19937_64 rng(97 + threads);
    for (const Case& c : shapes) {
      TuningTask task = *MakeTask("matmul", {{"M", c.m}, {"N", c.n}, {"K", c.k}}, "float32");
      const Template* tmpl = *FindTemplate(task);
      std::vector<Config> configs = tmpl->Heuristics(task, target);
      if (configs.size() > 12) configs.resize(12);
      for (int r = 0; r < 4; ++r) {
        auto sampled = tmpl->Space(task, target).Sample(rng);
        ASSERT_TRUE(sampled.ok());
        configs.push_back(*sampled);
      }
      for (size_t i = 0; i < configs.size(); ++i) {
        ExpectCorrect(task, target, configs[i], i, 2);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Knob prefetch_k (distance 16; AVX2 target) on heuristic configs (B packed where the panel
// divides N, and not), matmul and dense, shapes with tails: the prefetches run past
// the k tiles and past the end of B, and must change nothing. 1 and 2 threads.
TEST(KernelCorrectnessTest, PrefetchDistancesAtOneAndTwoThreads) {
  const std::vector<TuningTask> tasks = {
      *MakeTask("matmul", {{"M", 97}, {"N", 131}, {"K", 61}}, "float32"),
      *MakeTask("matmul", {{"M", 61}, {"N", 128}, {"K", 97}}, "float32"),
      *MakeTask("dense", {{"M", 37}, {"N", 128}, {"K", 131}, {"bias", 1}, {"relu", 1}}, "float32")};
  for (int threads : {1, 2}) {
    Target target = Avx2HostTarget();  // the knob is offered below AVX-512 only
    target.num_threads = threads;
    for (const TuningTask& task : tasks) {
      const Template* tmpl = *FindTemplate(task);
      std::vector<Config> configs = tmpl->Heuristics(task, target);
      if (configs.size() > 2) configs.resize(2);
      for (const Config& base : configs) {
        for (int distance : {16}) {
          nlohmann::json j = base.values();
          j["prefetch_k"] = distance;
          ExpectCorrect(task, target, Config(j), distance, 2);
          if (HasFatalFailure()) return;
        }
      }
    }
    // A column tail of exactly one vector (32 = 24 + 8): that tile's copy has no j.v
    // loop of its own extent, and its prefetch must still name only bound variables.
    TuningTask task = *MakeTask("matmul", {{"M", 37}, {"N", 32}, {"K", 53}}, "float32");
    nlohmann::json j = {{"tile_i_reg", 4}, {"vec_lanes", 8}, {"tile_j_vecs", 3},
                        {"tile_i_blocks", 2}, {"tile_j_blocks", 1}, {"tile_k", 16},
                        {"unroll_k", 2}, {"loop_order", "ijk"}, {"parallel", 1},
                        {"accumulate", "registers"}, {"pack_b", 0}, {"prefetch_k", 16}};
    ExpectCorrect(task, target, Config(j), 7, 2);
    if (HasFatalFailure()) return;
  }
}

// Knob pack_a (AVX2 target): A copied into row panels of the register tile's height, on heuristic
// configs (B packed or not) and random configs with it, tails in N and K (M must be a
// multiple of the tile's height), matmul and batch_matmul, 1 and 2 threads.
TEST(KernelCorrectnessTest, PackedAAtOneAndTwoThreads) {
  const std::vector<TuningTask> tasks = {
      *MakeTask("matmul", {{"M", 96}, {"N", 131}, {"K", 61}}, "float32"),
      *MakeTask("matmul", {{"M", 97}, {"N", 64}, {"K", 97}}, "float32"),
      *MakeTask("batch_matmul", {{"B", 3}, {"M", 24}, {"N", 37}, {"K", 29}}, "float32")};
  for (int threads : {1, 2}) {
    Target target = Avx2HostTarget();  // the knob is offered below AVX-512 only
    target.num_threads = threads;
    std::mt19937_64 rng(61 + threads);
    for (const TuningTask& task : tasks) {
      const Template* tmpl = *FindTemplate(task);
      const ConfigSpace space = tmpl->Space(task, target);
      std::vector<Config> configs;
      for (const Config& h : tmpl->Heuristics(task, target)) {
        nlohmann::json j = h.values();
        j["pack_a"] = 1;
        if (space.Check(Config(j)).ok()) configs.push_back(Config(j));
        if (configs.size() == 3) break;
      }
      for (int tries = 0; tries < 200 && configs.size() < 6; ++tries) {
        auto sampled = space.Sample(rng);
        ASSERT_TRUE(sampled.ok());
        if (sampled->Int("pack_a") == 1) configs.push_back(*sampled);
      }
      ASSERT_GE(configs.size(), 4u) << task.CanonicalText();
      for (size_t i = 0; i < configs.size(); ++i) {
        ExpectCorrect(task, target, configs[i], i, 2);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Cross-compilation (issue 21, first part): every template's kernels compile for an
// Arm (NEON) and a RISC-V (RVV) device from this host — LLVM's object code for the
// device's triple (ELF machine AArch64 / RISC-V), 128-bit vectors (4 lanes) from the
// Target. Running them there (qemu-user, a device runner) is the next part.
TEST(KernelCorrectnessTest, EveryTemplateCompilesForAarch64AndRiscv64) {
  struct Device {
    const char* text;
    uint16_t elf_machine;  // e_machine: EM_AARCH64 183, EM_RISCV 243
  };
  const Target host = DetectHostTarget("test");
  for (const Device& device : {Device{"-mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a76 -mattr=+neon", 183},
                               Device{"-mtriple=riscv64-unknown-linux-gnu -mcpu=generic-rv64 -mattr=+m,+a,+f,+d,+c,+v", 243}}) {
    absl::StatusOr<Target> target = ParseTarget(device.text, host);
    ASSERT_TRUE(target.ok()) << target.status();
    target->num_threads = 2;
    EXPECT_EQ(target->MaxF32Lanes(), 4) << device.text;
    for (const char* text : {"matmul M=64 N=48 K=40", "batch_matmul B=2 M=16 N=32 K=24",
                             "dense M=8 N=64 K=32 bias=1 relu=1",
                             "conv2d N=1 C=16 H=9 W=9 K=32 R=3 S=3 stride=1 pad=1",
                             "depthwise_conv2d N=1 C=32 H=8 W=8 R=3 S=3 stride=2 pad=1"}) {
      TuningTask task = *ParseTask(text);
      const Template* tmpl = *FindTemplate(task);
      std::vector<Config> configs = tmpl->Heuristics(task, *target);
      ASSERT_FALSE(configs.empty()) << text;
      for (const Config& config : {configs.front(), configs.back()}) {
        EXPECT_LE(config.Int("vec_lanes"), 4) << text;
        absl::StatusOr<ir::LoweredFunc> func = tmpl->Instantiate(task, *target, config);
        ASSERT_TRUE(func.ok()) << func.status();
        absl::StatusOr<std::string> object = codegen::CompileToObject(*func, *target, BuildOptions{});
        ASSERT_TRUE(object.ok()) << device.text << " " << text << ": " << object.status();
        ASSERT_GT(object->size(), 64u);
        EXPECT_EQ(object->substr(0, 4), "\x7f" "ELF");
        uint16_t machine = 0;
        std::memcpy(&machine, object->data() + 18, sizeof(machine));
        EXPECT_EQ(machine, device.elf_machine) << device.text << " " << text;
      }
    }
  }
}

}  // namespace
}  // namespace tuneforge
