// Deploy round trip with real processes: tune (embedded default) -> deploy ->
// compile deploy/examples/example.c against the library -> run -> correct. Also
// missing records (error vs fallback) and inspect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/process_util.h"

namespace tuneforge {
namespace {

using testing::ReadFile;
using testing::RunCommand;

const std::string kBin = TF_BIN_DIR;
const std::string kExample = TF_EXAMPLE_C;
const std::string kModelExample = TF_MODEL_EXAMPLE_C;
const std::string kModels = TF_TEST_MODELS_DIR;

class DeployTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_deploy_" + std::to_string(getpid()))).string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = dir_ + "/t.db";
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  void Tune(const std::string& task) {
    auto r = RunCommand({kBin + "/tuneforge", "tune", "--task", task, "--trials", "6", "--db", db_,
                         "--json"},
                        dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::string dir_, db_;
};

// int8 tasks through the whole path: tuned by a real agent (typed buffers, exact
// checks), deployed with typed C signatures, re-checked by inspect --bench.
TEST_F(DeployTest, Int8MatmulsTuneDeployAndCheckExactly) {
  const std::vector<std::string> tasks = {
      "qmatmul M=24 N=64 K=96 a_zero=128 per_channel=1 out_zero=3 dtype=u8s8u8",
      "qmatmul M=16 N=32 K=64 bias=1 dtype=u8s8s32", "qmatmul M=8 N=48 K=32 a_zero=9 dtype=u8s8f32"};
  for (const std::string& task : tasks) {
    auto r = RunCommand({kBin + "/tuneforge", "tune", "--task", task, "--trials", "6", "--db", db_, "--json"},
                        dir_);
    ASSERT_EQ(r.exit_code, 0) << task << ": " << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["errors"], 0) << task << ": " << r.out;
    EXPECT_GT(j["best"]["gflops"].get<double>(), 0.0) << task;
  }
  const std::string list = dir_ + "/int8.txt";
  {
    std::ofstream out(list);
    for (const std::string& task : tasks) out << task << "\n";
  }
  const std::string out_dir = dir_ + "/int8";
  auto d = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--tasks", list, "--out", out_dir}, dir_);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const std::string header = ReadFile(out_dir + "/tuneforge_kernels.h");
  EXPECT_NE(header.find("int tuneforge_kernels_qmatmul_u8s8u8_24x64x96x128x1x3(const uint8_t* A, const int8_t* B, "
                        "const float* scale, uint8_t* C);"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("(const uint8_t* A, const int8_t* B, const int32_t* bias, int32_t* C);"), std::string::npos)
      << header;
  EXPECT_NE(header.find("\n// C = uint8(round_half_even(float(acc) * scale[N]) + 3, saturated)."), std::string::npos)
      << header;
  auto inspect = RunCommand(
      {kBin + "/tuneforge", "deploy", "inspect", out_dir + "/libtuneforge_kernels.so", "--bench", "--json"}, dir_);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  nlohmann::json in = nlohmann::json::parse(inspect.out);
  ASSERT_EQ(in["bench"].size(), tasks.size()) << inspect.out;
  for (const auto& k : in["bench"]) EXPECT_TRUE(k["correct"].get<bool>()) << k.dump();
}

TEST_F(DeployTest, TuneDeployLinkRunCorrect) {
  Tune("matmul M=48 N=40 K=33");
  Tune("matmul M=7 N=129 K=16");
  std::string tasks = dir_ + "/tasks.txt";
  {
    std::ofstream out(tasks);
    out << "# two layers\nmatmul M=48 N=40 K=33 weight=2\n\nmatmul M=7 N=129 K=16\n";
  }
  std::string out_dir = dir_ + "/lib";
  auto d = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--tasks", tasks, "--out", out_dir,
                       "--json"},
                      dir_);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  nlohmann::json j = nlohmann::json::parse(d.out);
  ASSERT_EQ(j["kernels"].size(), 2u);
  EXPECT_GT(j["kernels"][0]["record_id"].get<int64_t>(), 0);
  EXPECT_TRUE(std::filesystem::exists(out_dir + "/libtuneforge_kernels.so"));
  EXPECT_TRUE(std::filesystem::exists(out_dir + "/libtuneforge_kernels.a"));
  // Never unmapped by dlclose(): its pool's detached workers live in its code.
  auto dynamic = RunCommand({"readelf", "-d", out_dir + "/libtuneforge_kernels.so"}, dir_);
  ASSERT_EQ(dynamic.exit_code, 0) << dynamic.err;
  EXPECT_NE(dynamic.out.find("NODELETE"), std::string::npos) << dynamic.out;
  std::string header = ReadFile(out_dir + "/tuneforge_kernels.h");
  EXPECT_NE(header.find("int tuneforge_kernels_matmul_48x40x33(const float* A, const float* B, float* C);"),
            std::string::npos)
      << header;

