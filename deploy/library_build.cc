// Building a deployed library's files (objects, header, archive, shared object).
#include "deploy/library_build.h"

#include <cctype>
#include <cstdio>
#include <sstream>
#include <filesystem>

#include "compiler/codegen/build.h"
#include "compiler/support/status.h"
#include "deploy/runtime_sources.h"

namespace tuneforge::deploy {

bool IsCIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

std::string CStringLiteral(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c < 32 || c > 126 || c == '"' || c == '\\' || c == '?') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string CommentText(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    const bool opens_block = c == '*' && !out.empty() && out.back() == '/';  // -Wcomment
    out += (c < 32 || c > 126 || c == '\\' || c == '?' || opens_block) ? '_' : static_cast<char>(c);
  }
  return out;
}

std::string ProvenanceDefinition(const std::string& function, const std::string& json) {
  std::ostringstream c;
  c << "__attribute__((section(\"" << kProvenanceSection << "\"), used))\n"
    << "static const char k" << function << "[] = {";
  for (size_t i = 0; i < json.size(); ++i) {
    if (i % 24 == 0) c << "\n ";
    c << ' ' << static_cast<int>(static_cast<signed char>(json[i])) << ',';
  }
  c << "\n 0};\n"
    << "extern \"C\" const char* " << function << "(void) { return k" << function << "; }\n";
  return c.str();
}

absl::Status BuildLibraryFiles(const TempDir& work, const std::string& name, std::vector<std::string> objects,
                               const std::string& triple) {
  std::string cxx = "c++", ar = "ar";
  const std::string arch = TripleArchitecture(triple);
  if (!arch.empty() && arch != TripleArchitecture(DetectHostTarget("local").triple)) {
    cxx = arch + "-linux-gnu-g++";
    ar = arch + "-linux-gnu-ar";
    if (FindProgram({cxx}).empty()) {
      return absl::FailedPreconditionError("a library for " + arch + " needs the cross compiler " + cxx +
                                           " (scripts/install-deps installs g++-" + arch + "-linux-gnu)");
    }
  }
  std::filesystem::create_directories(work.File("compiler/runtime"));
  RETURN_IF_ERROR(WriteFile(work.File("compiler/runtime/runtime.h"), RuntimeHeaderSource()));
  RETURN_IF_ERROR(WriteFile(work.File("thread_pool.cc"), ThreadPoolSource()));
  for (const char* unit : {"glue", "thread_pool"}) {
    std::string obj = work.File(std::string(unit) + ".o");
    RETURN_IF_ERROR(RunChecked({cxx, "-std=c++17", "-O2", "-fPIC", "-pthread", "-I", work.path(), "-c",
                                work.File(std::string(unit) + ".cc"), "-o", obj},
                               work.File("cc.log")));
    objects.push_back(obj);
  }
  // -z nodelete: the runtime's worker threads are detached and run the library's own
  // code, so a dlclose() after a parallel kernel must not unmap it (it did: `deploy
  // inspect --bench` crashed now and then as the workers woke in unmapped code).
  std::vector<std::string> link = {cxx, "-shared", "-pthread", "-Wl,-z,nodelete", "-o",
                                   work.File("lib" + name + ".so")};
  link.insert(link.end(), objects.begin(), objects.end());
  RETURN_IF_ERROR(RunChecked(link, work.File("link.log")));
  std::vector<std::string> archive = {ar, "rcs", work.File("lib" + name + ".a")};
  archive.insert(archive.end(), objects.begin(), objects.end());
  return RunChecked(archive, work.File("ar.log"));
}

}  // namespace tuneforge::deploy
