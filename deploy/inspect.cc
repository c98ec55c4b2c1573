// `deploy inspect`: a library's provenance read back, its kernels benchmarked.
#include "deploy/inspect.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <memory>

#include "compiler/reference/reference.h"
#include "compiler/runtime/runtime.h"
#include "compiler/runtime/timing.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "deploy/library_build.h"
#include "nlohmann/json.hpp"

namespace tuneforge {
namespace {

// Mirrors the generated <name>_kernel_info (deploy.cc GenerateHeader).
struct KernelInfo {
  const char* function;
  const char* op;
  const char* task;
  int num_params;
  const int64_t* params;
  int (*run)(void** buffers);
  const char* const* param_names;
};

// Little-endian unsigned integer of `n` bytes at `at` of `bytes` (bounds checked by
// the caller).
uint64_t Le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

}  // namespace

absl::StatusOr<std::string> ReadElfSection(const std::string& path, const std::string& section) {
  // Read, never mapped: a file truncated under us is a short read here, not a SIGBUS.
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(path + ": not a complete 64-bit little-endian ELF library (" + why + ")");
  };
  if (bytes.size() < 64 || bytes.compare(0, 4, "\x7f" "ELF") != 0) return bad("no ELF header");
  if (bytes[4] != 2 || bytes[5] != 1) return bad("not ELF64 little-endian");
  const uint64_t shoff = Le(bytes, 0x28, 8), shentsize = Le(bytes, 0x3A, 2);
  const uint64_t shnum = Le(bytes, 0x3C, 2), shstrndx = Le(bytes, 0x3E, 2);
  if (shentsize < 64 || shnum == 0 || shstrndx >= shnum || shoff > bytes.size() ||
      shnum * shentsize > bytes.size() - shoff) {
    return bad(absl::StrCat("section table at ", shoff, " of ", shnum, " entries is past the end of its ",
                            bytes.size(), " bytes: truncated?"));
  }
  auto header = [&](uint64_t i) { return static_cast<size_t>(shoff + i * shentsize); };
  // A section's [offset, offset + size) inside the file, or an error.
  auto contents = [&](uint64_t i) -> absl::StatusOr<std::pair<size_t, size_t>> {
    const uint64_t type = Le(bytes, header(i) + 4, 4);
    const uint64_t offset = Le(bytes, header(i) + 0x18, 8), size = Le(bytes, header(i) + 0x20, 8);
    if (type == 8) return std::make_pair(size_t{0}, size_t{0});  // SHT_NOBITS: no bytes in the file
    if (offset > bytes.size() || size > bytes.size() - offset) {
      return bad(absl::StrCat("section ", i, " is past the end of the file: truncated?"));
    }
    return std::make_pair(static_cast<size_t>(offset), static_cast<size_t>(size));
  };
  ASSIGN_OR_RETURN(auto names, contents(shstrndx));
  std::optional<std::string> found;
  for (uint64_t i = 0; i < shnum; ++i) {
    ASSIGN_OR_RETURN(auto where, contents(i));  // every section: a truncated file is refused whole
    const uint64_t name = Le(bytes, header(i), 4);
    if (name >= names.second) continue;
    const size_t at = names.first + static_cast<size_t>(name);
    const size_t end = bytes.find('\0', at);
    if (end == std::string::npos || end > names.first + names.second) continue;
    if (bytes.compare(at, end - at, section) == 0 && !found) found = bytes.substr(where.first, where.second);
  }
  if (!found) return absl::NotFoundError(path + " has no " + section + " section");
  return *found;
}

