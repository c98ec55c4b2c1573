// The int8 GEMM kernel under several schedules: lowered IR run by the interpreter
// (prepack first), and the kernel built by LLVM for the host with and without its
// dot-product instruction, must both equal plain integer loops exactly.
#include "compiler/templates/quantized_matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <list>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/build.h"
#include "compiler/ir/interpreter.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"

namespace tuneforge {
namespace {

struct Case {
  QuantizedMatmulShape shape;
  std::vector<int64_t> a, b;  // u8 M x K, s8 K x N
  std::vector<int64_t> bias;  // s32 [N] when shape.bias
  std::vector<float> scale;   // [1] or [N] for f32 and u8 outputs

  // The output as plain loops compute it: integer sums, then float32 arithmetic in the
  // order the kernel's contract states (ints as int64; floats exactly as floats).
  std::vector<double> Expected() const {
    const int64_t m = shape.m, n = shape.n, k = shape.k;
    std::vector<double> c(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t sum = shape.bias ? bias[j] : 0;
        for (int64_t x = 0; x < k; ++x) sum += (a[i * k + x] - shape.a_zero) * b[x * n + j];
        if (shape.out == QuantizedOutput::kS32) {
          c[i * n + j] = static_cast<double>(sum);
          continue;
        }
        const float s = scale[shape.scale == QuantizedScale::kPerChannel ? j : 0];
        const float value = static_cast<float>(sum) * s;
        if (shape.out == QuantizedOutput::kF32) {
          c[i * n + j] = value;
        } else {
          const float shifted = std::nearbyint(value) + static_cast<float>(shape.out_zero);
          c[i * n + j] = std::clamp(shifted, 0.0f, 255.0f);
        }
      }
    }
    return c;
  }
};

QuantizedMatmulShape ShapeOf(int64_t m, int64_t n, int64_t k, int64_t a_zero,
                             QuantizedOutput out = QuantizedOutput::kS32) {
  QuantizedMatmulShape shape;
  shape.m = m, shape.n = n, shape.k = k, shape.a_zero = a_zero, shape.out = out;
  return shape;
}

Case MakeCase(int64_t m, int64_t n, int64_t k, int64_t a_zero) {
  Case c{ShapeOf(m, n, k, a_zero), {}, {}, {}, {}};
  uint64_t state = static_cast<uint64_t>(m * 1000003 + n * 1009 + k);
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(state >> 33);
  };
  // The extremes first (255 x -128 four at a time must not saturate anywhere).
  for (int64_t x = 0; x < m * k; ++x) c.a.push_back(x < k ? 255 : next() % 256);
  for (int64_t x = 0; x < k * n; ++x) c.b.push_back(x < 4 * n ? -128 : next() % 256 - 128);
  for (int64_t j = 0; j < n; ++j) c.bias.push_back(next() % 20001 - 10000);
  for (int64_t j = 0; j < n; ++j) c.scale.push_back(0.0015f + 0.0001f * static_cast<float>(j % 7));
  return c;
}

// The same case with another output kind.
Case WithOutput(Case c, QuantizedOutput out, QuantizedScale scale, int64_t out_zero, bool bias) {
  c.shape.out = out;
  c.shape.scale = scale;
  c.shape.out_zero = out_zero;
  c.shape.bias = bias;
  if (scale == QuantizedScale::kPerTensor) c.scale.resize(1);
  return c;
}

// The interpreter's output of `func` on `c` (prepack first), as doubles.
std::vector<double> Interpreted(const ir::LoweredFunc& func, const Case& c) {
  ir::IntBuffers ints;
  ir::FloatBuffers floats;
  for (const ir::BufferParam& p : func.params) {
    if (p.dtype == ir::DType::kFloat32) {
      floats[p.name] = std::vector<float>(p.NumElements(), 0.0f);
    } else {
      ints[p.name] = std::vector<int64_t>(p.NumElements(), 0);
    }
  }
  ints["A"] = c.a;
  ints["B"] = c.b;
  if (c.shape.bias) ints["bias"] = c.bias;
  if (c.shape.out != QuantizedOutput::kS32) floats["scale"] = c.scale;
  absl::Status st = ir::Interpret(func, &floats, &ints);
  EXPECT_TRUE(st.ok()) << st << "\n" << ir::ToString(func);
  if (c.shape.out == QuantizedOutput::kF32) return std::vector<double>(floats["C"].begin(), floats["C"].end());
  return std::vector<double>(ints["C"].begin(), ints["C"].end());
}

