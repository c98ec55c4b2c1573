// tuneforge-server's command line and config file.
#include "server/server_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "compiler/support/status.h"

namespace tuneforge {

const char* const kServerUsage =
    "usage: tuneforge-server [--config FILE] [--listen HOST:PORT] [--db PATH]\n"
    "                        [--builder-threads N] [--tokens FILE]\n"
    "                        [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
    "                        [--metrics-listen HOST:PORT]\n"
    "                        [--max-receive-message-bytes N] [--max-send-message-bytes N]\n"
    "                        [--max-redispatch R] [--heartbeat-ms MS]\n"
    "                        [--lease-grace-ms MS] [--golden-interval-s S]\n"
    "                        [--no-golden-check]\n"
    "                        [--verbose | --quiet] [--log-format text|json]\n"
    "  Runs the tuneforge service: TuningService for users, AgentService for\n"
    "  tuneforge-agent processes, tuning log in a SQLite file.\n"
    "  --config           YAML file with any of the settings below (docs/operations.md);\n"
    "                     flags override it\n"
    "  --listen           address to serve on (default 127.0.0.1:7070; port 0 = any free)\n"
    "  --db               tuning-log database (default tuneforge.db)\n"
    "  --builder-threads  LLVM build threads (default: one per core)\n"
    "  --tokens           tokens file: lines 'ROLE NAME TOKEN', roles agent/user/admin;\n"
    "                     every RPC then needs a token (default: none, loopback only)\n"
    "  --tls-cert/--tls-key  serve TLS with this PEM certificate chain and key\n"
    "  --tls-client-ca FILE  agents must present a client certificate signed by this CA\n"
    "                        (mutual TLS); their registrations are bound to it\n"
    "  --metrics-listen   serve /metrics (Prometheus) and /healthz over plain HTTP on\n"
    "                     this address, e.g. 127.0.0.1:9090 (default: off)\n"
    "  --max-receive-message-bytes, --max-send-message-bytes\n"
    "                     gRPC message size limits, e.g. 256MiB (default 256MiB each;\n"
    "                     1MiB..2GiB-1)\n"
    "  --max-model-bytes  the largest ONNX model a client may upload (tune --model\n"
    "                     --detach), e.g. 2GiB (default 1GiB; 1MiB..64GiB); models are\n"
    "                     kept in <db>.models/ by their SHA-256\n"
    "  --max-redispatch   a MeasureRequest whose agent is lost (disconnected, or its\n"
    "                     lease expired) goes to another agent at most R times, then\n"
    "                     is recorded as agent_lost (default 2, 0..10)\n"
    "  --heartbeat-ms     agents' heartbeat interval; an agent silent for 3 intervals\n"
    "                     is lost and its leases expire (default 2000, 50..60000)\n"
    "  --lease-grace-ms   a lease also expires at the request's timeout plus this\n"
    "                     (default 10000)\n"
    "  --golden-interval-s  re-run the golden kernel on every agent this often (default\n"
    "                     600; 0: only when an agent connects). An agent with a wrong\n"
    "                     golden result, or more than 3x slower than the median of its\n"
    "                     peers (twice), is quarantined\n"
    "  --no-golden-check  trust agents: no golden kernel at all (simulated agents)\n"
    "  --log-format       text (default) or json: one JSON object per log line with\n"
    "                     ts, level, component, msg\n";

absl::StatusOr<int64_t> ParseByteSize(const std::string& text, int64_t lo, int64_t hi) {
  std::string t(absl::StripAsciiWhitespace(text));
  int64_t unit = 1;
  for (const auto& [suffix, factor] : std::vector<std::pair<std::string, int64_t>>{
           {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20}, {"GiB", int64_t{1} << 30}, {"B", 1}}) {
    if (absl::EndsWith(t, suffix)) {
      t = std::string(absl::StripAsciiWhitespace(t.substr(0, t.size() - suffix.size())));
      unit = factor;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(t, &n) || n < 0 || n > hi / unit || n * unit < lo) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a size between ", lo, " and ", hi, " bytes (e.g. 256MiB)"));
  }
  return n * unit;
}

namespace {

absl::Status ConfigError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError("config " + path + ": " + what);
}

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& s) {
  if (s == "error") return LogLevel::kError;
  if (s == "warning") return LogLevel::kWarning;
  if (s == "info") return LogLevel::kInfo;
  if (s == "debug") return LogLevel::kDebug;
  return absl::InvalidArgumentError("log_level must be error, warning, info or debug, got '" + s + "'");
}