  // Shared and static linking of the example; both must run and be correct.
  auto cc = RunCommand({"cc", kExample, "-I", out_dir, "-L", out_dir, "-ltuneforge_kernels",
                        "-Wl,-rpath," + out_dir, "-lm", "-o", dir_ + "/example"},
                       dir_);
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  auto run = RunCommand({dir_ + "/example"}, dir_);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("tuneforge_kernels_matmul_7x129x16: matmul M=7 N=129 K=16 dtype=float32 correct"),
            std::string::npos)
      << run.out;
  auto cc_static = RunCommand({"cc", kExample, "-I", out_dir, out_dir + "/libtuneforge_kernels.a",
                               "-lstdc++", "-lpthread", "-lm", "-o", dir_ + "/example_static"},
                              dir_);
  ASSERT_EQ(cc_static.exit_code, 0) << cc_static.err;
  EXPECT_EQ(RunCommand({dir_ + "/example_static"}, dir_).exit_code, 0);

  // Provenance via inspect, with a re-measurement that must be correct.
  auto inspect = RunCommand({kBin + "/tuneforge", "deploy", "inspect",
                             out_dir + "/libtuneforge_kernels.so", "--bench", "--json"},
                            dir_);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  nlohmann::json in = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(in["provenance"]["kernels"].size(), 2u);
  EXPECT_FALSE(in["provenance"]["tuneforge_version"].get<std::string>().empty());
  // One bench entry per deployed kernel: an empty list would pass the loop below.
  ASSERT_TRUE(in.contains("bench")) << inspect.out;
  ASSERT_EQ(in["bench"].size(), 2u) << inspect.out;
  for (const auto& k : in["bench"]) {
    EXPECT_TRUE(k["correct"].get<bool>());
    EXPECT_GT(k["measured_gflops"].get<double>(), 0.0);
  }
}