Config Gemm(int64_t ri, int64_t lanes, int64_t vecs, int64_t bi, int64_t bj, int64_t tk, int64_t u,
            const std::string& order, int64_t parallel, const std::string& accumulate) {
  return Config(nlohmann::json{{"tile_i_reg", ri},   {"vec_lanes", lanes}, {"tile_j_vecs", vecs},
                               {"tile_i_blocks", bi}, {"tile_j_blocks", bj}, {"tile_k", tk},
                               {"unroll_k", u},       {"loop_order", order}, {"parallel", parallel},
                               {"accumulate", accumulate}});
}

// Register tiles holding the whole reduction, tiles adding partial sums into C, sums
// kept in C itself, a parallel jik order; 16-, 8- and 4-lane vectors.
std::vector<Config> Schedules() {
  return {Gemm(3, 16, 2, 2, 1, 6, 2, "ijk", 0, "registers"), Gemm(2, 8, 1, 1, 2, 2, 1, "ikj", 0, "registers"),
          Gemm(1, 4, 2, 1, 1, 3, 1, "ijk", 0, "memory"), Gemm(4, 16, 1, 1, 1, 6, 3, "jik", 1, "registers")};
}

Target Host(int threads) {
  Target target = DetectHostTarget("test");
  target.num_threads = threads;
  return target;
}

TEST(QuantizedMatmulTest, InterpretedKernelsAreExact) {
  for (int64_t a_zero : {0, 128}) {
    const Case c = MakeCase(7, 32, 24, a_zero);
    for (const Config& config : Schedules()) {
      SCOPED_TRACE(config.ToJson() + " a_zero " + std::to_string(a_zero));
      absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(c.shape, config, Host(2), "qmm");
      ASSERT_TRUE(func.ok()) << func.status();
      EXPECT_EQ(Interpreted(*func, c), c.Expected());
    }
  }
}

// Runs the built kernel: prepack, then the kernel, on typed copies of the case.
std::vector<double> RunBuilt(const ir::LoweredFunc& func, const Case& c, const Target& target) {
  absl::StatusOr<Artifact> artifact = BuildArtifact(func, target);
  EXPECT_TRUE(artifact.ok()) << artifact.status();
  if (!artifact.ok()) return {};
  std::string error;
  std::unique_ptr<runtime::LoadedModule> module =
      runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
  EXPECT_NE(module, nullptr) << error;
  if (!module) return {};
  std::vector<uint8_t> a(c.a.begin(), c.a.end());
  std::vector<int8_t> b(c.b.begin(), c.b.end());
  std::vector<int32_t> bias(c.bias.begin(), c.bias.end());
  std::vector<float> scale = c.scale;
  const int64_t outputs = c.shape.m * c.shape.n;
  std::vector<int32_t> out_s32(outputs, -1);
  std::vector<float> out_f32(outputs, -1.0f);
  std::vector<uint8_t> out_u8(outputs, 7);
  std::list<std::vector<char>> scratch;
  std::vector<void*> buffers;
  for (const ir::BufferParam& p : func.params) {
    if (p.name == "A") {
      buffers.push_back(a.data());
    } else if (p.name == "B") {
      buffers.push_back(b.data());
    } else if (p.name == "bias") {
      buffers.push_back(bias.data());
    } else if (p.name == "scale") {
      buffers.push_back(scale.data());
    } else if (p.name == "C") {
      buffers.push_back(c.shape.out == QuantizedOutput::kS32   ? static_cast<void*>(out_s32.data())
                        : c.shape.out == QuantizedOutput::kF32 ? static_cast<void*>(out_f32.data())
                                                               : static_cast<void*>(out_u8.data()));
    } else {
      scratch.emplace_back(p.NumElements() * ir::DTypeBytes(p.dtype));
      buffers.push_back(scratch.back().data());
    }
  }
  EXPECT_TRUE(module->has_prepack());
  EXPECT_EQ(module->Prepack(buffers.data()), 0);
  EXPECT_EQ(module->Run(buffers.data()), 0);
  if (c.shape.out == QuantizedOutput::kF32) return std::vector<double>(out_f32.begin(), out_f32.end());
  if (c.shape.out == QuantizedOutput::kU8) return std::vector<double>(out_u8.begin(), out_u8.end());
  return std::vector<double>(out_s32.begin(), out_s32.end());
}

