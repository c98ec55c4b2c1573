// tuneforge-agent's command line.
#include "measure_agent/flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/support/files.h"
#include "compiler/support/rpc_credentials.h"
#include "compiler/support/status.h"

namespace tuneforge::agent {
namespace {

absl::Status IntFlag(const std::string& name, const std::string& value, int min, int max,
                     int* out) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be an integer in [", min, ", ", max, "], got '", value, "'"));
  }
  *out = v;
  return absl::OkStatus();
}

// --pin-cpus and the quiet check, for a measurement on this machine (a device agent
// has neither).
absl::Status ResolvePinning(const std::string& pin_cpus, int quiet_busy_pct, int quiet_wait_ms,
                            int quiet_persistent_after, AgentOptions* agent) {
  if (quiet_busy_pct > 0 && agent->workers > 1) {
    return absl::InvalidArgumentError(
        "--quiet-busy-pct with --workers > 1: the agent's own workers would be the load it "
        "waits for (use --quiet-busy-pct 0, or one worker)");
  }
  if (!agent->device.runner.empty()) return absl::OkStatus();
  const std::vector<int> allowed = AllowedCpus();
  if (pin_cpus == "all") {
    agent->pin_cpus = allowed;
  } else if (pin_cpus != "none") {
    ASSIGN_OR_RETURN(agent->pin_cpus, ParseCpuList(pin_cpus));
    for (int cpu : agent->pin_cpus) {
      if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--pin-cpus ", pin_cpus, ": CPU ", cpu, " is not one this agent may run on (",
            FormatCpuList(allowed), ")"));
      }
    }
  }
  agent->quiet.max_busy = quiet_busy_pct >= 0 ? quiet_busy_pct / 100.0
                          : agent->workers > 1 ? 0
                                               : kDefaultMaxBusy;
  agent->quiet.max_wait_ms = quiet_wait_ms;
  agent->quiet.persistent_after = quiet_persistent_after;
  return absl::OkStatus();
}

}  // namespace

std::string AgentUsage() {
  return R"(usage: tuneforge-agent --server HOST:PORT --device-key KEY [options]

The tuneforge device agent: registers with a tuneforge server, runs the kernels it
sends in a sandboxed child process and streams the measurements back.

  --server HOST:PORT         tuneforge server to register with (required)
  --device-key KEY           device key of this machine, e.g. epyc-znver4 (required)
  --workers N                requests measured at once (default 1; more than 1 makes
                             timings interfere)
  --connect-timeout-s S      give up if the server cannot be reached within S seconds
                             at start-up (default 30); later disconnects are retried
                             forever
  --temp-dir DIR             where sandbox directories are made (default $TMPDIR or
                             /tmp; must not be mounted noexec)
  --tls-ca FILE              verify a TLS server with this PEM certificate (required
                             for a server that is not on loopback, unless --insecure)
  --tls-cert FILE, --tls-key FILE
                             this agent's client certificate and key (PEM), for a
                             server that requires them (--tls-client-ca: mutual TLS)
  --insecure                 allow plaintext to a server that is not on loopback
  --token-file FILE          file holding this agent's token, for a server started
                             with --tokens
  --runner PATH              measure on a device instead of this machine: the device
                             runner built for it (bin/tuneforge-runner-<arch>), as
                             the launcher sees it; needs --device-triple
  --launcher "CMD ARGS"      how to run the runner on the device, e.g.
                             "qemu-aarch64 -L /usr/aarch64-linux-gnu", "ssh board",
                             "adb shell" (default: run it directly); without --push
                             the launcher must see the agent's --temp-dir
  --push "CMD", --pull "CMD" copy a file to / from a device that does not share this
                             machine's files, {local} and {remote} standing for the
                             paths: "scp -q {local} board:{remote}" and
                             "scp -q board:{remote} {local}", or "adb push {local}
                             {remote}" and "adb pull {remote} {local}"; the runner,
                             kernel and inputs go over for every measurement
  --device-dir DIR           with --push: the directory on the device (one per agent)
  --device-triple T          the device's LLVM triple, e.g. aarch64-unknown-linux-gnu
  --device-flags F,F         the device's CPU flags as its /proc/cpuinfo names them,
                             e.g. asimd (NEON) on aarch64; without --runner: this
                             machine, offering only these of its flags (e.g. an
                             AVX2-only agent, target x86-64-v3, on an AVX-512 host)
  --pin-cpus LIST|none       the CPUs kernels run on, e.g. 0-3 or 2,3 (default: all
                             this agent may use), each of a kernel's threads pinned to
                             one of them; the agent keeps to them too, and reports
                             their count as its cores. none: threads left to the
                             scheduler. Ignored for a device (--runner)
  --quiet-busy-pct P         before every measurement wait until other work takes at
                             most P% of those CPUs (over 30 ms), and measure again
                             (up to twice) when it took more during the measurement (default
                             10; 0: no check; with --workers > 1 the default is 0,
                             since the agent's own workers are the load)
  --quiet-wait-ms MS         wait at most this long for quiet, then measure anyway
                             (default 1000, at most 5000: the server leases a request
                             for its timeout plus a grace); every record says what
                             was found
  --quiet-persistent-after N after N measurements in a row found no quiet (every
                             wait ran out, every attempt disturbed), the load is taken
                             as persistent: measure once after one reading, without
                             waiting or measuring again, until a measurement finds the
                             CPUs quiet (default 3; 0: always wait); such records say
                             persistent_load
  --test-slowdown F          fault injection for tests: report costs F times higher
                             (an artificially slower device)
  --test-wrong-answer        fault injection for tests: report every correct kernel
                             as a wrong answer (a device with broken arithmetic)
  --verbose                  log debug messages
  --quiet                    log errors only
  --help                     print this help

SIGTERM or SIGINT: drain — take no new requests, hand the queued ones back to the
server, finish the ones in progress, then exit 0 (a second signal exits at once).
)";
}