// Every template deploys like matmul: one typed function per task (layout transforms
// inside the call), checked by the C example against plain loops and by inspect
// against tuneforge's reference.
// A library for another architecture: tuned on the aarch64 device agent (qemu-user),
// deployed with --target aarch64 (kernels and runtime cross-built), and the C example
// cross-compiled against it runs correctly under qemu, linked shared and static.
TEST_F(DeployTest, Aarch64LibraryRunsTheExampleUnderQemu) {
  const std::string task = "matmul M=16 N=24 K=20";
  auto t = RunCommand({kBin + "/tuneforge", "tune", "--task", task, "--trials", "4", "--target", "aarch64", "--db",
                       db_, "--json"},
                      dir_);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  Tune(task);  // records for this machine too: --target must pick the aarch64 ones
  const std::string out_dir = dir_ + "/arm";
  auto d = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--task", task, "--target", "aarch64", "--out",
                       out_dir, "--json"},
                      dir_);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(nlohmann::json::parse(d.out)["target_key"].get<std::string>().rfind("aarch64-unknown-linux-gnu/", 0), 0u)
      << d.out;
  const std::string so = ReadFile(out_dir + "/libtuneforge_kernels.so");
  ASSERT_GT(so.size(), 20u);
  EXPECT_EQ(static_cast<unsigned char>(so[18]) | static_cast<unsigned char>(so[19]) << 8, 183);  // EM_AARCH64
  for (const bool shared : {true, false}) {
    std::vector<std::string> cc = {"aarch64-linux-gnu-gcc", kExample, "-I", out_dir};
    if (shared) {
      cc.insert(cc.end(), {"-L", out_dir, "-ltuneforge_kernels", "-Wl,-rpath," + out_dir});
    } else {
      cc.insert(cc.end(), {out_dir + "/libtuneforge_kernels.a", "-lstdc++", "-lpthread"});
    }
    cc.insert(cc.end(), {"-lm", "-o", dir_ + "/arm_example"});
    auto c = RunCommand(cc, dir_);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    auto run = RunCommand({"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", dir_ + "/arm_example"}, dir_);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_NE(run.out.find("tuneforge_kernels_matmul_16x24x20: matmul M=16 N=24 K=20 dtype=float32 correct"),
              std::string::npos)
        << (shared ? "shared: " : "static: ") << run.out << run.err;
  }
  // No records of the named architecture: a clear error.
  auto none = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--task", task, "--target", "riscv64", "--out",
                          dir_ + "/rv"},
                         dir_);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("no records for any of the tasks on the requested target"), std::string::npos) << none.err;
}

// deploy --model for another architecture: the executor runs here only to prepack
// the weights of kernels scheduled for aarch64; the kernels, runtime and glue are
// cross-built. The C example cross-compiled against it, under qemu, computes what
// the host's library computes for the same input (resblock: convolutions, a residual
// add, relu).
TEST_F(DeployTest, ModelLibraryForAarch64ComputesWhatTheHostsDoes) {
  const std::string model = kModels + "/resblock.onnx", host = dir_ + "/mhost", arm = dir_ + "/marm";
  auto h = RunCommand({kBin + "/tuneforge", "deploy", "--model", model, "-o", host}, dir_);
  ASSERT_EQ(h.exit_code, 0) << h.err;
  // The convolution tuned on the aarch64 device agent (qemu), the depthwise one not.
  auto t = RunCommand({kBin + "/tuneforge", "tune", "--task", "conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1",
                       "--trials", "4", "--target", "aarch64", "--db", db_, "--json"},
                      dir_, std::chrono::seconds(300));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  auto a = RunCommand({kBin + "/tuneforge", "deploy", "--model", model, "--db", db_, "--target", "aarch64", "-o",
                       arm, "--json"},
                      dir_);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["tuned_tasks"], 1) << a.out;
  EXPECT_EQ(nlohmann::json::parse(a.out)["target_key"].get<std::string>().rfind("aarch64-unknown-linux-gnu/", 0), 0u)
      << a.out;
  const std::string so = ReadFile(arm + "/libtuneforge_model.so");
  ASSERT_GT(so.size(), 20u);
  EXPECT_EQ(static_cast<unsigned char>(so[18]) | static_cast<unsigned char>(so[19]) << 8, 183);  // EM_AARCH64

  std::vector<float> input(8 * 8 * 8);
  for (size_t i = 0; i < input.size(); ++i) input[i] = std::sin(0.37f * static_cast<float>(i));
  std::ofstream(dir_ + "/x.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size() * 4));
  auto c1 = RunCommand({"cc", "-std=c11", kModelExample, "-I", host, "-L", host, "-ltuneforge_model",
                        "-Wl,-rpath," + host, "-o", dir_ + "/mx_host"},
                       dir_);
  ASSERT_EQ(c1.exit_code, 0) << c1.err;
  auto c2 = RunCommand({"aarch64-linux-gnu-gcc", "-std=c11", kModelExample, "-I", arm, "-L", arm,
                        "-ltuneforge_model", "-Wl,-rpath," + arm, "-o", dir_ + "/mx_arm"},
                       dir_);
  ASSERT_EQ(c2.exit_code, 0) << c2.err;
  std::filesystem::create_directories(dir_ + "/out_host");
  std::filesystem::create_directories(dir_ + "/out_arm");
  auto r1 = RunCommand({dir_ + "/mx_host", host, "--out", dir_ + "/out_host", dir_ + "/x.bin"}, dir_);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  auto r2 = RunCommand({"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", dir_ + "/mx_arm", arm, "--out",
                        dir_ + "/out_arm", dir_ + "/x.bin"},
                       dir_, std::chrono::seconds(120));
  ASSERT_EQ(r2.exit_code, 0) << r2.out << r2.err;
  const std::string y_host = ReadFile(dir_ + "/out_host/output0.bin"), y_arm = ReadFile(dir_ + "/out_arm/output0.bin");
  ASSERT_EQ(y_host.size(), 8u * 8 * 8 * 4);
  ASSERT_EQ(y_arm.size(), y_host.size());
  const auto* p = reinterpret_cast<const float*>(y_host.data());
  const auto* q = reinterpret_cast<const float*>(y_arm.data());
  int nonzero = 0;
  for (size_t i = 0; i < y_host.size() / 4; ++i) {
    EXPECT_NEAR(q[i], p[i], 1e-4 + 1e-4 * std::fabs(p[i])) << i;
    nonzero += p[i] != 0;
  }
  EXPECT_GT(nonzero, 100);  // relu leaves a good share of the outputs positive

  auto unknown = RunCommand({kBin + "/tuneforge", "deploy", "--model", model, "--target", "sparc", "-o",
                             dir_ + "/msparc"},
                            dir_);
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("unknown target 'sparc' (known: aarch64, riscv64, x86-64-v3"), std::string::npos)
      << unknown.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/msparc"));
}