TEST(QuantizedMatmulTest, BuiltKernelsAreExactWithAndWithoutTheDotProductInstruction) {
  Target plain = Host(2);
  plain.features += ",-avx512vnni,-avxvnni";
  for (const Target& target : {Host(2), plain}) {
    for (int64_t a_zero : {0, 131}) {
      const Case c = MakeCase(13, 64, 40, a_zero);
      for (const Config& config : Schedules()) {
        SCOPED_TRACE(config.ToJson() + " a_zero " + std::to_string(a_zero) + " on " + target.features.substr(0, 30));
        absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(c.shape, config, target, "qmm");
        ASSERT_TRUE(func.ok()) << func.status();
        EXPECT_EQ(RunBuilt(*func, c, target), c.Expected());
      }
    }
  }
}

// Dequantized (f32) and requantized (u8) outputs, per tensor and per channel, with
// and without bias: the schedules that finish the sums in the register tile.
TEST(QuantizedMatmulTest, DequantizedAndRequantizedOutputsAreExact) {
  Target plain = Host(2);
  plain.features += ",-avx512vnni,-avxvnni";
  struct Output {
    QuantizedOutput out;
    QuantizedScale scale;
    int64_t out_zero;
    bool bias;
  };
  const std::vector<Output> outputs = {{QuantizedOutput::kU8, QuantizedScale::kPerChannel, 120, true},
                                       {QuantizedOutput::kU8, QuantizedScale::kPerTensor, 0, false},
                                       {QuantizedOutput::kF32, QuantizedScale::kPerChannel, 0, false},
                                       {QuantizedOutput::kS32, QuantizedScale::kPerTensor, 0, true}};
  for (const Output& o : outputs) {
    const Case base = MakeCase(11, 32, 40, 129);
    const Case c = WithOutput(base, o.out, o.scale, o.out_zero, o.bias);
    std::vector<double> want = c.Expected();
    if (o.out_zero == 120) {  // the case saturates at both ends of the range
      EXPECT_NE(std::find(want.begin(), want.end(), 0.0), want.end());
      EXPECT_NE(std::find(want.begin(), want.end(), 255.0), want.end());
    }
    for (const Config& config : {Gemm(3, 16, 2, 2, 1, 10, 2, "ijk", 0, "registers"),
                                 Gemm(2, 8, 1, 1, 2, 10, 5, "jik", 1, "registers")}) {
      SCOPED_TRACE(config.ToJson() + " output " + std::to_string(static_cast<int>(o.out)));
      absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(c.shape, config, Host(2), "qmm");
      ASSERT_TRUE(func.ok()) << func.status();
      EXPECT_EQ(Interpreted(*func, c), want);
      for (const Target& target : {Host(2), plain}) EXPECT_EQ(RunBuilt(*func, c, target), want);
    }
  }
}

