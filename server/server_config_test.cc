// The server's config file and command line: every setting, precedence of flags
// over the file, and clear errors for bad files.
#include "server/server_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tuneforge {
namespace {

class ServerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tf_server_config_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text) {
    std::string path = (dir_ / ("c" + std::to_string(n_++) + ".yaml")).string();
    std::ofstream(path) << text;
    return path;
  }
  // The error of a config file, or "" when it loads.
  std::string Error(const std::string& text) {
    auto cl = ParseServerCommandLine({"--config", Write(text)});
    return cl.ok() ? "" : std::string(cl.status().message());
  }

  std::filesystem::path dir_;
  int n_ = 0;
};

TEST_F(ServerConfigTest, EverySettingIsRead) {
  std::string path = Write(
      "listen: 127.0.0.1:7171\n"
      "db: state/tf.db\n"
      "tokens: /etc/tuneforge/tokens\n"
      "tls_cert: tls.crt\n"
      "tls_key: tls.key\n"
      "metrics_listen: 127.0.0.1:9191\n"
      "builder_threads: 3\n"
      "max_model_bytes: 2GiB\n"
      "log_level: debug\n"
      "log_format: json\n"
      "grpc:\n"
      "  max_receive_message_bytes: 64MiB\n"
      "  max_send_message_bytes: 2097152\n");
  auto cl = ParseServerCommandLine({"--config", path});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const ServerOptions& o = cl->options;
  EXPECT_EQ(o.listen, "127.0.0.1:7171");
  EXPECT_EQ(o.db_path, (dir_ / "state/tf.db").string());  // relative to the file
  EXPECT_EQ(o.tokens_path, "/etc/tuneforge/tokens");
  EXPECT_EQ(o.tls_cert_path, (dir_ / "tls.crt").string());
  EXPECT_EQ(o.tls_key_path, (dir_ / "tls.key").string());
  EXPECT_EQ(o.metrics_listen, "127.0.0.1:9191");
  EXPECT_EQ(o.builder_threads, 3);
  EXPECT_EQ(o.max_model_bytes, int64_t{2} << 30);
  EXPECT_EQ(o.max_receive_message_bytes, 64 << 20);
  EXPECT_EQ(o.max_send_message_bytes, 2 << 20);
  ASSERT_TRUE(cl->log_level.has_value());
  EXPECT_EQ(*cl->log_level, LogLevel::kDebug);
  EXPECT_EQ(cl->log_format, LogFormat::kJson);
}

TEST_F(ServerConfigTest, FlagsOverrideTheFileWhereverTheyStand) {
  std::string path = Write("listen: 127.0.0.1:7171\ndb: a.db\nmetrics_listen: 127.0.0.1:9191\n"
                           "log_level: debug\ngrpc: {max_send_message_bytes: 8MiB}\n");
  auto cl = ParseServerCommandLine({"--listen", "127.0.0.1:0", "--config", path,
                                    "--max-send-message-bytes", "16MiB", "--quiet"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.listen, "127.0.0.1:0");                   // flag before --config
  EXPECT_EQ(cl->options.db_path, (dir_ / "a.db").string());       // only in the file
  EXPECT_EQ(cl->options.metrics_listen, "127.0.0.1:9191");
  EXPECT_EQ(cl->options.max_send_message_bytes, 16 << 20);        // flag after --config
  EXPECT_EQ(cl->options.max_receive_message_bytes, 256 << 20);    // default
  EXPECT_EQ(*cl->log_level, LogLevel::kWarning);
  auto text = ParseServerCommandLine({"--config", path, "--log-format", "text"});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->log_format, LogFormat::kText);
  // Without a file: the defaults.
  auto plain = ParseServerCommandLine({});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->options.listen, "127.0.0.1:7070");
  EXPECT_EQ(plain->options.metrics_listen, "");
  EXPECT_FALSE(plain->log_level.has_value());
}