TEST_F(DeployTest, EveryTemplateDeploysAndRunsCorrectly) {
  const std::vector<std::string> tasks = {
      "dense M=9 N=48 K=40 bias=1 relu=1", "conv2d N=1 C=8 H=9 W=9 K=16 R=3 S=3 stride=1 pad=1",
      "depthwise_conv2d N=1 C=16 H=10 W=10 R=3 S=3 stride=2 pad=1",
      "batch_matmul B=3 M=5 N=33 K=7"};
  std::string list = dir_ + "/every.txt";
  {
    std::ofstream out(list);
    for (const std::string& t : tasks) out << t << "\n";
  }
  for (const std::string& t : tasks) Tune(t);
  std::string out_dir = dir_ + "/every";
  auto d = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--tasks", list, "--out",
                       out_dir, "--json"},
                      dir_);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(nlohmann::json::parse(d.out)["kernels"].size(), tasks.size());
  std::string header = ReadFile(out_dir + "/tuneforge_kernels.h");
  EXPECT_NE(header.find("int tuneforge_kernels_dense_9x48x40x1x1(const float* X, const float* W, "
                        "const float* bias, float* Y);"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("(const float* I, const float* F, float* O);"), std::string::npos) << header;

  auto cc = RunCommand({"cc", kExample, "-I", out_dir, "-L", out_dir, "-ltuneforge_kernels",
                        "-Wl,-rpath," + out_dir, "-lm", "-o", dir_ + "/every_example"},
                       dir_);
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  auto run = RunCommand({dir_ + "/every_example"}, dir_);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  for (const char* op : {"dense M=9", "conv2d N=1", "depthwise_conv2d N=1", "batch_matmul B=3"})
    EXPECT_NE(run.out.find(std::string(": ") + op), std::string::npos) << op << "\n" << run.out;
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 4) << run.out;
  EXPECT_EQ(run.out.find("expected"), std::string::npos) << run.out;

  auto inspect = RunCommand({kBin + "/tuneforge", "deploy", "inspect",
                             out_dir + "/libtuneforge_kernels.so", "--bench", "--json"},
                            dir_);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  nlohmann::json in = nlohmann::json::parse(inspect.out);
  ASSERT_EQ(in["bench"].size(), tasks.size()) << inspect.out;
  for (const auto& k : in["bench"]) {
    EXPECT_TRUE(k["correct"].get<bool>()) << k.dump();
    EXPECT_GT(k["measured_gflops"].get<double>(), 0.0);
  }
}

