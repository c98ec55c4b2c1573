// tuneforge-agent: the device-side daemon (see agent.h), and — when started as
// `tuneforge-agent --sandbox-run DIR` by itself — the sandbox child that runs one
// kernel (see sandbox.h). One binary for both, so the sandbox child is always the
// exact build of the agent that spawned it.

#include <pthread.h>
#include <sys/prctl.h>
#include <sched.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "compiler/support/log.h"
#include "measure_agent/agent.h"
#include "measure_agent/flags.h"
#include "measure_agent/quiet.h"
#include "measure_agent/sandbox.h"

namespace {

// Runs as the sandbox child. Leaves with _Exit: once the result is written, no
// destructor of the loaded kernel (or of ours) may change the outcome.
[[noreturn]] void SandboxChildMain(int argc, char** argv) {
  const bool pin_threads =
      argc == 4 && std::strcmp(argv[3], tuneforge::agent::kPinThreadsFlag) == 0;
  if (argc != 3 && !pin_threads) {
    std::fprintf(stderr, "usage: tuneforge-agent %s DIR [%s] (internal: started by the agent)\n",
                 tuneforge::agent::kSandboxRunFlag, tuneforge::agent::kPinThreadsFlag);
    std::_Exit(2);
  }
  int code = tuneforge::agent::RunSandboxChild(argv[2], pin_threads);
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], tuneforge::agent::kSandboxRunFlag) == 0) {
    SandboxChildMain(argc, argv);
  }

  // No other unprivileged process (a device kernel under qemu-user on this machine
  // among them) may read this one's memory (its token, a device run's nonce) through
  // /proc/<pid>/mem or ptrace. The sandbox child above is exec'd and dumpable again.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  absl::StatusOr<tuneforge::agent::AgentFlags> flags =
      tuneforge::agent::ParseAgentFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    std::fprintf(stderr, "tuneforge-agent: %s (see --help)\n",
                 std::string(flags.status().message()).c_str());
    return 1;
  }
  if (flags->help) {
    std::fputs(tuneforge::agent::AgentUsage().c_str(), stdout);
    return 0;
  }
  tuneforge::SetLogLevel(flags->log_level);
  tuneforge::SetLogPrefix("agent");

  // The agent keeps to the CPUs its kernels are pinned to (before any thread starts,
  // so all inherit it): it then reports their count as its cores, and the kernels'
  // targets get as many threads.
  if (const std::vector<int>& pin = flags->agent.pin_cpus; !pin.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : pin) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      std::fprintf(stderr, "tuneforge-agent: cannot run on CPUs %s: %s\n",
                   tuneforge::agent::FormatCpuList(pin).c_str(), std::strerror(errno));
      return 1;
    }
  }

  // SIGTERM/SIGINT are blocked in every thread (threads inherit the mask, so this
  // comes before any is started) and received by one thread with sigtimedwait, which
  // can then call the non-async-signal-safe Agent::Stop.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  tuneforge::agent::Agent agent(flags->agent);
  std::atomic<bool> done{false};
  std::thread signal_thread([&] {
    int received = 0;
    while (!done.load()) {
      struct timespec poll_interval = {0, 200 * 1000 * 1000};
      int sig = sigtimedwait(&stop_signals, nullptr, &poll_interval);
      if (sig <= 0) continue;
      if (++received == 1) {
        TF_LOG(Info) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
                     << "; finishing the request in progress (send again to exit now)";
        agent.Stop();
      } else {
        // The sandbox child dies with us (PR_SET_PDEATHSIG).
        TF_LOG(Warning) << "second stop signal: exiting now";
        std::_Exit(1);
      }
    }
  });

  absl::Status status = agent.Run();
  done.store(true);
  signal_thread.join();
  if (!status.ok()) {
    TF_LOG(Error) << status.message();
    return 1;
  }
  return 0;
}
