// Target: parsing target strings, host detection (CPU, ISA, caches) and keys.
#include "compiler/target/target.h"

#include <algorithm>

#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "compiler/support/hash.h"

namespace tuneforge {

bool Target::HasFeature(const std::string& name) const {
  for (absl::string_view f : absl::StrSplit(features, ',')) {
    if (f == "+" + name) return true;
  }
  return false;
}

double Target::PlausiblePeakGflops() const {
  const double flops_per_cycle = MaxF32Lanes() * 2.0 /*FMA*/ * 2.0 /*pipes*/;
  return flops_per_cycle * 6.0 /*GHz*/ * std::clamp(num_threads, 1, kMaxThreads);
}

int Target::MaxF32Lanes() const {
  if (HasFeature("avx512f")) return 16;
  if (HasFeature("avx")) return 8;
  return 4;
}

int Target::VectorRegisters() const {
  const std::string arch = triple.substr(0, triple.find('-'));
  if (arch == "aarch64" || arch == "riscv64") return 32;
  return HasFeature("avx512f") ? 32 : 16;
}

std::string Target::Key() const {
  std::ostringstream os;
  os << triple << "/" << cpu << "/t" << num_threads << "/" << device_key << "/f"
     << HashHex(features).substr(0, 8);
  return os.str();
}

std::string Target::ToString() const {
  std::ostringstream os;
  os << "llvm -mtriple=" << triple << " -mcpu=" << cpu << " -threads=" << num_threads
     << " -device-key=" << device_key << " (" << MaxF32Lanes() * 32 << "-bit f32 vectors)";
  return os.str();
}

std::string TripleArchitecture(const std::string& triple) { return triple.substr(0, triple.find('-')); }

absl::StatusOr<Target> ParseTarget(const std::string& text, const Target& defaults) {
  Target t = defaults;
  std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (i == 0 && w == "llvm") continue;
    size_t eq = w.find('=');
    if (w.rfind("-", 0) != 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError("target: expected -key=value, got '" + w + "'");
    }
    std::string key = w.substr(1, eq - 1), value = w.substr(eq + 1);
    if (value.empty()) return absl::InvalidArgumentError("target: empty value for -" + key);
    if (key == "mtriple") {
      // Another architecture than the defaults': their CPU and features do not carry
      // over (LLVM's generic CPU for it unless -mcpu/-mattr say otherwise).
      const std::string arch = TripleArchitecture(value);
      if (arch != TripleArchitecture(t.triple)) {
        t.cpu = arch == "riscv64" ? "generic-rv64" : arch == "riscv32" ? "generic-rv32" : "generic";
        t.features = "";
      }
      t.triple = value;
    } else if (key == "mcpu") {
      t.cpu = value;
    } else if (key == "mattr") {
      t.features = value;
    } else if (key == "threads") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < 1 || n > 1024) {
        return absl::InvalidArgumentError("target: -threads must be 1..1024, got '" + value + "'");
      }
      t.num_threads = n;
    } else if (key == "device-key") {
      t.device_key = value;
    } else {
      return absl::InvalidArgumentError("target: unknown option -" + key +
                                        " (known: -mtriple -mcpu -mattr -threads -device-key)");
    }
  }
  if (t.triple.empty() || t.cpu.empty()) {
    return absl::InvalidArgumentError("target: needs -mtriple and -mcpu");
  }
  return t;
}

}  // namespace tuneforge
