#include <gtest/gtest.h>

#include "hetmem/hetmem.h"
#include "place/rules.h"
#include "prim/prim.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include "../support.h"

using hm::place::Rule;

TEST(Rules, ParsesEveryForm) {
  std::vector<Rule> rules;
  std::string error;
  ASSERT_EQ(hm::place::parse_rules("# placement\n"
                                   "size >= 2M -> huge\n"
                                   "size < 4096 -> libc   # small stays\n"
                                   "function push_ -> capacity\n"
                                   "site ./pic+0x4f2a -> emul:optane\n"
                                   "\n"
                                   "all -> fast\n",
                                   "r.txt", &rules, &error),
            HM_OK)
      << error;
  ASSERT_EQ(rules.size(), 5u);
  EXPECT_EQ(rules[0].kind, Rule::kSizeAtLeast);
  EXPECT_EQ(rules[0].size, 2u << 20);
  EXPECT_EQ(rules[0].target, Rule::kHuge);
  EXPECT_EQ(rules[1].kind, Rule::kSizeBelow);
  EXPECT_EQ(rules[1].target, Rule::kLibc);
  EXPECT_EQ(rules[2].kind, Rule::kFunction);
  EXPECT_EQ(rules[2].text, "push_");
  EXPECT_EQ(rules[3].kind, Rule::kSite);
  EXPECT_EQ(rules[3].text, "./pic");
  EXPECT_EQ(rules[3].offset, 0x4f2au);
  EXPECT_EQ(rules[3].target_name, "emul:optane");
  EXPECT_EQ(rules[4].kind, Rule::kAll);
  EXPECT_EQ(rules[4].line, 7);
}

TEST(Rules, ErrorsGiveFileLineColumn) {
  std::vector<Rule> rules;
  std::string error;
  EXPECT_EQ(hm::place::parse_rules("all -> fast\n  size >= 2X -> fast\n", "r.txt", &rules, &error), HM_EFORMAT);
  EXPECT_EQ(error.rfind("r.txt:2:11: expected a size", 0), 0u) << error;
  EXPECT_EQ(hm::place::parse_rules("site nowhere -> fast\n", "r.txt", &rules, &error), HM_EFORMAT);
  EXPECT_EQ(error.rfind("r.txt:1:6: expected MODULE+0xOFFSET", 0), 0u) << error;
  EXPECT_EQ(hm::place::parse_rules("all -> fast slow\n", "r.txt", &rules, &error), HM_EFORMAT);
  EXPECT_EQ(error.rfind("r.txt:1:13: unexpected 'slow'", 0), 0u) << error;
}

// Checking a plan (hm_rules_check: the hetmem command does before it starts a program) defines
// none of its classes: two plans that class the same call site differently are checked one after
// the other in one process (a benchmark checks each program's plan), and only installing defines.
TEST(Rules, CheckingAPlanDefinesNoClass) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  const std::string hot = hm_test::temp_path("hot.plan"), streaming = hm_test::temp_path("streaming.plan");
  const std::string site = "site ./app+0x51c0 -> class ";
  const std::string hot_text = site + "hot 40\n", streaming_text = site + "streaming\n";
  hm_test::write_file(hot, std::vector<char>(hot_text.begin(), hot_text.end()));
  hm_test::write_file(streaming, std::vector<char>(streaming_text.begin(), streaming_text.end()));
  const int before = hm_class_count();
  char error[256] = {};
  EXPECT_EQ(hm_rules_check(hot.c_str(), error, sizeof error), HM_OK) << error;
  EXPECT_EQ(hm_rules_check(streaming.c_str(), error, sizeof error), HM_OK) << error;
  EXPECT_EQ(hm_class_count(), before);
  std::vector<Rule> rules;
  std::string why;
  ASSERT_EQ(hm::place::load_rules(hot, &rules, &why, true), HM_OK) << why;
  EXPECT_EQ(hm_class_count(), before + 1);
  unlink(hot.c_str());
  unlink(streaming.c_str());
}

TEST(Rules, DecideFirstMatchWins) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  std::string path = hm_test::temp_path("decide.rules");
  {
    FILE *f = std::fopen(path.c_str(), "w");
    std::fputs("size >= 64M -> capacity\nsize >= 1M -> fast\nsize >= 512K -> huge\n", f);
    std::fclose(f);
  }
  std::vector<Rule> rules;
  std::string error;
  ASSERT_EQ(hm::place::load_rules(path, &rules, &error, true), HM_OK) << error;
  hm::place::install(rules);
  auto d = hm::place::decide(size_t{100} << 20, nullptr);
  EXPECT_EQ(d.target, Rule::kTier);
  EXPECT_EQ(d.tier, hm_test::tier("capacity"));
  d = hm::place::decide(size_t{2} << 20, nullptr);
  EXPECT_EQ(d.tier, hm_test::tier("fast"));
  EXPECT_EQ(hm::place::decide(size_t{600} << 10, nullptr).target, Rule::kHuge);
  EXPECT_EQ(hm::place::decide(100, nullptr).target, Rule::kLibc);
  unlink(path.c_str());
}

