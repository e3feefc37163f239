// Placement rules for programs that cannot change (HM_RULES, `hetmem run --rules FILE`): route an
// allocation by its size or by the function that made it to a tier or role, to huge pages, or
// leave it to the C library. The first rule that matches decides.
//
//   # comment
//   size >= 2M        -> huge        # from the hugetlb pool (transparent huge pages when empty)
//   function push_    -> capacity    # made in a function whose name contains "push_"
//   site ./pic+0x4f2a -> capacity    # made at this call site (module+offset, as `hetmem report` prints)
//   all               -> capacity    # the whole heap (what libvmmalloc did)
//
// Targets: fast, capacity, persistent, a tier name (dram, numa:1, emul:optane, ...), huge, libc.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hm::place {

struct Rule {
  enum Kind { kAll, kSizeAtLeast, kSizeAbove, kSizeAtMost, kSizeBelow, kFunction, kSite } kind = kAll;
  uint64_t size = 0;
  std::string text;       // function name fragment, or site module
  uint64_t offset = 0;    // site offset in its module
  enum Target { kTier, kHuge, kLibc } target = kLibc;
  std::string target_name;  // role or tier, resolved when the rules are installed
  int tier = -1;
  int line = 0;
};

// Parses rules text. On error returns HM_EFORMAT and sets *error to "FILE:LINE:COLUMN: what".
int parse_rules(const std::string &text, const std::string &file, std::vector<Rule> *rules, std::string *error);
// Reads and parses a rules file, resolving targets to tiers (HM_ENOTIER names the unknown one).
int load_rules(const std::string &path, std::vector<Rule> *rules, std::string *error);

struct Decision {
  Rule::Target target = Rule::kLibc;
  int tier = -1;
};

// Installs rules for decide(); not thread-safe against concurrent decide() (done at start-up).
void install(std::vector<Rule> rules);
bool installed();
// Where an allocation of `size` bytes made from `caller` goes.
Decision decide(size_t size, const void *caller);

}  // namespace hm::place
