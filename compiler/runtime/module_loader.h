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
  // The kernel's prepack entry `<entry_symbol>_prepack` (ir::LoweredFunc::prepack),
  // when the shared object has one: fills the prepacked buffers from the constant
  // inputs. Call it once after filling the inputs and before Run. 0 when there is none.
  bool has_prepack() const { return prepack_ != nullptr; }
  int32_t Prepack(void** buffers) const { return prepack_ ? prepack_(buffers) : 0; }
  // The output layout transform `<entry_symbol>_unpack`, when present: call it after
  // Run and before reading the output. 0 when there is none.
  bool has_unpack() const { return unpack_ != nullptr; }
  int32_t Unpack(void** buffers) const { return unpack_ ? unpack_(buffers) : 0; }

 private:
  LoadedModule() = default;
  void* handle_ = nullptr;
  KernelEntry entry_ = nullptr;
  KernelEntry prepack_ = nullptr;
  KernelEntry unpack_ = nullptr;
  std::string temp_dir_;  // removed on destruction, when we made it
};

}  // namespace tuneforge::runtime