TEST(QuantizedMatmulTest, UnsupportedShapesAndConfigsAreRefused) {
  const Config config = Gemm(2, 16, 1, 1, 1, 2, 1, "ijk", 0, "registers");
  auto error = [&](QuantizedMatmulShape shape, const Config& c) {
    absl::StatusOr<ir::LoweredFunc> func = QuantizedMatmulKernel(shape, c, Host(1), "qmm");
    EXPECT_FALSE(func.ok());
    return std::string(func.status().message());
  };
  EXPECT_NE(error(ShapeOf(4, 32, 10, 0), config).find("K = 10 is not a multiple of 4"), std::string::npos);
  EXPECT_NE(error(ShapeOf(4, 24, 8, 0), config).find("must divide N = 24"), std::string::npos);
  EXPECT_NE(error(ShapeOf(4, 32, 8, 256), config).find("a_zero = 256"), std::string::npos);
  EXPECT_NE(error(ShapeOf(4, 32, 8, 0), Gemm(2, 16, 1, 1, 1, 4, 1, "ijk", 0, "registers")).find("tile_k"),
            std::string::npos);
  // Outputs other than s32 need the sums finished in the register tile.
  QuantizedMatmulShape u8 = ShapeOf(4, 32, 16, 0, QuantizedOutput::kU8);
  EXPECT_NE(error(u8, config).find("tile_k must be K/4 = 4"), std::string::npos);
  EXPECT_NE(error(u8, Gemm(2, 16, 1, 1, 1, 4, 1, "ijk", 0, "memory")).find("accumulate registers"),
            std::string::npos);
  u8.out_zero = 300;
  EXPECT_NE(error(u8, Gemm(2, 16, 1, 1, 1, 4, 1, "ijk", 0, "registers")).find("out_zero = 300"),
            std::string::npos);
}

// The qmatmul template: its space, naive config and heuristics, and kernels built
// from them and from random points, on the inputs the agent makes, equal the
// reference the server checks against, exactly.
TEST(QuantizedMatmulTemplateTest, TasksTuneOverTheGemmSpaceAndMatchTheReference) {
  const Target target = Host(2);
  std::mt19937_64 rng(5);
  for (const char* text : {"qmatmul M=19 N=48 K=36 a_zero=131 bias=1 per_channel=1 out_zero=100 dtype=u8s8u8",
                           "qmatmul M=8 N=64 K=64 bias=1 dtype=u8s8s32",
                           "qmatmul M=5 N=32 K=20 a_zero=7 dtype=u8s8f32",
                           // AMX where the host has it: a 16-column and a 13-row tail block.
                           "qmatmul M=45 N=80 K=128 a_zero=3 bias=1 per_channel=1 out_zero=9 dtype=u8s8u8",
                           "qmatmul M=40 N=48 K=64 dtype=u8s8s32"}) {
    SCOPED_TRACE(text);
    const TuningTask task = *ParseTask(text);
    absl::StatusOr<const Template*> tmpl = FindTemplate(task);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    const ConfigSpace space = (*tmpl)->Space(task, target);
    for (const Knob& k : space.knobs()) {
      EXPECT_NE(k.name, "prefetch_k");
      if (k.name == "tile_k" && task.QuantizedOutput() != "s32") {
        EXPECT_EQ(k.values, std::vector<nlohmann::json>{task.Param("K") / 4});
      }
    }
    std::vector<Config> configs = {(*tmpl)->Naive(task, target)};
    const std::vector<Config> heuristics = (*tmpl)->Heuristics(task, target);
    EXPECT_FALSE(heuristics.empty());
    if (!heuristics.empty()) configs.push_back(heuristics.front());
    for (int i = 0; i < 3; ++i) configs.push_back(*space.Sample(rng));
    const std::vector<HostBuffer> inputs = MakeTypedInputs(task, 11);
    absl::StatusOr<HostBuffer> want = TypedReferenceOutput(task, inputs);
    ASSERT_TRUE(want.ok()) << want.status();
    if (task.QuantizedOutput() == "u8") {  // the scale spreads the outputs over the range
      std::set<uint8_t> values(want->As<uint8_t>(), want->As<uint8_t>() + want->elements());
      EXPECT_GT(values.size(), 64u);
    }
    for (const Config& config : configs) {
      SCOPED_TRACE(config.ToJson());
      ASSERT_TRUE(space.Check(config).ok()) << space.Check(config);
      absl::StatusOr<ir::LoweredFunc> func = (*tmpl)->Instantiate(task, target, config);
      ASSERT_TRUE(func.ok()) << func.status();
      absl::StatusOr<Artifact> artifact = BuildArtifact(*func, target);
      ASSERT_TRUE(artifact.ok()) << artifact.status();
      std::string error;
      auto module = runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
      ASSERT_NE(module, nullptr) << error;
      HostBuffer out(want->type(), want->elements());
      runtime::PoisonBuffer(out.type(), out.data(), out.elements());
      std::list<HostBuffer> internal;
      std::vector<void*> buffers;
      size_t next_input = 0;
      for (const ir::BufferParam& p : func->params) {
        if (p.is_output) {
          buffers.push_back(out.data());
        } else if (p.is_internal) {
          buffers.push_back(internal.emplace_back(ElementTypeOf(p), p.NumElements()).data());
        } else {
          ASSERT_EQ(inputs.at(next_input).type(), ElementTypeOf(p)) << p.name;
          buffers.push_back(const_cast<void*>(inputs[next_input++].data()));
        }
      }
      ASSERT_EQ(module->Prepack(buffers.data()), 0);
      ASSERT_EQ(module->Run(buffers.data()), 0);
      EXPECT_EQ(runtime::FirstMismatch(out.type(), out.data(), want->data(), out.elements(), 0, 0), -1);
    }
  }
  // The output kind decides the space: a u8 output cannot split the reduction.
  const TuningTask u8 = *ParseTask("qmatmul M=8 N=16 K=64 dtype=u8s8u8");
  Config split = (*FindTemplate(u8))->Naive(u8, target);
  nlohmann::json v = split.values();
  v["tile_k"] = 4;
  EXPECT_FALSE((*FindTemplate(u8))->Instantiate(u8, target, Config(v)).ok());
}

