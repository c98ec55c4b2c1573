// A job's target from its agents' capabilities (server/job_target.h).
#include "server/job_target.h"

#include <gtest/gtest.h>

#include "compiler/codegen/build.h"
#include "compiler/support/files.h"
#include "measure_agent/capabilities.h"

namespace tuneforge {
namespace {

v1::AgentCapabilities Caps(const std::string& triple, const std::string& model,
                           std::vector<std::string> flags, int cores) {
  v1::AgentCapabilities c;
  c.set_triple(triple);
  c.set_cpu_model(model);
  for (const std::string& f : flags) c.add_cpu_flags(f);
  c.set_cores(cores);
  return c;
}

Target Host() {
  return Target{"x86_64-pc-linux-gnu", "znver4",
                "+avx,+avx2,+avx512f,+fma,+sse4.2,-amx-tile,+sse,+sse2", 2, "k"};
}

const std::vector<std::string> kAvx2 = {"sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2",
                                        "popcnt", "avx", "avx2", "fma", "bmi1", "bmi2",
                                        "movbe", "f16c", "cx16", "lahf_lm", "abm"};

TEST(JobTargetTest, NoAgentWaitsAndSaysForWhichKey) {
  JobTarget t = ResolveJobTarget("farm-a", "", {}, Host(), "EPYC");
  EXPECT_FALSE(t.ready);
  EXPECT_EQ(t.waiting, "waiting for an agent with device key 'farm-a'");
}

TEST(JobTargetTest, AnotherMachineGetsItsOwnGenericTargetAndCores) {
  JobTarget t =
      ResolveJobTarget("k", "", {Caps("x86_64-pc-linux-gnu", "Intel Haswell", kAvx2, 8)}, Host(),
                       "AMD EPYC 9B45");
  ASSERT_TRUE(t.ready) << t.waiting;
  EXPECT_EQ(t.target.cpu, "x86-64-v3");
  EXPECT_TRUE(t.target.HasFeature("avx2"));
  EXPECT_FALSE(t.target.HasFeature("avx512f"));  // the server has it; the agent has not
  EXPECT_EQ(t.target.MaxF32Lanes(), 8);
  EXPECT_EQ(t.target.num_threads, 8);
  EXPECT_EQ(t.target.device_key, "k");
  EXPECT_NE(t.target.Key(), Host().Key());
}

TEST(JobTargetTest, MixedAgentsGetWhatTheyAllHave) {
  std::vector<std::string> avx512 = kAvx2;
  for (const char* f : {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})
    avx512.push_back(f);
  JobTarget t = ResolveJobTarget("k", "",
                                 {Caps("x86_64-pc-linux-gnu", "A", avx512, 4),
                                  Caps("x86_64-pc-linux-gnu", "B", kAvx2, 2)},
                                 Host(), "EPYC");
  ASSERT_TRUE(t.ready);
  EXPECT_EQ(t.target.cpu, "x86-64-v3");
  EXPECT_FALSE(t.target.HasFeature("avx512f"));
  EXPECT_EQ(t.target.num_threads, 2);
  JobTarget only512 = ResolveJobTarget("k", "", {Caps("x86_64-pc-linux-gnu", "A", avx512, 4)},
                                       Host(), "EPYC");
  EXPECT_EQ(only512.target.cpu, "x86-64-v4");
  EXPECT_EQ(only512.target.MaxF32Lanes(), 16);

  JobTarget arches = ResolveJobTarget("k", "",
                                      {Caps("x86_64-pc-linux-gnu", "A", kAvx2, 4),
                                       Caps("aarch64-unknown-linux-gnu", "B", {"asimd"}, 4)},
                                      Host(), "EPYC");
  EXPECT_FALSE(arches.ready);
  EXPECT_NE(arches.waiting.find("different architectures"), std::string::npos) << arches.waiting;
}

TEST(JobTargetTest, RequestedTargetTheAgentsCannotRunWaitsAndSaysWhy) {
  std::vector<v1::AgentCapabilities> agents = {Caps("x86_64-pc-linux-gnu", "H", kAvx2, 2)};
  JobTarget t = ResolveJobTarget("k", "llvm -mattr=+avx512f -threads=4", agents, Host(), "EPYC");
  EXPECT_FALSE(t.ready);
  EXPECT_NE(t.waiting.find("that can run target 'llvm -mattr=+avx512f -threads=4'"),
            std::string::npos)
      << t.waiting;
  EXPECT_NE(t.waiting.find("avx512f"), std::string::npos) << t.waiting;
  EXPECT_NE(t.waiting.find("4 threads (they have 2 cores)"), std::string::npos) << t.waiting;

  JobTarget fewer = ResolveJobTarget("k", "llvm -threads=1", agents, Host(), "EPYC");
  ASSERT_TRUE(fewer.ready) << fewer.waiting;
  EXPECT_EQ(fewer.target.num_threads, 1);
  EXPECT_EQ(fewer.target.cpu, "x86-64-v3");
}

TEST(JobTargetTest, SimulatedAgentsWithoutAMachineCountAsTheHost) {
  JobTarget t = ResolveJobTarget("k", "", {Caps("", "simulated", {}, 1)}, Host(), "EPYC");
  ASSERT_TRUE(t.ready);
  EXPECT_EQ(t.target.cpu, "znver4");
  EXPECT_EQ(t.target.num_threads, 2);
}

// On this machine: an agent here reports capabilities that resolve to the host target
// exactly as LLVM detects it, so jobs keep the target key their records have.
TEST(JobTargetTest, AnAgentOnTheServersMachineGetsTheHostTarget) {
  v1::AgentCapabilities here = agent::DetectCapabilities();
  Target host = DetectHostTarget("local");
  std::string model = CpuModelOfCpuInfo(ReadFile("/proc/cpuinfo").value_or(""));
  ASSERT_FALSE(model.empty());
  JobTarget t = ResolveJobTarget("local", "", {here}, host, model);
  ASSERT_TRUE(t.ready) << t.waiting;
  EXPECT_EQ(t.target.cpu, host.cpu) << t.source;
  EXPECT_EQ(t.target.features, host.features);
  EXPECT_EQ(t.target.triple, host.triple);
  EXPECT_EQ(t.target.num_threads, here.cores());
}

TEST(JobTargetTest, CpuInfoModelName) {
  EXPECT_EQ(CpuModelOfCpuInfo("processor\t: 0\nmodel name\t: AMD EPYC 9B45\nflags\t: fpu\n"),
            "AMD EPYC 9B45");
  EXPECT_EQ(CpuModelOfCpuInfo("processor : 0\n"), "");
}

}  // namespace
}  // namespace tuneforge