TEST_F(ServerConfigTest, BadFilesAreClearErrors) {
  EXPECT_NE(Error("listen: 127.0.0.1:1\nlisten_port: 3\n").find("unknown key 'listen_port'"),
            std::string::npos);
  EXPECT_NE(Error("grpc:\n  max_message_bytes: 1MiB\n").find("unknown key 'grpc.max_message_bytes'"),
            std::string::npos);
  EXPECT_NE(Error("listen: [1, 2]\n").find("'listen' must be a single value"), std::string::npos);
  EXPECT_NE(Error("listen: nowhere\n").find("listen: address 'nowhere' is not HOST:PORT"),
            std::string::npos);
  EXPECT_NE(Error("metrics_listen: 1.2.3.4:99999\n").find("metrics_listen"), std::string::npos);
  EXPECT_NE(Error("builder_threads: lots\n").find("builder_threads must be"), std::string::npos);
  EXPECT_NE(Error("max_model_bytes: 100\n").find("max_model_bytes: "), std::string::npos);
  EXPECT_NE(Error("log_level: loud\n").find("log_level must be"), std::string::npos);
  EXPECT_NE(Error("log_format: xml\n").find("log_format must be text or json"), std::string::npos);
  EXPECT_NE(Error("grpc: 5\n").find("'grpc' must be a mapping"), std::string::npos);
  EXPECT_NE(Error("grpc: {max_receive_message_bytes: 1KiB}\n").find("is not a size between 1048576"),
            std::string::npos);
  EXPECT_NE(Error("grpc: {max_send_message_bytes: 3GiB}\n").find("max_send_message_bytes"),
            std::string::npos);
  EXPECT_NE(Error("grpc: {max_send_message_bytes: -5}\n").find("not a size"), std::string::npos);
  EXPECT_NE(Error("- listen\n").find("expected a mapping"), std::string::npos);
  EXPECT_NE(Error("listen: [unclosed\n").find("not valid YAML"), std::string::npos);
  EXPECT_EQ(Error(""), "");  // empty: nothing changes
  auto missing = ParseServerCommandLine({"--config", (dir_ / "nope.yaml").string()});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("cannot read config file"), std::string::npos);
  auto no_value = ParseServerCommandLine({"--config"});
  EXPECT_FALSE(no_value.ok());
  // Every error names the file.
  std::string path = Write("colour: blue\n");
  auto named = ParseServerCommandLine({"--config", path});
  ASSERT_FALSE(named.ok());
  EXPECT_NE(std::string(named.status().message()).find(path), std::string::npos);
}

// A config that names no secret where a key for one stands must not start an open
// server; a key given twice is an error (yaml-cpp would keep one of them silently).
TEST_F(ServerConfigTest, EmptySecretPathsAndDuplicateKeysAreErrors) {
  for (const char* key : {"tokens", "tls_cert", "tls_key", "tls_client_ca"}) {
    const std::string k(key);
    EXPECT_NE(Error(k + ": \"\"\n").find(k + " must name a file"), std::string::npos) << k;
    EXPECT_NE(Error(k + ":\n").find(k + " must name a file"), std::string::npos) << k;
  }
  EXPECT_NE(Error("tokens: a\nlisten: 127.0.0.1:1\ntokens: \"\"\n").find("key 'tokens' is given twice"),
            std::string::npos);
  EXPECT_NE(Error("grpc:\n  max_send_message_bytes: 2MiB\n  max_send_message_bytes: 4MiB\n")
                .find("'grpc.max_send_message_bytes' is given twice"),
            std::string::npos);
  for (const char* flag : {"--tokens", "--tls-cert", "--tls-key", "--tls-client-ca"}) {
    auto cl = ParseServerCommandLine({flag, ""});
    ASSERT_FALSE(cl.ok()) << flag;
    EXPECT_NE(std::string(cl.status().message()).find("needs a file"), std::string::npos) << flag;
  }
}

TEST_F(ServerConfigTest, BadFlagsAreClearErrors) {
  auto bad_size = ParseServerCommandLine({"--max-receive-message-bytes", "huge"});
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(std::string(bad_size.status().message()).find("--max-receive-message-bytes"),
            std::string::npos);
  EXPECT_FALSE(ParseServerCommandLine({"--builder-threads", "0"}).ok());
  EXPECT_FALSE(ParseServerCommandLine({"--listen"}).ok());
  EXPECT_FALSE(ParseServerCommandLine({"--frobnicate"}).ok());
  EXPECT_FALSE(ParseServerCommandLine({"--log-format", "yaml"}).ok());
  EXPECT_TRUE(ParseServerCommandLine({"--help"})->help);
}

TEST(ByteSizeTest, Units) {
  EXPECT_EQ(*ParseByteSize("1048576", 0, kMaxMessageBytes), 1048576);
  EXPECT_EQ(*ParseByteSize("256MiB", 0, kMaxMessageBytes), 256 << 20);
  EXPECT_EQ(*ParseByteSize("64 KiB", 0, kMaxMessageBytes), 64 << 10);
  EXPECT_EQ(*ParseByteSize("1GiB", 0, kMaxMessageBytes), 1 << 30);
  EXPECT_FALSE(ParseByteSize("2GiB", 0, kMaxMessageBytes).ok());  // over int32
  EXPECT_FALSE(ParseByteSize("1.5MiB", 0, kMaxMessageBytes).ok());
  EXPECT_FALSE(ParseByteSize("", 0, kMaxMessageBytes).ok());
}

}  // namespace
}  // namespace tuneforge

namespace tuneforge {
namespace {

TEST(ServerConfigExampleTest, TheShippedExampleLoads) {
  auto cl = ParseServerCommandLine({"--config", TF_SERVER_YAML});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.listen, "127.0.0.1:7070");
  EXPECT_EQ(cl->options.db_path, "/var/lib/tuneforge/tuneforge.db");
  EXPECT_EQ(cl->options.metrics_listen, "127.0.0.1:9090");
  EXPECT_EQ(cl->options.max_send_message_bytes, 256 << 20);
}

}  // namespace
}  // namespace tuneforge