absl::StatusOr<Inspection> InspectLibrary(const std::string& library, bool bench) {
  std::string file = std::filesystem::path(library).filename().string();
  if (file.rfind("lib", 0) != 0 || file.size() <= 6 || file.substr(file.size() - 3) != ".so") {
    return absl::InvalidArgumentError(library + " is not a lib<name>.so made by tuneforge deploy");
  }
  Inspection out;
  out.name = file.substr(3, file.size() - 6);
  // The provenance comes from the file itself: no foreign initializer runs to read it,
  // and a truncated or foreign file is refused before anything loads it.
  absl::StatusOr<std::string> provenance_bytes = ReadElfSection(library, deploy::kProvenanceSection);
  if (absl::IsNotFound(provenance_bytes.status()) && std::filesystem::exists(library)) {
    return absl::InvalidArgumentError(library + " has no " + deploy::kProvenanceSection +
                                      " section: not made by tuneforge deploy (or by a version "
                                      "before 2026-12; deploy it again)");
  }
  if (!provenance_bytes.ok()) return provenance_bytes.status();
  out.provenance_json = provenance_bytes->substr(0, provenance_bytes->find('\0'));
  if (!bench) return out;
  // Benchmarking runs the library's code (its initializers included): only for a
  // library you would link into your own program. DEEPBIND: the library's kernels use the library's own runtime, as in a user's
  // program, not the copy inside this executable.
  void* handle = dlopen(std::filesystem::absolute(library).c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!handle) return absl::InvalidArgumentError(std::string("cannot load ") + dlerror());
  auto provenance = reinterpret_cast<const char* (*)()>(dlsym(handle, (out.name + "_provenance").c_str()));
  auto count = reinterpret_cast<int (*)()>(dlsym(handle, (out.name + "_num_kernels").c_str()));
  auto kernel = reinterpret_cast<const KernelInfo* (*)(int)>(dlsym(handle, (out.name + "_kernel").c_str()));
  if (!provenance || !count || !kernel) {
    dlclose(handle);
    return absl::InvalidArgumentError(library + " has no " + out.name +
                                      "_provenance/_num_kernels/_kernel: not made by tuneforge deploy");
  }
  if (provenance() != out.provenance_json) {
    dlclose(handle);
    return absl::InvalidArgumentError(library + ": " + out.name + "_provenance() differs from its " +
                                      deploy::kProvenanceSection + " section");
  }
  nlohmann::json prov = nlohmann::json::parse(out.provenance_json, nullptr, false);
  for (int i = 0; i < count(); ++i) {
    const KernelInfo* info = kernel(i);
    KernelCheck check;
    check.function = info->function;
    check.task = info->task;
    if (prov.is_object() && prov.contains("kernels") && prov["kernels"].size() > static_cast<size_t>(i))
      check.recorded_gflops = prov["kernels"][i].value("gflops", 0.0);
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(info->task));
    const std::vector<HostBuffer> inputs = MakeTypedInputs(task, 42);
    ASSIGN_OR_RETURN(HostBuffer expected, TypedReferenceOutput(task, inputs));
    // 64-byte aligned copies, as the agent measures: AVX-512 loads that straddle cache
    // lines would otherwise make the comparison with the record unfair.
    std::vector<std::unique_ptr<char, decltype(&std::free)>> owned;
    std::vector<void*> buffers;
    auto aligned = [&](int64_t bytes) {
      owned.emplace_back(static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64))),
                         &std::free);
      buffers.push_back(owned.back().get());
      return owned.back().get();
    };
    for (const HostBuffer& in : inputs) std::memcpy(aligned(in.bytes()), in.data(), static_cast<size_t>(in.bytes()));
    char* result = aligned(expected.bytes());
    runtime::PoisonBuffer(expected.type(), result, expected.elements());
    if (info->run(buffers.data()) != 0) return absl::InternalError(check.function + " returned an error");
    Tolerance tol = ToleranceFor(task);
    check.correct = runtime::FirstMismatch(expected.type(), result, expected.data(), expected.elements(), tol.atol,
                                           tol.rtol) < 0;
    runtime::TimingOptions timing;
    timing.warmup = 2;
    timing.repeat = 5;
    timing.min_repeat_ms = 100;
    ASSIGN_OR_RETURN(runtime::Timing t,
                     runtime::TimeKernel(reinterpret_cast<runtime::KernelEntry>(info->run),
                                         buffers.data(), timing));
    std::vector<double> costs = t.costs;
    std::sort(costs.begin(), costs.end());
    check.measured_gflops = task.Flops() / costs[costs.size() / 2] / 1e9;
    out.kernels.push_back(check);
  }
  dlclose(handle);
  return out;
}

}  // namespace tuneforge