absl::StatusOr<AgentFlags> ParseAgentFlags(const std::vector<std::string>& args) {
  AgentFlags flags;
  bool verbose = false, quiet = false;
  std::string pin_cpus = "all";
  int quiet_busy_pct = -1;  // unset: kDefaultMaxBusy, or 0 with --workers > 1
  int quiet_wait_ms = 1000;
  int quiet_persistent_after = 3;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_inline_value = false;
    if (name.rfind("--", 0) == 0) {
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_inline_value = true;
      }
    }
    // Returns the flag's value, from `--flag=value` or the next argument.
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_inline_value) {
        if (value.empty()) return absl::InvalidArgumentError(name + " needs a value");
        return value;
      }
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
        return absl::InvalidArgumentError(name + " needs a value");
      }
      return args[++i];
    };
    auto no_value = [&]() -> absl::Status {
      if (has_inline_value) return absl::InvalidArgumentError(name + " takes no value");
      return absl::OkStatus();
    };

    if (name == "--server") {
      ASSIGN_OR_RETURN(flags.agent.server_address, take_value());
      if (flags.agent.server_address.find(':') == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("--server must be HOST:PORT, got '", flags.agent.server_address, "'"));
      }
    } else if (name == "--device-key") {
      ASSIGN_OR_RETURN(flags.agent.device_key, take_value());
    } else if (name == "--workers") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(IntFlag(name, v, 1, 256, &flags.agent.workers));
    } else if (name == "--pin-cpus") {
      ASSIGN_OR_RETURN(pin_cpus, take_value());
    } else if (name == "--quiet-busy-pct") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(IntFlag(name, v, 0, 100, &quiet_busy_pct));
    } else if (name == "--quiet-wait-ms") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(IntFlag(name, v, 0, 5000, &quiet_wait_ms));
    } else if (name == "--quiet-persistent-after") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(IntFlag(name, v, 0, 1000, &quiet_persistent_after));
    } else if (name == "--connect-timeout-s") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(IntFlag(name, v, 1, 24 * 3600, &flags.agent.connect_timeout_s));
    } else if (name == "--tls-ca") {
      ASSIGN_OR_RETURN(flags.agent.tls_ca, take_value());
    } else if (name == "--tls-cert") {
      ASSIGN_OR_RETURN(flags.agent.tls_cert, take_value());
    } else if (name == "--tls-key") {
      ASSIGN_OR_RETURN(flags.agent.tls_key, take_value());
    } else if (name == "--token-file") {
      ASSIGN_OR_RETURN(std::string path, take_value());
      ASSIGN_OR_RETURN(flags.agent.token, ReadSecretFile(path));
    } else if (name == "--test-slowdown") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      RETURN_IF_ERROR(IntFlag(name, v, 1, 1000, &flags.agent.test_slowdown));
    } else if (name == "--insecure") {
      RETURN_IF_ERROR(no_value());
      flags.agent.insecure = true;
    } else if (name == "--test-wrong-answer") {
      RETURN_IF_ERROR(no_value());
      flags.agent.test_wrong_answer = true;
    } else if (name == "--temp-dir") {
      ASSIGN_OR_RETURN(flags.agent.temp_dir, take_value());
    } else if (name == "--runner") {
      ASSIGN_OR_RETURN(flags.agent.device.runner, take_value());
    } else if (name == "--launcher") {
      ASSIGN_OR_RETURN(std::string launcher, take_value());
      flags.agent.device.launcher = absl::StrSplit(launcher, ' ', absl::SkipEmpty());
      if (flags.agent.device.launcher.empty()) return absl::InvalidArgumentError("--launcher is empty");
    } else if (name == "--push" || name == "--pull") {
      ASSIGN_OR_RETURN(std::string command, take_value());
      (name == "--push" ? flags.agent.device.push : flags.agent.device.pull) =
          absl::StrSplit(command, ' ', absl::SkipEmpty());
    } else if (name == "--device-dir") {
      ASSIGN_OR_RETURN(flags.agent.device.device_dir, take_value());
    } else if (name == "--device-triple") {
      ASSIGN_OR_RETURN(flags.agent.device_triple, take_value());
    } else if (name == "--device-flags") {
      ASSIGN_OR_RETURN(std::string list, take_value());
      flags.agent.device_flags = absl::StrSplit(list, ',', absl::SkipEmpty());
    } else if (name == "--verbose") {
      RETURN_IF_ERROR(no_value());
      verbose = true;
    } else if (name == "--quiet") {
      RETURN_IF_ERROR(no_value());
      quiet = true;
    } else if (name == "--help" || name == "-h") {
      flags.help = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", args[i], "'"));
    }
  }
  if (flags.help) return flags;
  if (verbose && quiet) {
    return absl::InvalidArgumentError("--verbose and --quiet are mutually exclusive");
  }
  if (verbose) flags.log_level = LogLevel::kDebug;
  if (quiet) flags.log_level = LogLevel::kError;
  std::vector<std::string> missing;
  if (flags.agent.server_address.empty()) missing.push_back("--server");
  if (flags.agent.device_key.empty()) missing.push_back("--device-key");
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required flag(s): ", absl::StrJoin(missing, ", ")));
  }
  // A device agent: the runner and the device's triple go together.
  if (flags.agent.device.runner.empty() != flags.agent.device_triple.empty() ||
      (flags.agent.device.runner.empty() && !flags.agent.device.launcher.empty())) {
    return absl::InvalidArgumentError("--runner and --device-triple go together (--launcher only with them)");
  }
  RETURN_IF_ERROR(CheckDeviceLaunch(flags.agent.device));
  RETURN_IF_ERROR(ResolvePinning(pin_cpus, quiet_busy_pct, quiet_wait_ms, quiet_persistent_after, &flags.agent));
  if (flags.agent.device_triple.find('-') == std::string::npos && !flags.agent.device_triple.empty()) {
    return absl::InvalidArgumentError("--device-triple must be an LLVM triple like aarch64-unknown-linux-gnu, got '" +
                                      flags.agent.device_triple + "'");
  }
  // Whichever order the TLS flags came in: all files readable and consistent.
  RETURN_IF_ERROR(
      ClientCredentials(flags.agent.tls_ca, flags.agent.tls_cert, flags.agent.tls_key).status());
  RETURN_IF_ERROR(
      CheckTransport(flags.agent.server_address, flags.agent.tls_ca, flags.agent.insecure));
  return flags;
}

}  // namespace tuneforge::agent
