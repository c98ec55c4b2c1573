// A job's Target from the agents that will measure it.
#include "server/job_target.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tuneforge {
namespace {

// /proc/cpuinfo flag -> LLVM feature, for the features that change generated code.
const std::map<std::string, std::string>& FlagTable() {
  static const auto* table = new std::map<std::string, std::string>{
      {"sse", "sse"},
      {"sse2", "sse2"},
      {"pni", "sse3"},
      {"ssse3", "ssse3"},
      {"sse4_1", "sse4.1"},
      {"sse4_2", "sse4.2"},
      {"popcnt", "popcnt"},
      {"avx", "avx"},
      {"avx2", "avx2"},
      {"fma", "fma"},
      {"f16c", "f16c"},
      {"bmi1", "bmi"},
      {"bmi2", "bmi2"},
      {"abm", "lzcnt"},
      {"movbe", "movbe"},
      {"cx16", "cx16"},
      {"lahf_lm", "sahf"},
      {"avx512f", "avx512f"},
      {"avx512cd", "avx512cd"},
      {"avx512bw", "avx512bw"},
      {"avx512dq", "avx512dq"},
      {"avx512vl", "avx512vl"},
      {"avx512ifma", "avx512ifma"},
      {"avx512vbmi", "avx512vbmi"},
      {"avx512_vbmi2", "avx512vbmi2"},
      {"avx512_vnni", "avx512vnni"},
      {"avx512_bf16", "avx512bf16"},
      {"avx512_bitalg", "avx512bitalg"},
      {"avx512_vpopcntdq", "avx512vpopcntdq"},
      {"gfni", "gfni"},
      {"vaes", "vaes"},
      {"vpclmulqdq", "vpclmulqdq"},
      // aarch64 /proc/cpuinfo "Features"
      {"asimd", "neon"},
      {"fphp", "fullfp16"},
      {"sve", "sve"},
  };
  return *table;
}

// The features named in an LLVM feature string ("+avx2,-avx512f,+fma" -> avx2, fma)
// that the flag table can express, so host and agents compare like with like.
std::set<std::string> TableFeaturesOf(const std::string& llvm_features) {
  std::set<std::string> known;
  for (const auto& [flag, feature] : FlagTable()) known.insert(feature);
  std::set<std::string> out;
  for (absl::string_view part : absl::StrSplit(llvm_features, ',', absl::SkipEmpty())) {
    if (part.size() > 1 && part[0] == '+' && known.count(std::string(part.substr(1))))
      out.insert(std::string(part.substr(1)));
  }
  return out;
}

std::string GenericCpu(const std::string& triple, const std::set<std::string>& f) {
  if (triple.rfind("riscv64", 0) == 0) return "generic-rv64";  // LLVM has no plain "generic" there
  if (triple.rfind("x86_64", 0) != 0) return "generic";
  auto all = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return f.count(n) > 0; });
  };
  if (all({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx2", "fma", "bmi",
           "bmi2", "movbe"}))
    return "x86-64-v4";
  if (all({"avx2", "fma", "bmi", "bmi2", "movbe", "f16c"})) return "x86-64-v3";
  if (all({"sse4.2", "popcnt", "ssse3", "cx16", "sahf"})) return "x86-64-v2";
  return "x86-64";
}

std::string FeatureString(const std::set<std::string>& features) {
  std::vector<std::string> parts;
  for (const std::string& f : features) parts.push_back("+" + f);
  return absl::StrJoin(parts, ",");
}

}  // namespace

std::vector<std::string> LlvmFeaturesOfCpuFlags(const std::vector<std::string>& flags) {
  std::set<std::string> out;
  for (const std::string& flag : flags) {
    auto it = FlagTable().find(flag);
    if (it != FlagTable().end()) out.insert(it->second);
  }
  return {out.begin(), out.end()};
}

std::string CpuModelOfCpuInfo(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "" : line.substr(begin);
  }
  return "";
}

JobTarget ResolveJobTarget(const std::string& device_key, const std::string& requested,
                           const std::vector<v1::AgentCapabilities>& agents, const Target& host,
                           const std::string& host_cpu_model) {
  JobTarget out;
  if (agents.empty()) {
    out.waiting = "waiting for an agent with device key '" + device_key + "'";
    return out;
  }
  // What all the agents have: common features, fewest cores; one triple and model or
  // none.
  std::set<std::string> triples, models;
  std::set<std::string> common;
  int cores = 0;
  bool first = true, unknown = false;
  for (const v1::AgentCapabilities& a : agents) {
    if (a.triple().empty()) {
      unknown = true;
      continue;
    }
    std::vector<std::string> flags(a.cpu_flags().begin(), a.cpu_flags().end());
    std::vector<std::string> f = LlvmFeaturesOfCpuFlags(flags);
    std::set<std::string> mine(f.begin(), f.end());
    if (first) {
      common = mine;
    } else {
      std::set<std::string> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                            std::inserter(both, both.begin()));
      common = both;
    }
    first = false;
    triples.insert(a.triple());
    models.insert(a.cpu_model());
    int c = std::max(1, a.cores());
    cores = cores == 0 ? c : std::min(cores, c);
  }

  Target base = host;
  base.device_key = device_key;
  if (first) {  // only agents that did not say what they are
    out.source = "the server's host (the agents report no machine)";
  } else if (triples.size() > 1) {
    out.waiting = "waiting: the agents of device key '" + device_key +
                  "' are of different architectures (" + absl::StrJoin(triples, ", ") +
                  "); give each architecture its own device key";
    return out;
  } else {
    const std::string& triple = *triples.begin();
    const bool host_machine = !unknown && triple == host.triple && models.size() == 1 &&
                              *models.begin() == host_cpu_model &&
                              common == TableFeaturesOf(host.features);
    base.num_threads = cores;
    if (host_machine) {
      out.source = "the agents' machine (" + host_cpu_model + ", the server's own CPU)";
    } else {
      base.triple = triple;
      base.cpu = GenericCpu(triple, common);
      base.features = FeatureString(common);
      out.source = "the agents' machine (" + absl::StrJoin(models, " / ") + ": " + base.cpu +
                   ", " + std::to_string(common.size()) + " features, " +
                   std::to_string(cores) + " cores)";
    }
  }
  if (requested.empty()) {
    out.ready = true;
    out.target = base;
    return out;
  }
  absl::StatusOr<Target> want = ParseTarget(requested, base);
  if (!want.ok()) {
    out.waiting = "invalid target '" + requested + "': " + std::string(want.status().message());
    return out;
  }
  want->device_key = device_key;
  if (!first) {
    std::vector<std::string> missing;
    if (want->triple != base.triple)
      missing.push_back("triple " + want->triple + " (they are " + base.triple + ")");
    std::set<std::string> have = TableFeaturesOf(base.features);
    for (const std::string& f : TableFeaturesOf(want->features))
      if (!have.count(f)) missing.push_back(f);
    if (want->num_threads > cores)
      missing.push_back(std::to_string(want->num_threads) + " threads (they have " +
                        std::to_string(cores) + " cores)");
    if (!missing.empty()) {
      out.waiting = "waiting for an agent with device key '" + device_key +
                    "' that can run target '" + requested + "': the connected agents lack " +
                    absl::StrJoin(missing, ", ");
      return out;
    }
  }
  out.ready = true;
  out.target = *want;
  out.source += "; overridden by the job's target '" + requested + "'";
  return out;
}

}  // namespace tuneforge
