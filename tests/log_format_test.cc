// --log-format json: every line the server logs is one JSON object with ts, level,
// component and msg (a real tuneforge-server process), and the line format itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/support/log.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"

namespace tuneforge {
namespace {

using testing::Process;
using testing::RunCommand;

const std::string kBin = TF_BIN_DIR;

TEST(LogFormatTest, JsonLineEscapesAndStamps) {
  // 2026-11-22T06:05:53.123Z
  std::string line = JsonLogLine(1795327553123, LogLevel::kWarning, "ser\"ver",
                                 "a \"quoted\"\\path\nnext\tline \x01 \xc3\xa9");
  nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2026-11-22T06:05:53.123Z");
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["component"], "ser\"ver");
  EXPECT_EQ(j["msg"], "a \"quoted\"\\path\nnext\tline \x01 \xc3\xa9");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(j.size(), 4u);
}

TEST(LogFormatTest, ServerLogsOneJsonObjectPerLine) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("tf_logfmt_" + std::to_string(getpid())))
                        .string();
  std::filesystem::create_directories(dir);
  {
    Process server({kBin + "/tuneforge-server", "--listen", "127.0.0.1:0", "--db", dir + "/l.db",
                    "--log-format", "json", "--verbose"},
                   dir + "/server.out", dir + "/server.err");
    testing::WaitFor([&] { return server.Stdout().find('\n') != std::string::npos; }, std::chrono::seconds(10));
    ASSERT_NE(server.Stdout().find("listening on port"), std::string::npos) << server.Stderr();
    EXPECT_EQ(server.Kill(SIGTERM), 0);
    std::istringstream lines(server.Stderr());
    std::string line;
    int n = 0;
    bool saw_listening = false, saw_shutdown = false;
    while (std::getline(lines, line)) {
      ++n;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(j.is_object()) << "not a JSON object: " << line;
      for (const char* key : {"ts", "level", "component", "msg"}) {
        ASSERT_TRUE(j.contains(key) && j[key].is_string()) << key << " missing in " << line;
      }
      EXPECT_EQ(j["component"], "server") << line;
      EXPECT_NE(std::string(j["level"]).find_first_of("eiwd"), std::string::npos);
      saw_listening |= std::string(j["msg"]).find("tuneforge server listening") != std::string::npos;
      saw_shutdown |= j["msg"] == "shutting down";
    }
    EXPECT_GE(n, 3);
    EXPECT_TRUE(saw_listening) << server.Stderr();
    EXPECT_TRUE(saw_shutdown) << server.Stderr();
  }
  auto bad = RunCommand({kBin + "/tuneforge-server", "--log-format", "xml"}, dir);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--log-format must be text or json"), std::string::npos) << bad.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tuneforge