// A dynamically quantized MatMul inside a model: X quantized as DynamicQuantizeLinear
// defines it (its scale and zero point computed in float32 from X's range), the int8
// product, then acc x (scale x wscale[j]) + bias[j] in float32.
struct DynamicCase {
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> x, f, wscale, bias;  // f: int8 integers as float32, [K, N]
  float scale = 0, zero = 0;              // what the kernel must compute
  std::vector<float> Expected() {
    float hi = 0, lo = 0;
    for (float v : x) hi = std::max(hi, v), lo = std::min(lo, v);
    const float range = hi - lo;
    scale = range == 0 ? 1.0f : range / 255.0f;
    zero = std::clamp(std::nearbyint((0.0f - lo) / scale), 0.0f, 255.0f);
    std::vector<float> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t t = 0; t < k; ++t) {
          const float q = std::clamp(std::nearbyint(x[i * k + t] / scale) + zero, 0.0f, 255.0f);
          acc += static_cast<int64_t>(q - zero) * static_cast<int64_t>(f[t * n + j]);
        }
        c[i * n + j] = static_cast<float>(acc) * (scale * wscale[j]) + (bias.empty() ? 0.0f : bias[j]);
      }
    }
    return c;
  }
};

DynamicCase MakeDynamicCase(int64_t m, int64_t n, int64_t k, bool bias, uint32_t seed, float low, float high) {
  DynamicCase c{m, n, k, {}, {}, {}, {}, 0, 0};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(low, high);
  std::uniform_int_distribution<int> weight(-128, 127);
  for (int64_t i = 0; i < m * k; ++i) c.x.push_back(low == high ? low : value(rng));
  for (int64_t i = 0; i < k * n; ++i) c.f.push_back(static_cast<float>(i < n ? -128 : weight(rng)));
  for (int64_t j = 0; j < n; ++j) c.wscale.push_back(0.002f + 0.0001f * static_cast<float>(j % 5));
  if (bias) {
    for (int64_t j = 0; j < n; ++j) c.bias.push_back(value(rng));
  }
  return c;
}

// Within float32 rounding of the last multiply-add (the built kernel may fuse it).
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-6 * (1 + std::fabs(want[i]))) << "at " << i;
  }
}