namespace {
// Three functions of this test program that stand for call sites: their addresses are callers.
extern "C" __attribute__((noinline)) int hm_rules_test_site_a(int x) { return x * 3 + 1; }
extern "C" __attribute__((noinline)) int hm_rules_test_marker_b(int x) { return x * 5 + 2; }
extern "C" __attribute__((noinline)) int hm_rules_test_elsewhere_c(int x) { return x * 7 + 3; }

const void *address_of(int (*fn)(int)) { return reinterpret_cast<const void *>(fn); }

// A site rule's condition for the code at `addr`: "MODULE+0xOFFSET" ("" when no object holds it).
std::string site_of(const void *addr) {
  const char *module = nullptr;
  uintptr_t base = 0;
  if (!hm::prim::object_at(addr, &module, &base)) return "";
  char site[512];
  std::snprintf(site, sizeof site, "%s+0x%lx", module, static_cast<unsigned long>(reinterpret_cast<uintptr_t>(addr) - base));
  return site;
}

// Writes `text` as the rules file `name`, loads and installs it; the file's path, for unlink.
std::string install_rules(const char *name, const std::string &text) {
  std::string path = hm_test::temp_path(name);
  hm_test::write_file(path, std::vector<char>(text.begin(), text.end()));
  std::vector<Rule> rules;
  std::string error;
  EXPECT_EQ(hm::place::load_rules(path, &rules, &error, true), HM_OK) << error;
  hm::place::install(rules);
  return path;
}
}  // namespace

// Site and function rules are matched once per call site and then answered from the per-site
// table: the first rule in file order still wins, size rules still apply per allocation, and
// forgetting the table (a module unloaded) gives the same answers again.
TEST(Rules, SiteAndFunctionRulesAreDecidedOncePerCallSiteInFileOrder) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  const void *a = address_of(hm_rules_test_site_a), *b = address_of(hm_rules_test_marker_b),
             *c = address_of(hm_rules_test_elsewhere_c);
  const std::string site = site_of(a);
  ASSERT_FALSE(site.empty());
  const std::string path = install_rules(
      "sites.rules", "size >= 64M -> capacity\nsite " + site + " -> fast\nfunction hm_rules_test_marker_b -> huge\n");
  for (int round = 0; round < 3; ++round) {  // first sight, then the table, then after forgetting
    SCOPED_TRACE(round);
    EXPECT_EQ(hm::place::decide(100, a).target, Rule::kTier);
    EXPECT_EQ(hm::place::decide(100, a).tier, hm_test::tier("fast"));
    EXPECT_EQ(hm::place::decide(size_t{100} << 20, a).tier, hm_test::tier("capacity")) << "a size rule first";
    EXPECT_EQ(hm::place::decide(100, b).target, Rule::kHuge);
    EXPECT_EQ(hm::place::decide(100, c).target, Rule::kLibc);
    EXPECT_EQ(hm::place::decide(100, nullptr).target, Rule::kLibc);
    if (round == 1) hm::place::forget_sites();
  }
  // Many call sites from two threads at once, none of them in the table: every answer as on one.
  constexpr int kSites = 4096;
  std::vector<Rule::Target> expected(kSites);
  for (int i = 0; i < kSites; ++i) expected[i] = hm::place::decide(100, static_cast<const char *>(c) + i).target;
  hm::place::forget_sites();
  std::atomic<int> wrong{0};
  auto decide_many = [&](int salt) {
    for (int i = 0; i < 20000; ++i) {
      const int at = (i * 7 + salt) % kSites;
      if (hm::place::decide(100, static_cast<const char *>(c) + at).target != expected[at] ||
          hm::place::decide(100, a).target != Rule::kTier)
        wrong.fetch_add(1);
    }
  };
  std::thread other(decide_many, 1);
  decide_many(2);
  other.join();
  EXPECT_EQ(wrong.load(), 0);
  unlink(path.c_str());
}

// A size rule between caller rules: it wins for a call site whose rule comes after it, loses to
// one whose rule comes before it, and applies to call sites that match no caller rule.
TEST(Rules, ASizeRuleBetweenCallerRulesKeepsItsPlaceInFileOrder) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  const void *a = address_of(hm_rules_test_site_a), *b = address_of(hm_rules_test_marker_b),
             *c = address_of(hm_rules_test_elsewhere_c);
  const std::string site = site_of(a);
  ASSERT_FALSE(site.empty());
  const std::string path = install_rules(
      "between.rules", "site " + site + " -> fast\nsize >= 1M -> capacity\nfunction hm_rules_test_marker_b -> huge\n");
  const size_t big = size_t{2} << 20;
  EXPECT_EQ(hm::place::decide(big, a).tier, hm_test::tier("fast")) << "the site rule comes first";
  EXPECT_EQ(hm::place::decide(big, b).tier, hm_test::tier("capacity")) << "the size rule comes before b's";
  EXPECT_EQ(hm::place::decide(100, b).target, Rule::kHuge);
  EXPECT_EQ(hm::place::decide(big, c).tier, hm_test::tier("capacity"));
  EXPECT_EQ(hm::place::decide(100, c).target, Rule::kLibc);
  unlink(path.c_str());
}

