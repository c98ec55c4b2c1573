// The CLI contract: --help everywhere, exit 0 on success, non-zero with a one-line
// reason on bad input, and no harm to an existing db.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "compiler/task/task_list.h"
#include "tests/process_util.h"

namespace tuneforge {
namespace {

using testing::ReadFile;
using testing::RunCommand;

const std::string kBin = TF_BIN_DIR;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_cli_" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs tuneforge and expects failure with a one-line message containing `part`.
  void ExpectError(const std::vector<std::string>& args, const std::string& part) {
    std::vector<std::string> argv = {kBin + "/tuneforge"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, dir_, std::chrono::seconds(60));
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_NE(r.exit_code, 0) << joined;
    EXPECT_NE(r.err.find(part), std::string::npos) << joined << "\nstderr: " << r.err;
    // One line: the reason, nothing else (no stack traces, no log spam).
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << joined << "\nstderr: " << r.err;
  }

  std::string dir_;
};

TEST_F(CliTest, HelpOnEveryCommand) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"--help"}, {"tune", "--help"}, {"db", "--help"}, {"show", "--help"}}) {
    std::vector<std::string> argv = {kBin + "/tuneforge"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, dir_);
    EXPECT_EQ(r.exit_code, 0) << args[0];
    EXPECT_NE(r.out.find("usage:"), std::string::npos) << r.out;
  }
  for (const char* bin : {"/tuneforge-server", "/tuneforge-agent"}) {
    auto r = RunCommand({kBin + bin, "--help"}, dir_);
    EXPECT_EQ(r.exit_code, 0) << bin;
    EXPECT_NE(r.out.find("usage:"), std::string::npos) << bin << r.out;
  }
}

// The binary runs on jemalloc (compiler/support/allocator.h), not glibc's malloc.
TEST_F(CliTest, VersionNamesTheAllocator) {
  auto r = RunCommand({kBin + "/tuneforge", "version"}, dir_);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("(jemalloc 5."), std::string::npos) << r.out;
}

TEST_F(CliTest, ModelInspectPrintsTheModelAndRefusesWhatIsNotOne) {
  const std::string models = TF_TEST_MODELS_DIR;
  auto r = RunCommand({kBin + "/tuneforge", "model", "inspect", models + "/mlp_external.onnx"},
                      dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("input:     x [2, 16]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output:    y [2, 4]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights:   4 tensors, 2.6 KiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Gemm"), std::string::npos) << r.out;
  auto g = RunCommand({kBin + "/tuneforge", "model", "inspect", models + "/convbn.onnx",
                       "--print-graph"},
                      dir_);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find("graph:     5 nodes after folding and pruning"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("conv = Conv(x, conv_w/bn_folded=const[8, 3, 3, 3]"), std::string::npos)
      << g.out;
  auto j = RunCommand({kBin + "/tuneforge", "model", "inspect", models + "/mlp.onnx", "--json"},
                      dir_);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_NE(j.out.find("\"opset\": 17"), std::string::npos) << j.out;
  // model tasks writes what tune --tasks reads.
  auto w = RunCommand({kBin + "/tuneforge", "model", "tasks", models + "/resblock.onnx", "-o",
                       dir_ + "/tasks.txt"},
                      dir_);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string tasks = testing::ReadFile(dir_ + "/tasks.txt");
  EXPECT_NE(tasks.find("conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 dtype=float32 weight=2\n"),
            std::string::npos)
      << tasks;
  absl::StatusOr<std::vector<ScheduledTask>> read = ReadTasksFile(dir_ + "/tasks.txt");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].weight, 2);
  std::ofstream(dir_ + "/not.onnx") << "not a model";
  ExpectError({"model", "inspect", dir_ + "/not.onnx"}, "not an ONNX model");
  ExpectError({"model", "inspect", dir_ + "/missing.onnx"}, "cannot read ONNX model");
  ExpectError({"model", "inspect"}, "exactly one model file");
  ExpectError({"model", "frobnicate"}, "unknown subcommand 'frobnicate'");
}

// A float32 .npy file of `shape` filled with `value`.
void WriteNpy(const std::string& path, const std::string& shape, int64_t count, float value) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  for (int64_t i = 0; i < count; ++i) out.write(reinterpret_cast<const char*>(&value), 4);
}

