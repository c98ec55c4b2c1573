// Generated source cannot be broken into by the text it carries (target keys and task
// texts from the db, tensor and node names from a user's ONNX model), and a deployed
// library's provenance is read from its file without loading it; a truncated or
// foreign file is refused with a message.
#include "deploy/library_build.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/support/files.h"
#include "deploy/inspect.h"

namespace tuneforge::deploy {
namespace {

// Every byte value, the delimiters of C strings and comments, trigraphs and a line
// continuation: what a hostile target key or tensor name could hold.
std::string Hostile() {
  std::string s = "a\"b\\c?\?/d\n#include </etc/passwd>\n*/ x /* \\\r)tfjson\" ";
  for (int c = 1; c < 256; ++c) s += static_cast<char>(c);
  return s;
}

class LibraryBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("tf_library_build_test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(*std::move(dir));
  }
  // Compiles `source` into an executable (or, with `shared`, lib<name>.so) in the temp
  // dir; returns its path, "" when the compiler refused it.
  std::string Compile(const std::string& source, const std::string& name, bool shared) {
    const std::string src = dir_->File(name + ".cc");
    EXPECT_TRUE(WriteFile(src, source).ok());
    const std::string out = dir_->File(shared ? "lib" + name + ".so" : name);
    std::vector<std::string> argv = {"c++", "-std=c++17", "-Wall", "-Werror", src, "-o", out};
    if (shared) argv.insert(argv.begin() + 1, {"-shared", "-fPIC"});
    auto rc = RunAndWait(argv, dir_->File(name + ".log"));
    return rc.ok() && *rc == 0 ? out : "";
  }
  std::unique_ptr<TempDir> dir_;
};

TEST_F(LibraryBuildTest, HostileTextRoundTripsThroughLiteralsAndStaysInComments) {
  const std::string text = Hostile();
  const std::string comment = CommentText(text);
  EXPECT_EQ(comment.find('\n'), std::string::npos);
  EXPECT_EQ(comment.find('\\'), std::string::npos);
  EXPECT_EQ(comment.find('?'), std::string::npos);
  // The program prints the literal's bytes; a comment that let code through would not
  // compile (or would print something else).
  std::string source = "#include <cstdio>\n#include <cstring>\n// " + comment +
                       "\nint main() {\n  // " + comment + "\n  static const char s[] = " +
                       CStringLiteral(text) +
                       ";\n  fwrite(s, 1, sizeof s - 1, stdout);\n  return 0;\n}\n";
  const std::string exe = Compile(source, "literal", false);
  ASSERT_FALSE(exe.empty()) << ReadFile(dir_->File("literal.log")).value_or("");
  auto rc = RunAndWait({exe}, dir_->File("literal.out"));
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(*rc, 0);
  auto printed = ReadFile(dir_->File("literal.out"));
  ASSERT_TRUE(printed.ok());
  EXPECT_EQ(*printed, text);
}

TEST_F(LibraryBuildTest, ProvenanceIsReadFromTheFileWithoutLoadingIt) {
  const std::string json = "{\"target\": \"" + Hostile() + "\"}";
  // The constructor would leave a marker if anything loaded the library.
  const std::string marker = dir_->File("initializer-ran");
  const std::string lib = Compile(
      ProvenanceDefinition("probe_provenance", json) +
          "#include <cstdio>\n__attribute__((constructor)) static void Init() { fclose(fopen(\"" + marker +
          "\", \"w\")); }\n",
      "probe", true);
  ASSERT_FALSE(lib.empty());
  auto section = ReadElfSection(lib, kProvenanceSection);
  ASSERT_TRUE(section.ok()) << section.status();
  EXPECT_EQ(section->substr(0, section->find('\0')), json);
  auto inspection = InspectLibrary(lib, /*bench=*/false);
  ASSERT_TRUE(inspection.ok()) << inspection.status();
  EXPECT_EQ(inspection->provenance_json, json);
  EXPECT_FALSE(std::filesystem::exists(marker));

  // A library without the section (any foreign one): refused, its initializer unrun.
  const std::string foreign = Compile(
      "#include <cstdio>\n__attribute__((constructor)) static void Init() { fclose(fopen(\"" + marker +
          "\", \"w\")); }\n",
      "foreign", true);
  ASSERT_FALSE(foreign.empty());
  auto refused = InspectLibrary(foreign, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not made by tuneforge deploy"), std::string::npos)
      << refused.status();
  EXPECT_FALSE(std::filesystem::exists(marker));

  // Truncated copies, at every cut that matters: an error naming the file, never a
  // SIGBUS; with --bench too (nothing is loaded before the file is checked whole).
  auto bytes = ReadFile(lib);
  ASSERT_TRUE(bytes.ok());
  for (size_t cut : {size_t{0}, size_t{3}, size_t{63}, size_t{64}, bytes->size() / 2, bytes->size() - 1}) {
    const std::string cut_lib = dir_->File("libcut.so");
    ASSERT_TRUE(WriteFile(cut_lib, bytes->substr(0, cut)).ok());
    for (bool bench : {false, true}) {
      auto cut_inspection = InspectLibrary(cut_lib, bench);
      ASSERT_FALSE(cut_inspection.ok()) << cut;
      EXPECT_NE(cut_inspection.status().message().find(cut_lib), std::string::npos) << cut_inspection.status();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
}

}  // namespace
}  // namespace tuneforge::deploy