TEST(QuantizedMatmulTest, DynamicModelFormQuantizesItsInputAsDynamicQuantizeLinear) {
  Target plain = Host(2);  // no VNNI and no AMX: the widening multiply-adds
  for (const std::string f : {"avx512vnni", "avxvnni", "amx-int8", "amx-tile"}) {
    for (size_t at; (at = plain.features.find("+" + f)) != std::string::npos;) plain.features[at] = '-';
  }
  struct Shape {
    int64_t m, n, k;
    bool bias;
    float low, high;
  };
  // K % 16 != 0 (a tail per row), a range all above zero (min clamped to 0), one
  // all below, all zeros (scale 1), and one the AMX kernel takes where the host has it.
  for (const Shape& sh : {Shape{9, 32, 40, true, -1.5f, 3.0f}, Shape{5, 16, 20, false, 0.25f, 2.0f},
                          Shape{3, 16, 8, true, -4.0f, -0.5f}, Shape{4, 16, 16, true, 0.0f, 0.0f},
                          Shape{20, 48, 128, true, -2.0f, 2.5f}}) {
    DynamicCase c = MakeDynamicCase(sh.m, sh.n, sh.k, sh.bias, static_cast<uint32_t>(sh.m * 7 + sh.k), sh.low, sh.high);
    const std::vector<float> want = c.Expected();
    const TuningTask task = *ParseTask("qmatmul M=" + std::to_string(sh.m) + " N=" + std::to_string(sh.n) +
                                       " K=" + std::to_string(sh.k) +
                                       " a_zero=128 bias=0 per_channel=1 out_zero=0 dtype=u8s8f32");
    for (const Target& target : {Host(2), plain}) {
      const Template* tmpl = *FindTemplate(task);
      const Config config = tmpl->Heuristics(task, target).front();
      SCOPED_TRACE(task.CanonicalText() + " " + config.ToJson() + " on " + target.features.substr(0, 30));
      absl::StatusOr<ir::LoweredFunc> func = InstantiateDynamicQuantizedMatmulInModel(task, target, config, sh.bias);
      ASSERT_TRUE(func.ok()) << func.status();
      // Interpreted (prepack, then the body).
      ir::IntBuffers ints;
      ir::FloatBuffers floats;
      for (const ir::BufferParam& p : func->params) {
        if (p.dtype == ir::DType::kFloat32) {
          floats[p.name] = std::vector<float>(p.NumElements(), -7.0f);
        } else {
          ints[p.name] = std::vector<int64_t>(p.NumElements(), 3);
        }
      }
      floats["X"] = c.x, floats["F"] = c.f, floats["wscale"] = c.wscale;
      if (sh.bias) floats["bias"] = c.bias;
      absl::Status st = ir::Interpret(*func, &floats, &ints);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(floats["q.value"], (std::vector<float>{c.scale, c.zero}));
      ExpectClose(floats["C"], want);
      // Built and run.
      absl::StatusOr<Artifact> artifact = BuildArtifact(*func, target);
      ASSERT_TRUE(artifact.ok()) << artifact.status();
      std::string error;
      auto module = runtime::LoadedModule::Load(artifact->shared_object, artifact->entry_symbol, &error);
      ASSERT_NE(module, nullptr) << error;
      std::vector<float> out(static_cast<size_t>(sh.m * sh.n), -1.0f), value(2, -1.0f);
      std::list<std::vector<char>> scratch;
      std::vector<void*> buffers;
      for (const ir::BufferParam& p : func->params) {
        if (p.name == "X") {
          buffers.push_back(c.x.data());
        } else if (p.name == "F") {
          buffers.push_back(c.f.data());
        } else if (p.name == "bias") {
          buffers.push_back(c.bias.data());
        } else if (p.name == "wscale") {
          buffers.push_back(c.wscale.data());
        } else if (p.name == "C") {
          buffers.push_back(out.data());
        } else if (p.name == "q.value") {
          buffers.push_back(value.data());
        } else {
          scratch.emplace_back(p.NumElements() * ir::DTypeBytes(p.dtype), '\x55');
          buffers.push_back(scratch.back().data());
        }
      }
      ASSERT_EQ(module->Prepack(buffers.data()), 0);
      ASSERT_EQ(module->Run(buffers.data()), 0);
      EXPECT_EQ(value, (std::vector<float>{c.scale, c.zero}));
      ExpectClose(out, want);
    }
  }
  // The task must be the f32, per-column form.
  const TuningTask u8 = *ParseTask("qmatmul M=4 N=16 K=16 a_zero=128 per_channel=1 out_zero=3 dtype=u8s8u8");
  const Template* tmpl = *FindTemplate(u8);
  EXPECT_FALSE(InstantiateDynamicQuantizedMatmulInModel(u8, Host(2), tmpl->Naive(u8, Host(2)), false).ok());
}

}  // namespace
}  // namespace tuneforge
