// The tuneforge-server command line and its config file.
//
// `tuneforge-server --config FILE` reads a YAML mapping of settings (the keys below;
// an unknown key, a wrong type or a bad value is an error naming the file and the
// key). Flags given on the command line override the file, whatever their order.
// Relative paths in the file are taken from the file's directory.
//
//   listen: 127.0.0.1:7070          # --listen
//   db: /var/lib/tuneforge/tuneforge.db   # --db
//   tokens: /etc/tuneforge/tokens   # --tokens
//   tls_cert: /etc/tuneforge/tls.crt      # --tls-cert (with tls_key)
//   tls_key: /etc/tuneforge/tls.key       # --tls-key
//   tls_client_ca: /etc/tuneforge/agents-ca.crt  # --tls-client-ca (agents' certificates)
//   metrics_listen: 127.0.0.1:9090  # --metrics-listen
//   builder_threads: 2              # --builder-threads
//   log_level: info                 # error|warning|info|debug (--quiet, --verbose)
//   log_format: text                # text|json (--log-format)
//   max_redispatch: 2               # --max-redispatch
//   heartbeat_ms: 2000              # --heartbeat-ms
//   lease_grace_ms: 10000           # --lease-grace-ms
//   golden_interval_s: 600          # --golden-interval-s
//   golden_check: true              # false: --no-golden-check
//   grpc:
//     max_receive_message_bytes: 256MiB   # --max-receive-message-bytes
//     max_send_message_bytes: 256MiB      # --max-send-message-bytes
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/support/log.h"
#include "server/server.h"

namespace tuneforge {

struct ServerCommandLine {
  ServerOptions options;
  std::optional<LogLevel> log_level;  // unset: the default (info)
  LogFormat log_format = LogFormat::kText;
  bool help = false;
};

// Bounds of the gRPC message size limits. The upper one is gRPC's (a signed 32-bit
// size); below 1 MiB artifacts of even small kernels would not fit.
inline constexpr int64_t kMinMessageBytes = 1 << 20;
inline constexpr int64_t kMaxMessageBytes = 2147483647;
// One uploaded model (--max-model-bytes, max_model_bytes).
inline constexpr int64_t kMinModelBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxModelBytes = int64_t{64} << 30;

// "268435456", "256MiB", "64 KiB", "1GiB": a byte count in [lo, hi].
absl::StatusOr<int64_t> ParseByteSize(const std::string& text, int64_t lo, int64_t hi);

// Applies the settings of a config file to `cl` (its options and log settings).
absl::Status LoadServerConfig(const std::string& path, ServerCommandLine* cl);

// The whole command line (argv without the program name): --config first, then
// every flag over it. Errors are one line for the user.
absl::StatusOr<ServerCommandLine> ParseServerCommandLine(const std::vector<std::string>& args);

// The help text of tuneforge-server.
extern const char* const kServerUsage;

}  // namespace tuneforge
