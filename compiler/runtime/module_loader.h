// Loads a kernel shared object (Artifact bytes) into this process: writes it to a
// private temporary file, dlopens it, resolves the entry symbol. The process must
// export the runtime's tf_parallel_for; linking tuneforge_runtime into an executable
// does that (see compiler/runtime/CMakeLists.txt).
#pragma once

#include <memory>
#include <string>

#include "compiler/runtime/runtime.h"

namespace tuneforge::runtime {

// Not thread-safe per instance; instances are independent.
class LoadedModule {
 public:
  // Null with `*error` set on failure (I/O, dlopen, missing symbol).
  static std::unique_ptr<LoadedModule> Load(const std::string& shared_object,
                                            const std::string& entry_symbol, std::string* error);
  // Same, for a .so already on disk (the agent's sandbox writes its own file).
  static std::unique_ptr<LoadedModule> LoadFile(const std::string& path,
                                                const std::string& entry_symbol, std::string* error);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  KernelEntry entry() const { return entry_; }
  int32_t Run(void** buffers) const { return entry_(buffers); }

 private:
  LoadedModule() = default;
  void* handle_ = nullptr;
  KernelEntry entry_ = nullptr;
  std::string temp_dir_;  // removed on destruction, when we made it
};

}  // namespace tuneforge::runtime