// deploy --model: the model as one library with a C API, the db's records in its
// provenance, tasks without one on the default schedule with a warning; the C example
// links it (shared and static) and runs it; a weights file of another build or a
// corrupt one is refused at load. (Outputs against the executor and onnxruntime:
// the deploy_model_* tests, tests/models/check_run.py --deploy.)
TEST_F(DeployTest, ModelLibraryRunsThroughItsCApiAndRefusesForeignWeights) {
  const std::string mlp = kModels + "/mlp.onnx";
  auto t = RunCommand({kBin + "/tuneforge", "tune", "--model", mlp, "--trials", "8", "--round-trials", "4",
                       "--db", db_, "--json"},
                      dir_, std::chrono::seconds(300));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string lib = dir_ + "/model", other = dir_ + "/other";
  auto d = RunCommand({kBin + "/tuneforge", "deploy", "--model", mlp, "--db", db_, "-o", lib, "--json"}, dir_);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  nlohmann::json j = nlohmann::json::parse(d.out);
  EXPECT_EQ(j["tuned_tasks"], 2);
  EXPECT_EQ(j["default_tasks"], 0);
  EXPECT_EQ(d.err.find("warning"), std::string::npos) << d.err;
  for (const char* f : {"/libtuneforge_model.so", "/libtuneforge_model.a", "/tuneforge_model.h",
                        "/tuneforge_model.weights", "/provenance.json"})
    EXPECT_TRUE(std::filesystem::exists(lib + f)) << f;
  auto inspect = RunCommand({kBin + "/tuneforge", "deploy", "inspect", lib, "--json"}, dir_);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  nlohmann::json prov = nlohmann::json::parse(inspect.out);
  ASSERT_EQ(prov["tasks"].size(), 2u);
  for (const nlohmann::json& task : prov["tasks"]) {
    EXPECT_EQ(task["schedule"], "tuned") << task;
    EXPECT_GT(task["record_id"].get<int64_t>(), 0) << task;
  }
  EXPECT_EQ(prov["warnings"].size(), 0u);

  // No record for resblock's tasks: default schedules, listed with a warning.
  auto o = RunCommand({kBin + "/tuneforge", "deploy", "--model", kModels + "/resblock.onnx", "--db", db_, "-o",
                       other, "--json"},
                      dir_);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["default_tasks"], 2);
  EXPECT_NE(o.err.find("warning: 2 of 2 tasks have no record"), std::string::npos) << o.err;
  EXPECT_NE(ReadFile(other + "/provenance.json").find("\"schedule\": \"default\""), std::string::npos);

  const std::string exe = dir_ + "/model_example", exe_static = dir_ + "/model_example_static";
  auto cc = RunCommand({"cc", "-std=c11", kModelExample, "-I", lib, "-L", lib, "-ltuneforge_model",
                        "-Wl,-rpath," + lib, "-o", exe},
                       dir_);
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  auto cc_static = RunCommand({"cc", "-std=c11", kModelExample, "-I", lib, lib + "/libtuneforge_model.a",
                               "-lstdc++", "-lpthread", "-lm", "-o", exe_static},
                              dir_);
  ASSERT_EQ(cc_static.exit_code, 0) << cc_static.err;
  for (const std::string& bin : {exe, exe_static}) {
    auto run = RunCommand({bin, lib, "--runs", "5"}, dir_);
    EXPECT_EQ(run.exit_code, 0) << bin << run.err;
    EXPECT_NE(run.out.find("output 0: y [2, 4]"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("runs: 5, median"), std::string::npos) << run.out;
  }

  // Weights of another build, then a corrupt byte: refused at load.
  const std::string weights = lib + "/tuneforge_model.weights";
  const std::string good = ReadFile(weights);
  std::filesystem::copy_file(other + "/tuneforge_model.weights", weights,
                             std::filesystem::copy_options::overwrite_existing);
  auto foreign = RunCommand({exe, lib}, dir_);
  EXPECT_NE(foreign.exit_code, 0);
  EXPECT_NE(foreign.err.find("belongs to another build of the model"), std::string::npos) << foreign.err;
  std::string bad = good;
  bad[bad.size() - 3] ^= 0x40;
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << bad;
  auto corrupt = RunCommand({exe, lib}, dir_);
  EXPECT_NE(corrupt.exit_code, 0);
  EXPECT_NE(corrupt.err.find("truncated or corrupt"), std::string::npos) << corrupt.err;
  std::filesystem::remove(weights);
  auto missing = RunCommand({exe, lib}, dir_);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;

  // Bad input: nothing built.
  auto unsupported = RunCommand({kBin + "/tuneforge", "deploy", "--model", kModels + "/unsupported.onnx", "-o",
                                 dir_ + "/u"},
                                dir_);
  EXPECT_NE(unsupported.exit_code, 0);
  EXPECT_NE(unsupported.err.find("operator 'RandomUniformLike' is not supported"), std::string::npos) << unsupported.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/u"));
  auto mixed = RunCommand({kBin + "/tuneforge", "deploy", "--model", mlp, "--task", "matmul M=1 N=1 K=1", "-o",
                           dir_ + "/u"},
                          dir_);
  EXPECT_NE(mixed.exit_code, 0);
  EXPECT_NE(mixed.err.find("--task is not for --model"), std::string::npos) << mixed.err;
  auto no_out = RunCommand({kBin + "/tuneforge", "deploy", "--model", mlp}, dir_);
  EXPECT_NE(no_out.exit_code, 0);
  EXPECT_NE(no_out.err.find("--out"), std::string::npos) << no_out.err;
}

