// Tests of tuneforge-agent's command line: every flag's checks and errors.
#include "measure_agent/flags.h"

#include <gtest/gtest.h>

#include "measure_agent/quiet.h"

namespace tuneforge::agent {
namespace {

absl::StatusOr<AgentFlags> Parse(std::vector<std::string> args) { return ParseAgentFlags(args); }

TEST(AgentFlagsTest, RequiredAndOptionalFlags) {
  absl::StatusOr<AgentFlags> flags =
      Parse({"--server", "localhost:7070", "--device-key=epyc", "--workers", "2",
             "--connect-timeout-s=5", "--temp-dir", "/var/tmp", "--verbose"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->agent.server_address, "localhost:7070");
  EXPECT_EQ(flags->agent.device_key, "epyc");
  EXPECT_EQ(flags->agent.workers, 2);
  EXPECT_EQ(flags->agent.connect_timeout_s, 5);
  EXPECT_EQ(flags->agent.temp_dir, "/var/tmp");
  EXPECT_EQ(flags->log_level, LogLevel::kDebug);
  EXPECT_FALSE(flags->help);
}

TEST(AgentFlagsTest, Defaults) {
  absl::StatusOr<AgentFlags> flags = Parse({"--server", "127.0.0.1:1", "--device-key", "k"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FALSE(flags->agent.insecure);
  EXPECT_EQ(flags->agent.workers, 1);
  EXPECT_EQ(flags->agent.connect_timeout_s, 30);
  EXPECT_EQ(flags->log_level, LogLevel::kInfo);
  EXPECT_EQ(flags->agent.test_slowdown, 1);
  EXPECT_FALSE(flags->agent.test_wrong_answer);
  // Pinned to every CPU it may use, quiet-checked.
  EXPECT_EQ(flags->agent.pin_cpus, AllowedCpus());
  EXPECT_DOUBLE_EQ(flags->agent.quiet.max_busy, 0.10);
  EXPECT_EQ(flags->agent.quiet.max_wait_ms, 1000);
  EXPECT_EQ(flags->agent.quiet.persistent_after, 3);
}

TEST(AgentFlagsTest, PinningAndQuietCheck) {
  const std::vector<int> allowed = AllowedCpus();
  const std::string first = std::to_string(allowed.front());
  absl::StatusOr<AgentFlags> flags =
      Parse({"--server", "127.0.0.1:1", "--device-key", "k", "--pin-cpus", first,
             "--quiet-busy-pct", "20", "--quiet-wait-ms=500", "--quiet-persistent-after", "0"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->agent.quiet.persistent_after, 0);
  EXPECT_EQ(flags->agent.pin_cpus, std::vector<int>{allowed.front()});
  EXPECT_DOUBLE_EQ(flags->agent.quiet.max_busy, 0.20);
  EXPECT_EQ(flags->agent.quiet.max_wait_ms, 500);
  flags = Parse({"--server", "127.0.0.1:1", "--device-key", "k", "--pin-cpus", "none",
                 "--workers", "2"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->agent.pin_cpus.empty());
  EXPECT_EQ(flags->agent.quiet.max_busy, 0);  // its own workers would be the load
  // A device agent measures elsewhere: neither.
  flags = Parse({"--server", "127.0.0.1:1", "--device-key", "k", "--runner", "r",
                 "--device-triple", "aarch64-unknown-linux-gnu"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->agent.pin_cpus.empty());
}

TEST(AgentFlagsTest, RemoteDeviceFlags) {
  absl::StatusOr<AgentFlags> flags =
      Parse({"--server", "127.0.0.1:1", "--device-key", "board", "--runner", "bin/tuneforge-runner-aarch64",
             "--device-triple", "aarch64-unknown-linux-gnu", "--launcher", "ssh board", "--push",
             "scp -q {local} board:{remote}", "--pull", "scp -q board:{remote} {local}", "--device-dir",
             "/tmp/tuneforge"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->agent.device.launcher, (std::vector<std::string>{"ssh", "board"}));
  EXPECT_EQ(flags->agent.device.push,
            (std::vector<std::string>{"scp", "-q", "{local}", "board:{remote}"}));
  EXPECT_EQ(flags->agent.device.pull,
            (std::vector<std::string>{"scp", "-q", "board:{remote}", "{local}"}));
  EXPECT_EQ(flags->agent.device.device_dir, "/tmp/tuneforge");
}

TEST(AgentFlagsTest, FaultInjectionFlags) {
  absl::StatusOr<AgentFlags> flags = Parse(
      {"--server", "[::1]:1", "--device-key", "k", "--test-wrong-answer", "--test-slowdown", "10"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->agent.test_wrong_answer);
  EXPECT_EQ(flags->agent.test_slowdown, 10);
  EXPECT_NE(AgentUsage().find("--test-wrong-answer"), std::string::npos);
}

// Plaintext off loopback needs --insecure (or TLS): tokens and kernels would cross the
// network in the clear.
TEST(AgentFlagsTest, PlaintextOffLoopbackNeedsInsecure) {
  absl::StatusOr<AgentFlags> refused = Parse({"--server", "10.0.0.5:7070", "--device-key", "k"});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--tls-ca"), std::string::npos) << refused.status();
  absl::StatusOr<AgentFlags> allowed =
      Parse({"--server", "10.0.0.5:7070", "--device-key", "k", "--insecure"});
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_TRUE(allowed->agent.insecure);
  for (const char* local : {"localhost:1", "127.0.0.1:1", "127.1.2.3:1", "[::1]:1"})
    EXPECT_TRUE(Parse({"--server", local, "--device-key", "k"}).ok()) << local;
}

TEST(AgentFlagsTest, HelpNeedsNothingElse) {
  absl::StatusOr<AgentFlags> flags = Parse({"--help"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->help);
  EXPECT_NE(AgentUsage().find("--device-key"), std::string::npos);
}

TEST(AgentFlagsTest, ErrorsAreOneLineAndNameTheProblem) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--server", "h:1", "--device-key", "k", "--frobnicate"}, "unknown flag '--frobnicate'"},
      {{"--server", "h:1", "--device-key"}, "--device-key needs a value"},
      {{"--server", "--device-key", "k"}, "--server needs a value"},
      {{"--server", "h:1", "--device-key", "k", "--workers", "0"}, "--workers must be"},
      {{"--server", "h:1", "--device-key", "k", "--workers", "two"}, "--workers must be"},
      {{"--server", "nohostport", "--device-key", "k"}, "HOST:PORT"},
      {{"--device-key", "k"}, "missing required flag(s): --server"},
      {{}, "--server, --device-key"},
      {{"--server", "h:1", "--device-key", "k", "--quiet", "--verbose"}, "mutually exclusive"},
      {{"--server", "h:1", "--device-key", "k", "--quiet=yes"}, "--quiet takes no value"},
      {{"--server", "h:1", "--device-key", "k", "--test-wrong-answer=1"},
       "--test-wrong-answer takes no value"},
      {{"positional"}, "unknown flag 'positional'"},
      {{"--server", "h:1", "--device-key", "k", "--pin-cpus", "0-x"}, "CPU list '0-x'"},
      {{"--server", "h:1", "--device-key", "k", "--pin-cpus", "1000"},
       "--pin-cpus 1000: CPU 1000 is not one this agent may run on"},
      {{"--server", "h:1", "--device-key", "k", "--quiet-persistent-after", "-1"},
       "--quiet-persistent-after must be"},
      {{"--server", "h:1", "--device-key", "k", "--quiet-busy-pct", "101"},
       "--quiet-busy-pct must be an integer in [0, 100]"},
      {{"--server", "h:1", "--device-key", "k", "--quiet-wait-ms", "-1"},
       "--quiet-wait-ms must be"},
      {{"--server", "h:1", "--device-key", "k", "--workers", "2", "--quiet-busy-pct", "20"},
       "--quiet-busy-pct with --workers > 1"},
      {{"--server", "farm.example:7070", "--device-key", "k"},
       "refusing plaintext to farm.example:7070"},
      {{"--server", "10.0.0.5:7070", "--device-key", "k", "--insecure=1"},
       "--insecure takes no value"},
      {{"--server", "h:1", "--device-key", "k", "--tls-ca", "/nonexistent/ca.pem"},
       "--tls-ca /nonexistent/ca.pem: not a readable PEM certificate"},
      {{"--server", "h:1", "--device-key", "k", "--tls-cert", "c.pem"},
       "needs both --tls-cert and --tls-key"},
      {{"--server", "h:1", "--device-key", "k", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
       "--tls-cert/--tls-key need --tls-ca"},
      {{"--server", "h:1", "--device-key", "k", "--runner", "r", "--device-triple", "aarch64-linux-gnu",
        "--push", "scp {local} b:{remote}"},
       "--push, --pull and --device-dir go together"},
      {{"--server", "h:1", "--device-key", "k", "--runner", "r", "--device-triple", "aarch64-linux-gnu",
        "--push", "scp {local} b:", "--pull", "scp b:{remote} {local}", "--device-dir", "/tmp/tf"},
       "--push and --pull must name {local} and {remote}, got 'scp {local} b:'"},
      {{"--server", "h:1", "--device-key", "k", "--runner", "r", "--device-triple", "aarch64-linux-gnu",
        "--push", "scp {local} b:{remote}", "--pull", "scp b:{remote} {local}", "--device-dir", "tf"},
       "--device-dir must be an absolute path on the device, got 'tf'"},
      {{"--server", "h:1", "--device-key", "k", "--push", "cp {local} {remote}", "--pull",
        "cp {remote} {local}", "--device-dir", "/tmp/tf"},
       "--push needs --runner"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<AgentFlags> flags = Parse(c.args);
    ASSERT_FALSE(flags.ok()) << c.message;
    EXPECT_NE(flags.status().message().find(c.message), std::string::npos)
        << flags.status().message();
    EXPECT_EQ(flags.status().message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace tuneforge::agent
