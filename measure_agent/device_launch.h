// Measuring on a device through a launcher (issue 21): instead of loading the kernel
// in a sandbox child on this machine, the agent runs the device runner
// (measure_agent/device_runner/device_runner.c, cross-built for the device) through a
// launcher command — `qemu-aarch64 -L /usr/aarch64-linux-gnu` here, `ssh board` or
// `adb shell` on a farm — with the kernel and its input files, reads its one result
// line and the output file back, and checks the output against the request's
// expected output. A launcher or runner that fails, hangs or runs the wrong
// architecture becomes a measurement error, never a speed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tuneforge/v1/common.pb.h"

namespace tuneforge::agent {

struct DeviceLaunch {
  std::vector<std::string> launcher;  // command words before the runner; may be empty
  // The runner's path: as the launcher sees it, or with `push`, on this machine.
  std::string runner;
  // A device that does not see this machine's files (ssh, adb): `push` copies a file
  // to it and `pull` one back, command words in which "{local}" and "{remote}" stand
  // for the two paths (e.g. `scp -q {local} board:{remote}`, `adb push {local}
  // {remote}`); `device_dir` is the directory on the device the runner, kernel and
  // inputs go to (made with `launcher mkdir -p`; one per agent). Empty push: the
  // launcher reads and writes the agent's own directory.
  std::vector<std::string> push, pull;
  std::string device_dir;
};

// Checks a DeviceLaunch made from flags: push, pull and device_dir go together, each
// command names {local} and {remote}, device_dir is absolute.
absl::Status CheckDeviceLaunch(const DeviceLaunch& device);

// Measures `request` on the device within `timeout_ms` (each launcher, push and pull
// command); its files are written to `dir`, which the launcher reads and writes
// directly or, with `push`, which are copied to the device and the output back.
// Fills `result`'s costs or error.
void MeasureOnDevice(const tuneforge::v1::MeasureRequest& request, const DeviceLaunch& device,
                     const std::string& dir, int timeout_ms, tuneforge::v1::MeasureResult* result);

}  // namespace tuneforge::agent