TEST_F(CliTest, ModelRunWritesItsOutputsAndRefusesBadInputs) {
  const std::string model = std::string(TF_TEST_MODELS_DIR) + "/mlp.onnx";
  WriteNpy(dir_ + "/x.npy", "2, 16", 32, 0.5f);
  auto r = RunCommand({kBin + "/tuneforge", "model", "run", model, "--input", "x=" + dir_ + "/x.npy",
                       "--output-dir", dir_ + "/out", "--threads", "1"},
                      dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tasks: 0 tuned (db), 2 default schedule"), std::string::npos) << r.out;
  const std::string y = ReadFile(dir_ + "/out/y.npy");
  EXPECT_EQ(y.size(), 128u + 8 * 4) << "header + 2x4 floats";
  EXPECT_NE(y.find("'shape': (2,4)"), std::string::npos);

  WriteNpy(dir_ + "/wrong.npy", "16, 2", 32, 0.5f);
  ExpectError({"model", "run", model, "--input", "x=" + dir_ + "/wrong.npy", "--output-dir", dir_},
              "input x from " + dir_ + "/wrong.npy has shape [16, 2]; the model wants [2, 16]");
  ExpectError({"model", "run", model, "--output-dir", dir_}, "missing --input x=FILE.npy (inputs: x [2, 16])");
  ExpectError({"model", "run", model, "--input", "z=" + dir_ + "/x.npy", "--output-dir", dir_},
              "the model has no input z");
  ExpectError({"model", "run", model, "--input", "x", "--output-dir", dir_}, "--input wants NAME=FILE.npy");
  ExpectError({"model", "run", model, "--input", "x=" + dir_ + "/x.npy"}, "needs --output-dir");
  std::ofstream(dir_ + "/bad.npy") << "not numpy";
  ExpectError({"model", "run", model, "--input", "x=" + dir_ + "/bad.npy", "--output-dir", dir_},
              "not a usable .npy file (no NumPy magic)");
  ExpectError({"model", "run", model, "--input", "x=" + dir_ + "/x.npy", "--output-dir", dir_, "--db",
               dir_ + "/none.db"},
              "none.db");
}

TEST_F(CliTest, BadTasks) {
  ExpectError({"tune", "--task", "conv9d M=1", "--trials", "1"}, "unknown op 'conv9d'");
  ExpectError({"tune", "--task", "matmul M=512 N=512", "--trials", "1"}, "missing parameter K");
  ExpectError({"tune", "--task", "matmul M=512 N= K=1", "--trials", "1"}, "malformed task parameter");
  ExpectError({"tune", "--task", "matmul M=0 N=512 K=512"}, "must be at least 1");
  ExpectError({"tune", "--task", "matmul M=-5 N=512 K=512"}, "must be at least 1");
  ExpectError({"tune", "--task", "matmul M=1000000000 N=512 K=512"}, "too large");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--trials", "0"}, "--trials");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--trials", "lots"}, "--trials");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--max-repeat", "0"}, "--max-repeat");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--max-spread-pct", "200"},
              "--max-spread-pct");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--model-early-batch", "-1"},
              "--model-early-batch");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--policy", "random", "--model-early-batch", "4"},
              "--model-early-batch is for --policy model");
  ExpectError({"tune"}, "missing required option --task");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--bogus"}, "unknown option --bogus");
  ExpectError({"frobnicate"}, "unknown command 'frobnicate'");
}

