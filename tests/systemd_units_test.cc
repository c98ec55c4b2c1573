// The service units in deploy/systemd pass `systemd-analyze verify` with no
// complaint (unknown keys and bad values only warn, so any output fails the test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/process_util.h"

namespace tuneforge {
namespace {

using testing::ReadFile;
using testing::RunCommand;

const std::string kUnits = TF_UNITS_DIR;
const std::string kBin = TF_BIN_DIR;

class SystemdUnitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_units_" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Copies a unit, pointing it at the binaries of this build, with optional edits.
  std::string Stage(const std::string& unit, const std::string& from = "", const std::string& to = "") {
    std::string text = ReadFile(kUnits + "/" + unit);
    for (size_t p; (p = text.find("/usr/local/bin")) != std::string::npos;) text.replace(p, 14, kBin);
    if (!from.empty()) text.replace(text.find(from), from.size(), to);
    std::string path = dir_ + "/" + unit;
    std::ofstream(path) << text;
    return path;
  }

  testing::CommandResult Verify(const std::vector<std::string>& units) {
    std::vector<std::string> argv = {"systemd-analyze", "verify", "--man=no"};
    argv.insert(argv.end(), units.begin(), units.end());
    return RunCommand(argv, dir_);
  }

  std::string dir_;
};

TEST_F(SystemdUnitsTest, AllUnitsVerifyCleanly) {
  auto r = Verify({Stage("tuneforge-server.service"), Stage("tuneforge-agent.service"),
                   Stage("tuneforge-nightly.service"), Stage("tuneforge-nightly.timer")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "");
}

// The ExecStart of `unit`, as argv, with this build's binaries, the test's directory
// for /var/lib/tuneforge and the example environment's values.
std::vector<std::string> ExecStart(const std::string& unit, const std::string& state_dir) {
  std::string text = ReadFile(kUnits + "/" + unit);
  size_t at = text.find("\nExecStart=");
  EXPECT_NE(at, std::string::npos) << unit;
  if (at == std::string::npos) return {};
  std::string line = text.substr(at + 11, text.find('\n', at + 1) - at - 11);
  const std::pair<std::string, std::string> substitutions[] = {
      {"/usr/local/bin", kBin},
      {"/var/lib/tuneforge", state_dir},
      {"${TUNEFORGE_LISTEN}", "127.0.0.1:0"},
      {"${TUNEFORGE_SERVER}", "localhost:7070"},
      {"${TUNEFORGE_DEVICE_KEY}", "units-test"}};
  for (const auto& [from, to] : substitutions) {
    for (size_t p; (p = line.find(from)) != std::string::npos;) line.replace(p, from.size(), to);
  }
  std::vector<std::string> argv;
  std::istringstream words(line);
  for (std::string w; words >> w;) argv.push_back(w);
  return argv;
}

bool Contains(const std::vector<std::string>& argv, const std::string& flag,
              const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag && argv[i + 1] == value) return true;
  }
  return false;
}

TEST_F(SystemdUnitsTest, UnitsShipWithTlsAndTokens) {
  std::vector<std::string> server = ExecStart("tuneforge-server.service", dir_);
  EXPECT_TRUE(Contains(server, "--tokens", "/etc/tuneforge/tokens"));
  EXPECT_TRUE(Contains(server, "--tls-cert", "/etc/tuneforge/tls.crt"));
  EXPECT_TRUE(Contains(server, "--tls-key", "/etc/tuneforge/tls.key"));
  std::vector<std::string> agent = ExecStart("tuneforge-agent.service", dir_);
  EXPECT_TRUE(Contains(agent, "--token-file", "/etc/tuneforge/agent.token"));
  EXPECT_TRUE(Contains(agent, "--tls-ca", "/etc/tuneforge/tls.crt"));
  std::vector<std::string> nightly = ExecStart("tuneforge-nightly.service", dir_);
  EXPECT_TRUE(Contains(nightly, "--token-file", "/etc/tuneforge/nightly.token"));
  EXPECT_TRUE(Contains(nightly, "--tls-ca", "/etc/tuneforge/tls.crt"));

  // The binaries take these command lines: without the secret files they stop at the
  // first missing one and name it, not at a flag. The unit's /etc/tuneforge is
  // replaced by an empty scratch directory, so a machine with tuneforge installed
  // (its real /etc/tuneforge) runs the same check.
  const std::string etc = dir_ + "/etc-tuneforge/";
  std::filesystem::create_directories(etc);
  auto scratch = [&](std::vector<std::string> argv) {
    for (std::string& a : argv)
      if (a.rfind("/etc/tuneforge/", 0) == 0) a = etc + a.substr(15);
    return argv;
  };
  auto s = RunCommand(scratch(server), dir_);
  EXPECT_NE(s.exit_code, 0);
  EXPECT_NE(s.err.find("cannot read tokens file " + etc + "tokens"), std::string::npos) << s.err;
  auto a = RunCommand(scratch(agent), dir_);
  EXPECT_NE(a.exit_code, 0);
  EXPECT_NE(a.err.find("cannot read secret file " + etc), std::string::npos) << a.err;
}

TEST_F(SystemdUnitsTest, ATypoIsCaught) {
  // The check itself must be able to fail.
  auto r = Verify({Stage("tuneforge-server.service", "ProtectSystem=strict", "ProtectSytem=strict")});
  EXPECT_NE(r.out + r.err, "");
}

}  // namespace
}  // namespace tuneforge
