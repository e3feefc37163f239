// The ELF reader: functions defined and exported, PLT slots in a file and in the loaded program,
// C++ names, and files that are not (whole) ELF objects.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "prim/elf.h"
#include "prim/prim.h"

using namespace hm::prim;

extern "C" __attribute__((noinline, used)) int hm_elf_test_marker(int x) { return x * 3 + 1; }

namespace {

std::vector<char> file_bytes(const char *path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int replaced_getppid() { return 4242; }

}  // namespace

TEST(Elf, ThisProgramsFunctionsAreFoundWhereTheyRun) {
  const std::vector<char> exe = file_bytes("/proc/self/exe");
  const elf::File file(exe.data(), exe.size());
  ASSERT_TRUE(file.valid());
  uint64_t value = 0, size = 0;
  file.for_each_function(elf::File::Table::kDefined, [&](const elf::Function &f) {
    if (std::strcmp(f.name, "hm_elf_test_marker") == 0) value = f.value, size = f.size;
  });
  ASSERT_NE(value, 0u);
  EXPECT_GT(size, 0u);
  const char *path = nullptr;
  uintptr_t base = 0;
  ASSERT_TRUE(object_at(reinterpret_cast<const void *>(&hm_elf_test_marker), &path, &base));
  EXPECT_EQ(base + value, reinterpret_cast<uintptr_t>(&hm_elf_test_marker));
}

TEST(Elf, PltSlotsAreReadFromTheFileAndRedirectedInTheLoadedProgram) {
  const pid_t parent = getppid();  // a call through this program's PLT
  const std::vector<char> exe = file_bytes("/proc/self/exe");
  const elf::File file(exe.data(), exe.size());
  int in_file = 0;
  elf::for_each_jump_slot(file.dynamic(), [&](const elf::JumpSlot &s) { in_file += std::strcmp(s.name, "getppid") == 0; });
  EXPECT_EQ(in_file, 1);

  // The C library calls its own getppid directly: only this program's slot is counted, then moved.
  const void *libc_getppid = dlsym(RTLD_DEFAULT, "getppid");
  EXPECT_EQ(elf::redirect_calls("getppid", nullptr, libc_getppid, nullptr, false), 1);
  ASSERT_EQ(elf::redirect_calls("getppid", reinterpret_cast<void *>(&replaced_getppid), libc_getppid, nullptr, true), 1);
  EXPECT_EQ(getppid(), 4242);
  ASSERT_EQ(elf::redirect_calls("getppid", const_cast<void *>(libc_getppid), libc_getppid, nullptr, true), 1);
  EXPECT_EQ(getppid(), parent);
  EXPECT_EQ(elf::redirect_calls("hm_no_such_function", nullptr, nullptr, nullptr, false), 0);
}

TEST(Elf, CxxNamesMatchWithOrWithoutTheirParameters) {
  const char *decide = "_ZN9LAMMPS_NS8Neighbor6decideEv";
  EXPECT_TRUE(elf::names_function(decide, "LAMMPS_NS::Neighbor::decide"));
  EXPECT_TRUE(elf::names_function(decide, "LAMMPS_NS::Neighbor::decide()"));
  EXPECT_FALSE(elf::names_function(decide, "LAMMPS_NS::Neighbor::decid"));
  EXPECT_FALSE(elf::names_function(decide, "Neighbor::decide"));
  EXPECT_TRUE(elf::names_function("_ZSt17__throw_bad_allocv", "std::__throw_bad_alloc"));  // std:: is "St"
  EXPECT_TRUE(elf::names_function("malloc", "malloc"));
  EXPECT_FALSE(elf::names_function("malloc", "mall"));
  char out[128];
  hm_elf_demangle(decide, out, sizeof out);
  EXPECT_STREQ(out, "LAMMPS_NS::Neighbor::decide()");
  hm_elf_demangle("malloc", out, sizeof out);
  EXPECT_STREQ(out, "malloc");
  hm_elf_demangle(decide, out, 8);  // cut to the buffer, terminated
  EXPECT_STREQ(out, "LAMMPS_");
}

TEST(Elf, ExportedFunctionsOfALibraryByName) {
  Dl_info info{};
  ASSERT_NE(dladdr(dlsym(RTLD_DEFAULT, "getppid"), &info), 0);
  char calls[256], exports[256];
  ASSERT_EQ(hm_elf_functions_named(info.dli_fname, "getppid", calls, sizeof calls, exports, sizeof exports), 0);
  EXPECT_STREQ(exports, "getppid\n");
  EXPECT_STREQ(calls, "") << "the C library calls its own getppid directly";
  ASSERT_EQ(hm_elf_functions_named("/proc/self/exe", "getppid", calls, sizeof calls, exports, sizeof exports), 0);
  EXPECT_STREQ(calls, "getppid\n");
  EXPECT_STREQ(exports, "");
}

TEST(Elf, WhatIsNotAWholeElfFileHoldsNothing) {
  const std::vector<char> exe = file_bytes("/proc/self/exe");
  int seen = 0;
  auto count = [&](const elf::Function &) { ++seen; };
  for (size_t cut : {size_t{0}, size_t{16}, size_t{64}, size_t{4096}}) {
    const elf::File file(exe.data(), cut);
    EXPECT_FALSE(file.valid()) << cut;
    file.for_each_function(elf::File::Table::kDefined, count);
    elf::for_each_jump_slot(file.dynamic(), [&](const elf::JumpSlot &) { ++seen; });
  }
  // A header that promises more section and program headers than the file holds.
  std::vector<char> lying(exe.begin(), exe.begin() + 4096);
  reinterpret_cast<uint16_t *>(lying.data() + 0x3c)[0] = 0xffff;  // e_shnum
  EXPECT_FALSE(elf::File(lying.data(), lying.size()).valid());
  const std::string text = "not an ELF file at all, but long enough to hold a header of sixty-four bytes";
  EXPECT_FALSE(elf::File(text.data(), text.size()).valid());
  EXPECT_EQ(seen, 0);
  const std::string not_elf = testing::TempDir() + "hm_elf_not_elf.txt";
  std::ofstream(not_elf) << text;
  char calls[16] = "x", out[16] = "x";
  EXPECT_EQ(hm_elf_functions_named(not_elf.c_str(), "getppid", calls, sizeof calls, out, sizeof out), -1);
  EXPECT_STREQ(calls, "");
  std::remove(not_elf.c_str());
  std::strcpy(out, "x");
  EXPECT_EQ(hm_elf_functions_named("/no/such/file", "getppid", calls, sizeof calls, out, sizeof out), -1);
  EXPECT_STREQ(out, "");
}