// tune --model: the model's tasks share the budget, every task gets its warm-up
// round, and the budget is the model's total in the db: the same command again
// measures nothing new, a larger budget measures only the difference.
TEST_F(CliTest, TuneModelSharesTheBudgetAndResumesFromTheDb) {
  const std::string model = std::string(TF_TEST_MODELS_DIR) + "/mlp.onnx";
  const std::string db = dir_ + "/model.db";
  auto tune = [&](const std::string& trials) {
    auto r = RunCommand({kBin + "/tuneforge", "tune", "--model", model, "--trials", trials,
                         "--round-trials", "8", "--db", db, "--json"},
                        dir_, std::chrono::seconds(300));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // JSON lines: start, one per round, done.
    std::vector<nlohmann::json> events;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) events.push_back(nlohmann::json::parse(line));
    EXPECT_GE(events.size(), 2u) << r.out;
    if (events.size() < 2) return nlohmann::json();
    EXPECT_EQ(events.front()["event"], "start");
    EXPECT_EQ(events.front()["tasks"].size(), 2u);
    EXPECT_EQ(events.back()["event"], "done");
    size_t rounds = 0, in_runs = 0;
    for (const nlohmann::json& e : events) {
      if (e["event"] == "round") rounds += e["rounds_ended"].get<size_t>();  // usually 1 per event
      if (e["event"] != "in_run") continue;
      // The local agent is this machine, and so is the embedded server: it ran the model
      // with the db's schedules, and each task's factor is its kernels' time there over
      // its best alone.
      ++in_runs;
      EXPECT_GT(e["measured_seconds"].get<double>(), 0) << e;
      EXPECT_EQ(e["in_run_factors"].size(), 2u) << e;
      for (const nlohmann::json& f : e["in_run_factors"]) EXPECT_GT(f.get<double>(), 0) << e;
    }
    EXPECT_EQ(events.back()["rounds"].get<size_t>(), rounds);
    EXPECT_GE(in_runs, 1u);  // after the warm-up (and at half the budget)
    EXPECT_GT(events.back()["measured_seconds"].get<double>(), 0) << events.back();
    EXPECT_NEAR(events.back()["estimate_over_measured"].get<double>(),
                events.back()["estimated_seconds"].get<double>() / events.back()["measured_seconds"].get<double>(),
                1e-9);
    EXPECT_TRUE(events.back()["warnings"].empty()) << events.back();
    return events.back();
  };
  nlohmann::json first = tune("24");
  ASSERT_FALSE(first.is_null());
  EXPECT_EQ(first["trials"], 24);
  EXPECT_EQ(first["new_trials"], 24);
  for (const nlohmann::json& t : first["tasks"]) {
    EXPECT_GE(t["trials"].get<int>(), 8) << t;  // the warm-up round
    EXPECT_GT(t["best_seconds"].get<double>(), 0) << t;
  }
  // The server timed the model (its CPU is the target): the untuned model, and the
  // leftovers of the final run (on a loaded machine they may exceed the estimate of a
  // model this small, so only their presence is checked).
  EXPECT_TRUE(first["timed"].get<bool>()) << first;
  EXPECT_GT(first["estimated_seconds"].get<double>(), 0) << first;
  EXPECT_GT(first["untuned_seconds"].get<double>(), 0) << first;
  EXPECT_GE(first["leftover_seconds"].get<double>(), 0) << first;

  nlohmann::json again = tune("24");
  ASSERT_FALSE(again.is_null());
  EXPECT_EQ(again["new_trials"], 0) << again;
  EXPECT_EQ(again["trials"], 24);
  for (size_t i = 0; i < 2; ++i) {  // the db's best of the first run's records
    EXPECT_GT(again["tasks"][i]["best_seconds"].get<double>(), 0) << again;
    EXPECT_TRUE(again["tasks"][i]["config"].is_object()) << again;
  }

  nlohmann::json more = tune("32");
  ASSERT_FALSE(more.is_null());
  EXPECT_EQ(more["new_trials"], 8) << more;
  EXPECT_EQ(more["trials"], 32);
}

// The strongest vendor on the same task, timed after tuning: all three GEMM baselines
// for matmul (JSON with --vendor), and the summary line by default.
TEST_F(CliTest, TunePrintsTheStrongestVendorNextToTheResult) {
  auto j = RunCommand({kBin + "/tuneforge", "tune", "--task", "matmul M=64 N=48 K=40", "--trials", "4", "--db",
                       dir_ + "/v.db", "--json", "--vendor"},
                      dir_, std::chrono::seconds(300));
  ASSERT_EQ(j.exit_code, 0) << j.err;
  nlohmann::json out = nlohmann::json::parse(j.out);
  ASSERT_TRUE(out.contains("vendor")) << j.out;
  EXPECT_EQ(out["vendor"]["all"].size(), 3u) << out["vendor"];
  EXPECT_GT(out["vendor"]["gflops"].get<double>(), 0);
  EXPECT_NEAR(out["vendor"]["tuned_over_vendor"].get<double>(),
              out["best"]["gflops"].get<double>() / out["vendor"]["gflops"].get<double>(), 1e-9);
  auto h = RunCommand({kBin + "/tuneforge", "tune", "--task", "dense M=4 N=32 K=16 bias=1 relu=1", "--trials", "2",
                       "--db", dir_ + "/v.db"},
                      dir_, std::chrono::seconds(300));
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(h.out.find("vendor:      "), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("tuned/vendor"), std::string::npos) << h.out;
  auto none = RunCommand({kBin + "/tuneforge", "tune", "--task", "dense M=4 N=32 K=16 bias=1 relu=1", "--trials",
                          "1", "--db", dir_ + "/v.db", "--no-vendor"},
                         dir_, std::chrono::seconds(300));
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out.find("vendor:"), std::string::npos) << none.out;
}

