// Loading kernel shared objects into this process (dlopen) and finding their entries.
#include "compiler/runtime/module_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace tuneforge::runtime {

std::unique_ptr<LoadedModule> LoadedModule::LoadFile(const std::string& path,
                                                     const std::string& entry_symbol,
                                                     std::string* error) {
  std::unique_ptr<LoadedModule> m(new LoadedModule());
  m->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m->handle_) {
    *error = std::string("dlopen failed: ") + dlerror();
    return nullptr;
  }
  m->entry_ = reinterpret_cast<KernelEntry>(dlsym(m->handle_, entry_symbol.c_str()));
  if (!m->entry_) {
    *error = "entry symbol " + entry_symbol + " not found";
    return nullptr;
  }
  // Optional: absent for kernels without prepack statements.
  m->prepack_ =
      reinterpret_cast<KernelEntry>(dlsym(m->handle_, (entry_symbol + "_prepack").c_str()));
  m->unpack_ = reinterpret_cast<KernelEntry>(dlsym(m->handle_, (entry_symbol + "_unpack").c_str()));
  return m;
}

std::unique_ptr<LoadedModule> LoadedModule::Load(const std::string& shared_object,
                                                 const std::string& entry_symbol,
                                                 std::string* error) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/tuneforge-kernel-XXXXXX";
  if (!mkdtemp(templ.data())) {
    *error = "cannot create a temporary directory under " + templ;
    return nullptr;
  }
  std::string path = templ + "/kernel.so";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(shared_object.data(), static_cast<std::streamsize>(shared_object.size()));
    if (!out) {
      *error = "cannot write " + path;
      std::remove(path.c_str());
      rmdir(templ.c_str());
      return nullptr;
    }
  }
  std::unique_ptr<LoadedModule> m = LoadFile(path, entry_symbol, error);
  // The mapping stays valid after the file is gone.
  std::remove(path.c_str());
  rmdir(templ.c_str());
  return m;
}

LoadedModule::~LoadedModule() {
  if (handle_) dlclose(handle_);
}

}  // namespace tuneforge::runtime