// A module unloaded (dlclose, then the preload library's forget): the answer for a call site in it
// is asked again, so that whatever is mapped there next is not placed by the old module's rule;
// the answers for objects still loaded stand.
TEST(Rules, TheAnswerForACallSiteInAnUnloadedModuleIsAskedAgain) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  void *handle = dlopen(HM_SITE_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const void *in_module = dlsym(handle, "hm_site_module_fn"), *here = address_of(hm_rules_test_site_a);
  ASSERT_NE(in_module, nullptr);
  const std::string site = site_of(in_module);
  ASSERT_FALSE(site.empty());
  const std::string path =
      install_rules("unloaded.rules", "site " + site + " -> fast\nfunction hm_rules_test_site_a -> huge\n");
  EXPECT_EQ(hm::place::decide(100, in_module).target, Rule::kTier);
  EXPECT_EQ(hm::place::decide(100, here).target, Rule::kHuge);
  ASSERT_EQ(dlclose(handle), 0);
  ASSERT_TRUE(site_of(in_module).empty()) << "the module is still loaded";
  hm::place::forget_sites();
  EXPECT_EQ(hm::place::decide(100, in_module).target, Rule::kLibc) << "the unloaded module's answer was kept";
  EXPECT_EQ(hm::place::decide(100, here).target, Rule::kHuge);
  unlink(path.c_str());
}

// The smallest allocation the rules can place: smaller ones go to the C library unasked (the
// preload library's fast path), so it must never exceed a size some rule places.
TEST(Rules, NothingBelowWhatTheRulesCanPlaceIsPlaced) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  const void *a = address_of(hm_rules_test_site_a);
  const std::string site = site_of(a);
  ASSERT_FALSE(site.empty());
  struct Case {
    std::string text;
    size_t floor;
  };
  const Case cases[] = {
      {"size >= 64M -> capacity\nsize >= 2M -> huge\n", size_t{2} << 20},
      {"size > 100 -> capacity\n", 101},
      {"size < 1K -> libc\n", SIZE_MAX},
      {"size < 1K -> libc\nall -> capacity\n", 0},
      {"size <= 10 -> fast\nsize >= 1G -> capacity\n", 0},
      {"function hm_rules_test_marker_b -> huge\n", 0},
      {"site " + site + " -> class hot 5\nsize >= 1G -> capacity\n", 4096},  // HM_CLASS_MIN's default
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.text);
    const std::string path = install_rules("floor.rules", c.text);
    EXPECT_EQ(hm::place::placed_from(), c.floor);
    if (c.floor > 0 && c.floor != SIZE_MAX) {
      EXPECT_EQ(hm::place::decide(c.floor - 1, a).target, Rule::kLibc);
      EXPECT_NE(hm::place::decide(c.floor, a).target, Rule::kLibc);
    }
    unlink(path.c_str());
  }
  // A class rule's allocations under HM_CLASS_MIN stay with the C library, and do not count as the
  // site having placed something.
  const std::string path = install_rules("small.rules", "site " + site + " -> class hot 5\n");  // as above: one class per site
  EXPECT_EQ(hm::place::decide(4095, a).target, Rule::kLibc);
  EXPECT_EQ(hm::place::unused_class_rules().size(), 1u);
  EXPECT_EQ(hm::place::decide(4096, a).target, Rule::kClass);
  EXPECT_TRUE(hm::place::unused_class_rules().empty());
  unlink(path.c_str());
}

// Rules whose first is `all -> TARGET` give every allocation one decision, which the preload
// library then takes without asking; any other first rule (or a class, whose use is reported) does not.
TEST(Rules, AnAllRuleFirstDecidesEveryAllocationAtOnce) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  hm::place::Decision d;
  std::string path = install_rules("uniform.rules", "all -> capacity\nsize >= 1G -> fast\n");
  ASSERT_TRUE(hm::place::uniform(&d));
  EXPECT_EQ(d.target, Rule::kTier);
  EXPECT_EQ(d.tier, hm_test::tier("capacity"));
  EXPECT_EQ(hm::place::decide(size_t{2} << 30, nullptr).tier, d.tier) << "the first rule wins for every size";
  unlink(path.c_str());
  for (const char *text : {"size >= 1 -> capacity\n", "size >= 1G -> fast\nall -> capacity\n", "all -> class cold\n"}) {
    SCOPED_TRACE(text);
    path = install_rules("uniform.rules", text);
    EXPECT_FALSE(hm::place::uniform(&d));
    unlink(path.c_str());
  }
}