TEST_F(CliTest, TuneModelRefusesBeforeAnyWork) {
  const std::string models = TF_TEST_MODELS_DIR;
  ExpectError({"tune", "--model", models + "/unsupported.onnx", "--db", dir_ + "/u.db"},
              "operator 'RandomUniformLike' is not supported");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/u.db"));  // no server was started
  ExpectError({"tune", "--model", dir_ + "/missing.onnx"}, "cannot read ONNX model");
  ExpectError({"tune", "--model", models + "/mlp.onnx", "--task", "matmul M=8 N=8 K=8"},
              "give one of --task, --tasks FILE or --model M.onnx");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--flat-rounds", "2"}, "--flat-rounds is for --model");
  ExpectError({"tune", "--model", models + "/mlp.onnx", "--flat-rounds", "-1"}, "--flat-rounds");
  ExpectError({"tune", "--model", models + "/mlp.onnx", "--scheduler", "greedy"},
              "--scheduler must be gradient or round-robin, got 'greedy'");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--scheduler", "round-robin"}, "--scheduler is for --model");
}

TEST_F(CliTest, UnreachableServer) {
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--server", "127.0.0.1:1"},
              "cannot reach tuneforge server at 127.0.0.1:1");
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--server", "nonsense"}, "not HOST:PORT");
  // Plaintext off loopback is refused before dialling, for the tuning and db clients.
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--server", "192.0.2.1:7070"},
              "refusing plaintext to 192.0.2.1:7070");
  ExpectError({"db", "stats", "--server", "192.0.2.1:7070"}, "refusing plaintext to 192.0.2.1:7070");
  ExpectError({"farm", "status", "--server", "192.0.2.1:7070"}, "--insecure");
  // With --insecure (global, anywhere) it dials, and the unreachable server is the error.
  ExpectError({"--insecure", "farm", "status", "--server", "192.0.2.1:7070"}, "cannot reach");
}