// A scalar setting as text; an error for maps, lists and nulls.
absl::StatusOr<std::string> Scalar(const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) return absl::InvalidArgumentError("'" + key + "' must be a single value");
  return node.Scalar();
}

// Sets one of the farm's integer settings (leases, heartbeats, golden kernel) and
// checks it with DispatchOptions / HealthOptions::Validate. `name` is the flag or key.
absl::Status SetFarmSetting(const std::string& setting, const std::string& name,
                            const std::string& text, ServerOptions* options) {
  int n = 0;
  if (!absl::SimpleAtoi(text, &n)) {
    return absl::InvalidArgumentError(name + " needs an integer, got '" + text + "'");
  }
  absl::Status valid;
  if (setting == "golden_interval_s") {
    options->health.interval_s = n;
    valid = options->health.Validate();
  } else {
    if (setting == "max_redispatch") options->dispatch.max_redispatch = n;
    if (setting == "heartbeat_ms") options->dispatch.heartbeat_interval_ms = n;
    if (setting == "lease_grace_ms") options->dispatch.lease_grace_ms = n;
    valid = options->dispatch.Validate();
  }
  if (!valid.ok()) return absl::InvalidArgumentError(name + ": " + std::string(valid.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(const std::string& s) {
  if (s == "text") return LogFormat::kText;
  if (s == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError("--log-format must be text or json, got '" + s + "'");
}

absl::Status LoadServerConfig(const std::string& path, ServerCommandLine* cl) {
  ServerOptions* options = &cl->options;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError("cannot read config file " + path);
  } catch (const YAML::Exception& e) {
    return ConfigError(path, std::string("not valid YAML: ") + e.what());
  }
  if (root.IsNull()) return absl::OkStatus();  // an empty file changes nothing
  if (!root.IsMap()) return ConfigError(path, "expected a mapping of settings (key: value)");
  const std::filesystem::path base = std::filesystem::absolute(path).parent_path();
  auto file_path = [&](const std::string& p) {
    return p.empty() ? p : (base / p).lexically_normal().string();
  };
  static const std::set<std::string> kKeys = {"listen",         "db",          "tokens",
                                              "tls_cert",       "tls_key",     "tls_client_ca",
                                              "metrics_listen",
                                              "builder_threads", "log_level",  "log_format",
                                              "grpc",           "max_redispatch", "heartbeat_ms",
                                              "lease_grace_ms", "golden_interval_s",
                                              "golden_check",   "max_model_bytes"};
  // A secret's or certificate's path must name a file: `tokens: ""` (or a bare
  // `tokens:`) would otherwise leave the server open while its config says it is not.
  auto secret_path = [&](const std::string& key, const std::string& value,
                         std::string* out) -> absl::Status {
    if (value.empty()) {
      return ConfigError(path, key + " must name a file (remove the key to run without it)");
    }
    *out = file_path(value);
    return absl::OkStatus();
  };
  std::set<std::string> seen;
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      // yaml-cpp keeps one of two equal keys silently; which one the operator meant
      // cannot be known.
      if (!seen.insert(key).second) return ConfigError(path, "key '" + key + "' is given twice");
      if (!kKeys.count(key)) {
        return ConfigError(path, "unknown key '" + key + "' (known: builder_threads, db, "
                                 "golden_check, golden_interval_s, grpc, heartbeat_ms, "
                                 "lease_grace_ms, listen, log_format, log_level, max_redispatch, "
                                 "metrics_listen, tls_cert, tls_client_ca, tls_key, tokens)");
      }
      if (key == "grpc") {
        if (!kv.second.IsMap()) {
          return ConfigError(path, "'grpc' must be a mapping {max_receive_message_bytes, "
                                   "max_send_message_bytes}");
        }
        std::set<std::string> seen_grpc;
        for (const auto& g : kv.second) {
          const std::string gkey = g.first.as<std::string>();
          if (!seen_grpc.insert(gkey).second) {
            return ConfigError(path, "key 'grpc." + gkey + "' is given twice");
          }
          int* target = gkey == "max_receive_message_bytes" ? &options->max_receive_message_bytes
                        : gkey == "max_send_message_bytes"  ? &options->max_send_message_bytes
                                                            : nullptr;
          if (!target) return ConfigError(path, "unknown key 'grpc." + gkey + "'");
          absl::StatusOr<std::string> text = Scalar(g.second, "grpc." + gkey);
          if (!text.ok()) return ConfigError(path, std::string(text.status().message()));
          absl::StatusOr<int64_t> bytes = ParseByteSize(*text, kMinMessageBytes, kMaxMessageBytes);
          if (!bytes.ok()) return ConfigError(path, "grpc." + gkey + ": " + std::string(bytes.status().message()));
          *target = static_cast<int>(*bytes);
        }
        continue;
      }
      if (kv.second.IsNull() && (key == "tokens" || key == "tls_cert" || key == "tls_key" ||
                                 key == "tls_client_ca")) {
        return ConfigError(path, key + " must name a file (remove the key to run without it)");
      }
      absl::StatusOr<std::string> value = Scalar(kv.second, key);
      if (!value.ok()) return ConfigError(path, std::string(value.status().message()));
      if (key == "listen" || key == "metrics_listen") {
        absl::Status st = CheckAddress(*value);
        if (!st.ok()) return ConfigError(path, key + ": " + std::string(st.message()));
        (key == "listen" ? options->listen : options->metrics_listen) = *value;
      } else if (key == "db") {
        if (value->empty()) return ConfigError(path, "db must not be empty");
        options->db_path = file_path(*value);
      } else if (key == "tokens") {
        RETURN_IF_ERROR(secret_path(key, *value, &options->tokens_path));
      } else if (key == "tls_cert") {
        RETURN_IF_ERROR(secret_path(key, *value, &options->tls_cert_path));
      } else if (key == "tls_key") {
        RETURN_IF_ERROR(secret_path(key, *value, &options->tls_key_path));
      } else if (key == "tls_client_ca") {
        RETURN_IF_ERROR(secret_path(key, *value, &options->tls_client_ca_path));
      } else if (key == "max_model_bytes") {
        absl::StatusOr<int64_t> bytes = ParseByteSize(*value, kMinModelBytes, kMaxModelBytes);
        if (!bytes.ok()) return ConfigError(path, "max_model_bytes: " + std::string(bytes.status().message()));
        options->max_model_bytes = *bytes;
      } else if (key == "builder_threads") {
        int n = 0;
        if (!absl::SimpleAtoi(*value, &n) || n < 0 || n > 256) {
          return ConfigError(path, "builder_threads must be 0 (one per core) .. 256, got '" + *value + "'");
        }
        options->builder_threads = n;
      } else if (key == "max_redispatch" || key == "heartbeat_ms" || key == "lease_grace_ms" ||
                 key == "golden_interval_s") {
        absl::Status st = SetFarmSetting(key, key, *value, options);
        if (!st.ok()) return ConfigError(path, std::string(st.message()));
      } else if (key == "golden_check") {
        if (*value != "true" && *value != "false") {
          return ConfigError(path, "golden_check must be true or false, got '" + *value + "'");
        }
        options->golden_check = *value == "true";
      } else if (key == "log_level") {
        absl::StatusOr<LogLevel> level = ParseLogLevel(*value);
        if (!level.ok()) return ConfigError(path, std::string(level.status().message()));
        cl->log_level = *level;
      } else if (key == "log_format") {
        absl::StatusOr<LogFormat> format = ParseLogFormat(*value);
        if (!format.ok()) {
          return ConfigError(path, "log_format must be text or json, got '" + *value + "'");
        }
        cl->log_format = *format;
      }
    }
  } catch (const YAML::Exception& e) {
    return ConfigError(path, std::string("bad value: ") + e.what());
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerCommandLine> ParseServerCommandLine(const std::vector<std::string>& args) {
  ServerCommandLine cl;
  // The file first, so that every flag overrides it wherever it stands.
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      cl.help = true;
      return cl;
    }
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config needs a file");
      RETURN_IF_ERROR(LoadServerConfig(args[i + 1], &cl));
      ++i;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* what) -> absl::StatusOr<std::string> {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(a + " needs " + what);
      return args[++i];
    };
    if (a == "--config") {
      ++i;  // applied above
    } else if (a == "--listen") {
      ASSIGN_OR_RETURN(cl.options.listen, value("HOST:PORT"));
    } else if (a == "--db") {
      ASSIGN_OR_RETURN(cl.options.db_path, value("a value"));
    } else if (a == "--tls-cert") {
      ASSIGN_OR_RETURN(cl.options.tls_cert_path, value("a file"));
      if (cl.options.tls_cert_path.empty()) return absl::InvalidArgumentError("--tls-cert needs a file, got ''");
    } else if (a == "--tls-key") {
      ASSIGN_OR_RETURN(cl.options.tls_key_path, value("a file"));
      if (cl.options.tls_key_path.empty()) return absl::InvalidArgumentError("--tls-key needs a file, got ''");
    } else if (a == "--tls-client-ca") {
      ASSIGN_OR_RETURN(cl.options.tls_client_ca_path, value("a file"));
      if (cl.options.tls_client_ca_path.empty()) return absl::InvalidArgumentError("--tls-client-ca needs a file, got ''");
    } else if (a == "--tokens") {
      ASSIGN_OR_RETURN(cl.options.tokens_path, value("a file"));
      if (cl.options.tokens_path.empty()) return absl::InvalidArgumentError("--tokens needs a file, got ''");
    } else if (a == "--metrics-listen") {
      ASSIGN_OR_RETURN(cl.options.metrics_listen, value("HOST:PORT, e.g. 127.0.0.1:9090"));
      if (cl.options.metrics_listen.empty())
        return absl::InvalidArgumentError("--metrics-listen needs HOST:PORT, e.g. 127.0.0.1:9090");
    } else if (a == "--builder-threads") {
      ASSIGN_OR_RETURN(std::string v, value("a number 1..256"));
      if (!absl::SimpleAtoi(v, &cl.options.builder_threads) || cl.options.builder_threads < 1 ||
          cl.options.builder_threads > 256)
        return absl::InvalidArgumentError("--builder-threads needs a number 1..256");
    } else if (a == "--max-receive-message-bytes" || a == "--max-send-message-bytes") {
      ASSIGN_OR_RETURN(std::string v, value("a size, e.g. 256MiB"));
      absl::StatusOr<int64_t> bytes = ParseByteSize(v, kMinMessageBytes, kMaxMessageBytes);
      if (!bytes.ok()) return absl::InvalidArgumentError(a + ": " + std::string(bytes.status().message()));
      (a == "--max-receive-message-bytes" ? cl.options.max_receive_message_bytes
                                           : cl.options.max_send_message_bytes) = static_cast<int>(*bytes);
    } else if (a == "--max-model-bytes") {
      ASSIGN_OR_RETURN(std::string v, value("a size, e.g. 1GiB"));
      absl::StatusOr<int64_t> bytes = ParseByteSize(v, kMinModelBytes, kMaxModelBytes);
      if (!bytes.ok()) return absl::InvalidArgumentError(a + ": " + std::string(bytes.status().message()));
      cl.options.max_model_bytes = *bytes;
    } else if (a == "--max-redispatch" || a == "--heartbeat-ms" || a == "--lease-grace-ms" ||
               a == "--golden-interval-s") {
      ASSIGN_OR_RETURN(std::string v, value("an integer"));
      std::string setting = a.substr(2);
      std::replace(setting.begin(), setting.end(), '-', '_');
      RETURN_IF_ERROR(SetFarmSetting(setting, a, v, &cl.options));
    } else if (a == "--no-golden-check") {
      cl.options.golden_check = false;
    } else if (a == "--log-format") {
      ASSIGN_OR_RETURN(std::string v, value("text or json"));
      ASSIGN_OR_RETURN(cl.log_format, ParseLogFormat(v));
    } else if (a == "--verbose") {
      cl.log_level = LogLevel::kDebug;
    } else if (a == "--quiet") {
      cl.log_level = LogLevel::kWarning;
    } else {
      return absl::InvalidArgumentError("unknown argument '" + a + "' (see --help)");
    }
  }
  return cl;
}

}  // namespace tuneforge