TEST_F(DeployTest, MissingRecordsAreAnErrorUnlessFallback) {
  Tune("matmul M=16 N=16 K=16");
  std::string tasks = dir_ + "/tasks.txt";
  {
    std::ofstream out(tasks);
    out << "matmul M=16 N=16 K=16\nmatmul M=8 N=9 K=10\nmatmul M=3 N=3 K=3\n";
  }
  auto err = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--tasks", tasks, "--out",
                         dir_ + "/lib"},
                        dir_);
  EXPECT_NE(err.exit_code, 0);
  // Every missing task is listed, and nothing was written.
  EXPECT_NE(err.err.find("matmul M=8 N=9 K=10"), std::string::npos) << err.err;
  EXPECT_NE(err.err.find("matmul M=3 N=3 K=3"), std::string::npos) << err.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/lib"));

  auto ok = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--tasks", tasks, "--out",
                        dir_ + "/lib", "--fallback", "default", "--json"},
                       dir_);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("WARNING: no record for matmul M=8 N=9 K=10"), std::string::npos) << ok.err;
  EXPECT_NE(ok.err.find("WARNING: no record for matmul M=3 N=3 K=3"), std::string::npos) << ok.err;
  nlohmann::json j = nlohmann::json::parse(ok.out);
  EXPECT_FALSE(j["kernels"][0]["fallback"].get<bool>());
  EXPECT_TRUE(j["kernels"][1]["fallback"].get<bool>());

  auto bad_name = RunCommand({kBin + "/tuneforge", "deploy", "--db", db_, "--task",
                              "matmul M=16 N=16 K=16", "--out", dir_ + "/x", "--name", "9-lives"},
                             dir_);
  EXPECT_NE(bad_name.exit_code, 0);
  EXPECT_NE(bad_name.err.find("C identifier"), std::string::npos) << bad_name.err;
}

}  // namespace
}  // namespace tuneforge
