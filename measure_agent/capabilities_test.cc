// Tests of the agent machine's capabilities as sent with Register.
#include "measure_agent/capabilities.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace tuneforge::agent {
namespace {

TEST(CapabilitiesTest, ParsesTheFirstX86ProcessorBlock) {
  const char* text =
      "processor\t: 0\n"
      "vendor_id\t: AuthenticAMD\n"
      "model name\t: AMD EPYC 9654 96-Core Processor\n"
      "flags\t\t: fpu sse2 avx2 fma avx512f\n"
      "\n"
      "processor\t: 1\n"
      "model name\t: something else\n"
      "flags\t\t: fpu\n";
  CpuInfo info = ParseCpuInfo(text);
  EXPECT_EQ(info.model, "AMD EPYC 9654 96-Core Processor");
  EXPECT_EQ(info.flags, (std::vector<std::string>{"fpu", "sse2", "avx2", "fma", "avx512f"}));
}

TEST(CapabilitiesTest, ArmFeaturesAndMissingModel) {
  CpuInfo info = ParseCpuInfo("processor : 0\nFeatures : fp asimd sve\nCPU part : 0xd40\n");
  EXPECT_EQ(info.model, "0xd40");
  EXPECT_EQ(info.flags, (std::vector<std::string>{"fp", "asimd", "sve"}));
  EXPECT_EQ(ParseCpuInfo("").model, "unknown");
}

TEST(CapabilitiesTest, DetectsThisMachine) {
  tuneforge::v1::AgentCapabilities caps = DetectCapabilities();
  EXPECT_EQ(caps.triple(), HostTriple());
  EXPECT_FALSE(caps.cpu_model().empty());
  EXPECT_GE(caps.cores(), 1);
  EXPECT_EQ(caps.agent_version(), AgentVersion());
  EXPECT_FALSE(caps.hostname().empty());

  nlohmann::json env = nlohmann::json::parse(EnvironmentJson(caps));
  EXPECT_EQ(env["cpu_model"], caps.cpu_model());
  EXPECT_EQ(env["agent_version"], AgentVersion());
  EXPECT_EQ(env["hostname"], caps.hostname());
  EXPECT_FALSE(env["kernel_release"].get<std::string>().empty());
}

}  // namespace
}  // namespace tuneforge::agent
