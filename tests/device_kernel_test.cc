// Kernels for other devices (issue 21), checked on the device: every template's
// kernels cross-compiled by LLVM for aarch64 (NEON) and riscv64 (RVV), linked by
// ld.lld, run by the cross-built device runner (bin/tuneforge-runner-<arch>) under
// qemu-user, the way an agent drives a board through its launcher, and compared with
// the reference; the same for x86-64-v3 (AVX2 only) and the host's CPU, natively
// through the host's runner. Emulated timings are not device speeds; correctness is
// checked.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/codegen/build.h"
#include "compiler/reference/reference.h"
#include "compiler/support/files.h"
#include "compiler/support/status.h"
#include "compiler/target/target.h"
#include "compiler/templates/template.h"

namespace tuneforge {
namespace {

struct Device {
  std::string arch;
  std::string target;                 // ParseTarget text
  std::vector<std::string> launcher;  // runs the runner on the "device"
};

std::vector<Device> Devices() {
  return {
      // This machine, natively: an AVX2-only target and the host's own CPU.
      {"x86_64", "-mcpu=x86-64-v3 -mattr=+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+movbe -threads=1", {}},
      {"x86_64", "-threads=2", {}},
      {"aarch64", "-mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a76 -mattr=+neon -threads=1",
       {"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"}},
      {"riscv64", "-mtriple=riscv64-unknown-linux-gnu -mcpu=generic-rv64 -mattr=+m,+a,+f,+d,+c,+v -threads=1",
       {"qemu-riscv64", "-L", "/usr/riscv64-linux-gnu", "-cpu", "rv64,v=true,vlen=128,vext_spec=v1.0"}},
  };
}

void WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> ReadFloats(const std::string& path, size_t n) {
  std::vector<float> v(n, std::nanf(""));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  return v;
}

// `config` of `task` built for the device into dir/k.so: its function in *func.
void BuildForDevice(const Target& target, const TuningTask& task, const Config& config, const std::string& dir,
                    ir::LoweredFunc* func) {
  auto made = (*FindTemplate(task))->Instantiate(task, target, config);
  ASSERT_TRUE(made.ok()) << made.status();
  auto artifact = BuildArtifact(*made, target);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  ASSERT_TRUE(WriteFile(dir + "/k.so", artifact->shared_object).ok());
  *func = std::move(*made);
}

// The launcher and the runner's leading arguments: dir/k.so's entry points, `runs`.
std::vector<std::string> RunnerCommand(const Device& device, const ir::LoweredFunc& func, const std::string& dir,
                                       int runs) {
  std::vector<std::string> argv = device.launcher;
  argv.insert(argv.end(), {std::string(TF_BIN_DIR) + "/tuneforge-runner-" + device.arch, dir + "/k.so", func.name,
                           func.prepack ? func.name + "_prepack" : "-", func.unpack ? func.name + "_unpack" : "-",
                           std::to_string(runs)});
  return argv;
}

// Runs `argv` with the nonce on stdin: it must exit 0 and print the runner's ok line
// (a launcher may print its own before it). `what` names the case.
void ExpectRunnerOk(const std::vector<std::string>& argv, const std::string& dir, const std::string& what) {
  const std::string nonce = "0123456789abcdef0123\n";
  auto status = RunAndWait(argv, dir + "/run.log", &nonce);
  ASSERT_TRUE(status.ok()) << status.status();
  auto log = ReadFile(dir + "/run.log");
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(*status, 0) << what << ": " << *log;
  ASSERT_TRUE(log->rfind("ok nonce=0123456789abcdef0123 seconds=", 0) == 0 ||
              log->find("\nok nonce=0123456789abcdef0123 seconds=") != std::string::npos)
      << *log;
}

// Builds `config` for the device, runs it there three times and compares the output.
void ExpectCorrectOnDevice(const Device& device, const Target& target, const TuningTask& task, const Config& config,
                           const std::string& dir) {
  ir::LoweredFunc func;
  BuildForDevice(target, task, config, dir, &func);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<std::vector<float>> inputs = MakeInputs(task, 5);
  auto expected = ReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok());
  std::vector<std::string> argv = RunnerCommand(device, func, dir, 3);
  size_t next = 0;
  for (const ir::BufferParam& p : func.params) {
    const std::string n = std::to_string(p.NumElements());
    if (p.is_output) {
      argv.push_back("out:" + n + ":" + dir + "/out.bin");
    } else if (p.is_internal) {
      argv.push_back("tmp:" + n);
    } else {
      ASSERT_LT(next, inputs.size());
      const std::string path = dir + "/in" + std::to_string(next) + ".bin";
      WriteFloats(path, inputs[next++]);
      argv.push_back("in:" + n + ":" + path);
    }
  }
  {
    WriteFloats(dir + "/expected.bin", *expected);
    const Tolerance tol = ToleranceFor(task);
    char check[96];
    std::snprintf(check, sizeof check, "check:%zu:%.9g:%.9g:", expected->size(), tol.atol, tol.rtol);
    argv.push_back(check + dir + "/expected.bin");
  }
  std::remove((dir + "/out.bin").c_str());
  ExpectRunnerOk(argv, dir, device.arch + " " + task.CanonicalText() + " " + config.ToJson());
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<float> out = ReadFloats(dir + "/out.bin", expected->size());
  const Tolerance tol = ToleranceFor(task);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_LE(std::fabs(out[i] - (*expected)[i]), tol.atol + tol.rtol * std::fabs((*expected)[i]))
        << device.arch << " " << task.CanonicalText() << " " << config.ToJson() << " index " << i;
  }
}

