// The service units in deploy/systemd pass `systemd-analyze verify` with no
// complaint (unknown keys and bad values only warn, so any output fails the test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

TEST_F(SystemdUnitsTest, ATypoIsCaught) {
  // The check itself must be able to fail.
  auto r = Verify({Stage("tuneforge-server.service", "ProtectSystem=strict", "ProtectSytem=strict")});
  EXPECT_NE(r.out + r.err, "");
}

}  // namespace
}  // namespace tuneforge
