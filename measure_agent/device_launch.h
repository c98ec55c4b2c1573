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

#include "tuneforge/v1/common.pb.h"

namespace tuneforge::agent {

struct DeviceLaunch {
  std::vector<std::string> launcher;  // command words before the runner; may be empty
  std::string runner;                 // the runner's path, as the launcher sees it
};

// Measures `request` on the device, its files in `dir` (which the launcher must be
// able to read and write: a local or shared directory), within `timeout_ms`; fills
// `result`'s costs or error.
void MeasureOnDevice(const tuneforge::v1::MeasureRequest& request, const DeviceLaunch& device,
                     const std::string& dir, int timeout_ms, tuneforge::v1::MeasureResult* result);

}  // namespace tuneforge::agent
