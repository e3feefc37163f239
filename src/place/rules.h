// Placement rules for programs that cannot change (HM_RULES, `hetmem run --rules FILE`): route an
// allocation by its size or by the function that made it to a tier or role, to huge pages, or
// leave it to the C library. The first rule that matches decides.
//
//   # comment
//   size >= 2M        -> huge        # from the hugetlb pool (transparent huge pages when empty)
//   function push_    -> capacity    # made in a function whose name contains "push_"
//   site ./pic+0x4f2a -> capacity    # made at this call site (module+offset, as `hetmem report` prints)
//   all               -> capacity    # the whole heap (what libvmmalloc did)
//   site ./pic+0x51c0 -> class hot 90   # an object class, placed by the active policy (a plan)
//
// Targets: fast, capacity, persistent, a tier name (dram, numa:1, emul:optane, ...), huge, libc,
// or `class KIND [PRIORITY]` (KIND: metadata, temporary, hot, streaming, cold). A file of such
// rules written by `hetmem plan` from a profile is a *plan*: the program's objects, by call site,
// become objects of classes that the policy (HM_POLICY) places, as if the program were tagged.
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
  enum Target { kTier, kHuge, kLibc, kClass } target = kLibc;
  std::string target_name;  // role or tier, resolved when the rules are installed
  int tier = -1;            // kClass: the class, defined when the rules are loaded to be installed
  int class_kind = 0;       // kClass: hm_class_kind_t
  int priority = 0;         // kClass, hot: its priority
  int line = 0;
};

// Parses rules text. On error returns HM_EFORMAT and sets *error to "FILE:LINE:COLUMN: what".
int parse_rules(const std::string &text, const std::string &file, std::vector<Rule> *rules, std::string *error);
// Reads and parses a rules file, resolving targets to tiers (HM_ENOTIER names the unknown one) and,
// with define_classes, a plan's classes to classes it defines. A check leaves the process's class
// registry as it was: checking two plans that class one site differently is no conflict.
int load_rules(const std::string &path, std::vector<Rule> *rules, std::string *error, bool define_classes);

struct Decision {
  Rule::Target target = Rule::kLibc;
  int tier = -1;  // kTier: the tier; kClass: the class
};

// Installs rules for decide(); not thread-safe against concurrent decide() (done at start-up).
void install(std::vector<Rule> rules);
bool installed();
// Where an allocation of `size` bytes made from `caller` goes. Function and site rules are matched
// once per call site (one dladdr), then answered from a table keyed by the caller's address.
Decision decide(size_t size, const void *caller);
// The smallest allocation the rules can send anywhere but the C library (a class's allocations
// under HM_CLASS_MIN stay there); SIZE_MAX when no rule places anything. Smaller allocations need
// no decision (no look-up of their call site).
size_t placed_from();
// Whether every allocation gets the same decision (the first rule is `all -> TARGET`, not a class),
// and that decision in *d.
bool uniform(Decision *d);
// Forgets what was decided per call site (a module was unloaded; another may take its addresses).
void forget_sites();
// The class rules (a plan's sites) that no allocation matched so far, one line each
// ("FILE:LINE: site ./app+0x51c0 -> class hot 90"); empty when every one occurred.
std::vector<std::string> unused_class_rules();

}  // namespace hm::place
