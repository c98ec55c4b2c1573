// `tuneforge show`: the lowered loop nest of one config, or a task's config space.
#include <cstdio>

#include "compiler/codegen/build.h"
#include "compiler/support/files.h"
#include "compiler/support/log.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "compiler/support/status.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kShowUsage =
    "usage: tuneforge show --task \"...\" --config '<json>' [--target TEXT] [--so PATH]\n"
    "                      [--obj PATH] [--verbose]\n"
    "       tuneforge show --task \"...\" --space [--target TEXT]\n"
    "       tuneforge show --task \"...\" --naive [--target TEXT]\n"
    "  Prints the lowered loop nest of a config (what codegen compiles), or the\n"
    "  knobs of the task's template with their candidate values. --so also builds the\n"
    "  config with LLVM and writes the shared object to PATH (for objdump -d); --obj\n"
    "  writes the relocatable object instead, for any target LLVM knows, e.g.\n"
    "  --target \"-mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a76 -mattr=+neon\"\n"
    "  (--so links another architecture's with ld.lld-19: scripts/install-deps).\n"
    "  --verbose logs the build's phases (IR emission, optimisation, object\n"
    "  emission, link) with their times.\n";

}  // namespace

absl::StatusOr<int> ShowCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags,
                   Flags::Parse(args, {"task", "config", "target", "so", "obj"}, {"space", "naive", "verbose", "help"}));
  if (flags.Has("help")) {
    std::fputs(kShowUsage, stdout);
    return 0;
  }
  if (flags.Has("verbose")) SetLogLevel(LogLevel::kDebug);
  RETURN_IF_ERROR(flags.Require("task"));
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task")));
  Target target = DetectHostTarget("local");
  if (flags.Has("target")) {
    ASSIGN_OR_RETURN(target, ParseTarget(flags.Get("target"), target));
  }
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  ConfigSpace space = tmpl->Space(task, target);
  if (flags.Has("space")) {
    std::printf("template %s v%d for %s on %s\n%llu points, about %llu valid\n%s",
                tmpl->name().c_str(), tmpl->version(), task.CanonicalText().c_str(),
                target.ToString().c_str(), static_cast<unsigned long long>(space.RawSize()),
                static_cast<unsigned long long>(space.CountValid(200000)),
                space.Describe().c_str());
    return 0;
  }
  Config config;
  if (flags.Has("naive")) {
    config = tmpl->Naive(task, target);
  } else {
    RETURN_IF_ERROR(flags.Require("config"));
    ASSIGN_OR_RETURN(config, Config::FromJson(flags.Get("config")));
  }
  absl::StatusOr<ir::LoweredFunc> func = tmpl->Instantiate(task, target, config);
  if (!func.ok()) return absl::InvalidArgumentError("invalid config: " + std::string(func.status().message()));
  std::printf("// %s, template %s v%d, config %s\n%s", task.CanonicalText().c_str(),
              tmpl->name().c_str(), tmpl->version(), config.ToJson().c_str(),
              ir::ToString(*func).c_str());
  if (flags.Has("obj")) {
    ASSIGN_OR_RETURN(std::string object, BuildObject(*func, target));
    RETURN_IF_ERROR(WriteFile(flags.Get("obj"), object));
    std::printf("// wrote %s (%zu bytes, a relocatable object for %s)\n", flags.Get("obj").c_str(), object.size(),
                target.triple.c_str());
  }
  if (flags.Has("so")) {
    // Any architecture LLVM knows: another one's is linked by ld.lld.
    ASSIGN_OR_RETURN(Artifact artifact, BuildArtifact(*func, target));
    RETURN_IF_ERROR(WriteFile(flags.Get("so"), artifact.shared_object));
    std::printf("// wrote %s (%zu bytes, entry %s, built in %.0f ms)\n", flags.Get("so").c_str(),
                artifact.shared_object.size(), artifact.entry_symbol.c_str(), artifact.build_seconds * 1e3);
  }
  return 0;
}

}  // namespace tuneforge::cli