TEST(DeviceKernelTest, EveryTemplateIsCorrectOnX86_64V3HostAarch64AndRiscv64) {
  auto dir = TempDir::Create("tuneforge-device-test");
  ASSERT_TRUE(dir.ok());
  int checked = 0;
  for (const Device& device : Devices()) {
    auto target = ParseTarget(device.target, DetectHostTarget("test"));
    ASSERT_TRUE(target.ok()) << target.status();
    for (const char* text : {"matmul M=17 N=33 K=20", "batch_matmul B=2 M=8 N=16 K=12",
                             "dense M=4 N=32 K=24 bias=1 relu=1",
                             "conv2d N=1 C=8 H=8 W=8 K=16 R=3 S=3 stride=1 pad=1",
                             "conv2d N=1 C=4 H=9 W=9 K=8 R=1 S=1 stride=2 pad=0",
                             "depthwise_conv2d N=1 C=16 H=8 W=8 R=3 S=3 stride=1 pad=1"}) {
      auto task = ParseTask(text);
      ASSERT_TRUE(task.ok()) << task.status();
      const Template* tmpl = *FindTemplate(*task);
      std::vector<Config> configs = {tmpl->Naive(*task, *target)};
      std::vector<Config> heuristics = tmpl->Heuristics(*task, *target);
      // The first heuristic (vectorized for the device's width) and, for conv2d, the
      // first Winograd one.
      if (!heuristics.empty()) configs.push_back(heuristics[0]);
      for (const Config& c : heuristics) {
        if (c.values().value("algorithm", "direct") != "direct") {
          configs.push_back(c);
          break;
        }
      }
      for (const Config& c : configs) {
        ExpectCorrectOnDevice(device, *target, *task, c, dir->path());
        if (::testing::Test::HasFatalFailure()) return;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * (2 + 2 + 2 + 3 + 2 + 2));
}

// The int8 kernels (uint8, int8 and int32 buffers: the runner's byte buffers and exact
// check) on the same devices, and on an aarch64 core with i8mm, where Dot4 is usdot;
// without it (and on riscv64, and x86-64-v3) the exact widening multiply-adds. Their
// outputs must equal the reference bit for bit.
void ExpectTypedCorrectOnDevice(const Device& device, const Target& target, const TuningTask& task,
                                const Config& config, const std::string& dir) {
  ir::LoweredFunc func;
  BuildForDevice(target, task, config, dir, &func);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<HostBuffer> inputs = MakeTypedInputs(task, 9);
  auto expected = TypedReferenceOutput(task, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::vector<std::string> argv = RunnerCommand(device, func, dir, 2);
  size_t next = 0;
  for (const ir::BufferParam& p : func.params) {
    const std::string bytes = std::to_string(p.NumElements() * ir::DTypeBytes(p.dtype));
    if (p.is_output) {
      argv.push_back("outb:" + bytes + ":" + dir + "/out.bin");
    } else if (p.is_internal) {
      argv.push_back("tmpb:" + bytes);
    } else {
      ASSERT_LT(next, inputs.size());
      const std::string path = dir + "/in" + std::to_string(next) + ".bin";
      ASSERT_TRUE(WriteFile(path, inputs[next++].Bytes()).ok());
      argv.push_back("inb:" + bytes + ":" + path);
    }
  }
  ASSERT_TRUE(WriteFile(dir + "/expected.bin", expected->Bytes()).ok());
  argv.push_back("checkb:" + std::to_string(expected->bytes()) + ":" + dir + "/expected.bin");
  ExpectRunnerOk(argv, dir, device.arch + " " + task.CanonicalText() + " " + config.ToJson());
  if (::testing::Test::HasFatalFailure()) return;
  auto out = ReadFile(dir + "/out.bin");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, expected->Bytes()) << device.arch << " " << task.CanonicalText();
}

TEST(DeviceKernelTest, Int8KernelsAreExactOnX86_64V3HostAarch64WithAndWithoutI8mmAndRiscv64) {
  auto dir = TempDir::Create("tuneforge-device-int8-test");
  ASSERT_TRUE(dir.ok());
  std::vector<Device> devices = Devices();
  devices.push_back({"aarch64", "-mtriple=aarch64-unknown-linux-gnu -mcpu=neoverse-v1 -threads=1",
                     {"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", "max"}});
  int checked = 0;
  for (const Device& device : devices) {
    auto target = ParseTarget(device.target, DetectHostTarget("test"));
    ASSERT_TRUE(target.ok()) << target.status();
    for (const char* text : {"qmatmul M=9 N=32 K=40 a_zero=131 bias=1 per_channel=1 out_zero=100 dtype=u8s8u8",
                             "qmatmul M=8 N=16 K=64 bias=1 dtype=u8s8s32",
                             "qconv2d N=1 C=16 H=6 W=6 K=32 R=3 S=3 stride=1 pad=1 a_zero=128 bias=1 per_channel=1 "
                             "out_zero=3 dtype=u8s8u8",
                             "qdepthwise_conv2d N=1 C=16 H=6 W=6 R=3 S=3 stride=1 pad=1 a_zero=7 per_channel=1 "
                             "dtype=u8s8f32"}) {
      auto task = ParseTask(text);
      ASSERT_TRUE(task.ok()) << task.status();
      const Template* tmpl = *FindTemplate(*task);
      std::vector<Config> configs = {tmpl->Naive(*task, *target)};
      std::vector<Config> heuristics = tmpl->Heuristics(*task, *target);
      if (!heuristics.empty()) configs.push_back(heuristics[0]);
      for (const Config& c : configs) {
        SCOPED_TRACE(device.target + " " + task->CanonicalText() + " " + c.ToJson());
        ExpectTypedCorrectOnDevice(device, *target, *task, c, dir->path());
        if (::testing::Test::HasFatalFailure()) return;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 5 * 4 * 2);
}

}  // namespace
}  // namespace tuneforge