TEST_F(CliTest, ShowPrintsTheLoopNestAndRejectsBadConfigs) {
  auto r = RunCommand({kBin + "/tuneforge", "show", "--task", "matmul M=64 N=64 K=64", "--config",
                R"({"accumulate":"registers","loop_order":"ijk","parallel":1,"tile_i_blocks":2,)"
                R"("tile_i_reg":4,"tile_j_blocks":2,"tile_j_vecs":2,"tile_k":16,"unroll_k":2,)"
                R"("vec_lanes":4})"},
               dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("parallel for (i.o"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vectorized for (j.l, 0, 4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allocate C.local"), std::string::npos) << r.out;

  auto space = RunCommand({kBin + "/tuneforge", "show", "--task", "matmul M=64 N=64 K=64", "--space"}, dir_);
  ASSERT_EQ(space.exit_code, 0) << space.err;
  EXPECT_NE(space.out.find("tile_i_reg"), std::string::npos);

  ExpectError({"show", "--task", "matmul M=8 N=8 K=8", "--config", "{not json"}, "not valid JSON");
  ExpectError({"show", "--task", "matmul M=8 N=8 K=8", "--config", "[1,2]"}, "JSON object");
  ExpectError({"show", "--task", "matmul M=8 N=8 K=8", "--config", R"({"tile_i_reg":5})"},
              "invalid config");
}

// Cross-compilation: --obj writes another architecture's object; --so, which links with
// this host's linker, says it cannot instead of passing on the linker's complaint.
TEST_F(CliTest, ShowCompilesForAnotherArchitecture) {
  const std::string arm = "-mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a76 -mattr=+neon";
  const std::string obj = dir_ + "/conv.o";
  auto r = RunCommand({kBin + "/tuneforge", "show", "--task", "conv2d N=1 C=16 H=8 W=8 K=32 R=3 S=3 stride=1 pad=1",
                       "--naive", "--target", arm, "--obj", obj},
                      dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bytes = ReadFile(obj);
  ASSERT_GT(bytes.size(), 20u);
  EXPECT_EQ(bytes.substr(0, 4), "\x7f" "ELF");
  EXPECT_EQ(static_cast<unsigned char>(bytes[18]) | static_cast<unsigned char>(bytes[19]) << 8, 183);  // EM_AARCH64
  // --so links it with ld.lld: a shared object (ET_DYN) for the target's machine
  // (aarch64 183, riscv64 243) exporting the kernel's entry point.
  for (const auto& [target, machine] :
       std::vector<std::pair<std::string, int>>{{arm, 183}, {"-mtriple=riscv64-unknown-linux-gnu -mattr=+m,+a,+f,+d,+c,+v", 243}}) {
    const std::string so = dir_ + "/k" + std::to_string(machine) + ".so";
    auto s = RunCommand({kBin + "/tuneforge", "show", "--task", "matmul M=8 N=8 K=8", "--naive", "--target", target,
                         "--so", so},
                        dir_);
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const std::string elf = ReadFile(so);
    ASSERT_GT(elf.size(), 64u);
    EXPECT_EQ(elf.substr(0, 4), "\x7f" "ELF");
    EXPECT_EQ(static_cast<unsigned char>(elf[16]), 3);  // ET_DYN
    EXPECT_EQ(static_cast<unsigned char>(elf[18]) | static_cast<unsigned char>(elf[19]) << 8, machine);
    const size_t at = s.out.find("entry tf_matmul_");
    ASSERT_NE(at, std::string::npos) << s.out;
    const std::string entry = s.out.substr(at + 6, s.out.find(',', at) - at - 6);  // tf_matmul_<hash>
    EXPECT_NE(elf.find(entry + '\0'), std::string::npos) << entry;  // in the dynamic symbol table
  }
  // A CPU the triple's backend does not know is the user's error, said plainly (LLVM
  // itself aborts on it); the host's CPU does not carry over to another triple.
  ExpectError({"show", "--task", "matmul M=8 N=8 K=8", "--naive", "--target",
               "-mtriple=riscv64-unknown-linux-gnu -mcpu=znver5", "--obj", dir_ + "/z.o"},
              "unknown CPU 'znver5' for riscv64-unknown-linux-gnu");
  ExpectError({"show", "--task", "matmul M=8 N=8 K=8", "--naive", "--target", "-mtriple=nosuch-unknown-linux",
               "--obj", dir_ + "/y.o"},
              "unsupported target triple 'nosuch-unknown-linux'");
}

// The embedded default for another architecture: `tune --target aarch64` (riscv64)
// starts a device agent (the cross-built runner under qemu-user) instead of the local
// agent; the records are the device's, correct, keyed by its triple. A name it does
// not know lists the known ones.
TEST_F(CliTest, TuneForAnotherArchitectureOnTheEmbeddedDefault) {
  for (const auto& [name, triple] : std::vector<std::pair<std::string, std::string>>{
           {"aarch64", "aarch64-unknown-linux-gnu"}, {"riscv64", "riscv64-unknown-linux-gnu"}}) {
    auto r = RunCommand({kBin + "/tuneforge", "tune", "--task", "matmul M=16 N=16 K=16", "--trials", "4", "--target",
                         name, "--db", dir_ + "/" + name + ".db", "--json"},
                        dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["target"]["triple"], triple) << r.out;
    EXPECT_EQ(j["trials"], 4);
    EXPECT_EQ(j["errors"], 0) << r.out;  // every kernel ran and matched the reference on the device
    EXPECT_GT(j["best"]["seconds"].get<double>(), 0.0);
    EXPECT_FALSE(j.contains("vendor"));  // the vendors run on this machine, not the device
  }
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--trials", "1", "--target", "arm64", "--db", dir_ + "/x.db"},
              "unknown target 'arm64' (known: aarch64, riscv64, x86-64-v3");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.db"));
}

TEST_F(CliTest, BadDatabasePaths) {
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--trials", "1", "--db",
               dir_ + "/no/such/dir/x.db"},
              "no/such/dir");
  // A file that is not a SQLite database is refused and left exactly as it was.
  std::string text = dir_ + "/notes.txt";
  {
    std::ofstream out(text);
    out << "precious notes, not a database\n";
  }
  ExpectError({"tune", "--task", "matmul M=8 N=8 K=8", "--trials", "1", "--db", text},
              "not a tuneforge database");
  ExpectError({"db", "best", "--db", text, "--task", "matmul M=8 N=8 K=8"}, "not a tuneforge database");
  EXPECT_EQ(ReadFile(text), "precious notes, not a database\n");
  ExpectError({"db", "list", "--db", dir_ + "/missing.db"}, "missing.db");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing.db"));
  ExpectError({"db", "best", "--db", dir_ + "/missing.db"}, "missing required option --task");
  ExpectError({"db"}, "expected a subcommand");
}

}  // namespace
}  // namespace tuneforge
