// libFuzzer target: the server's YAML config file (`tuneforge-server --config`).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "server/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tuneforge_fuzz_config_" + std::to_string(getpid()) + ".yaml";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  tuneforge::ServerCommandLine cl;
  (void)tuneforge::LoadServerConfig(path, &cl);
  return 0;
}
