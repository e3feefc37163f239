#include "place/rules.h"
#include "place/hooks.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "place/classes.h"
#include "prim/elf.h"
#include "prim/prim.h"
#include "tier/tier.h"

namespace hm::place {
namespace {

std::vector<Rule> *g_rules = nullptr;
std::atomic<bool> *g_matched = nullptr;  // per rule: has an allocation matched it
// The indices of the rules that do not depend on the caller (all, size), in file order, and the
// index of the first rule that does (g_rules->size() if none): an allocation checks only those,
// and the one caller rule its call site matches, not every rule of a plan's hundreds of sites.
std::vector<size_t> *g_size_rules = nullptr;
size_t g_first_caller_rule = 0;
std::string *g_rules_file = nullptr;
// HM_CLASS_MIN: a class rule's smaller allocations stay with the C library (a class's cost per
// allocation would outweigh placing a few bytes; sqlite's allocation wrapper makes them all).
uint64_t g_class_min = 4096;

std::string at(const std::string &file, int line, size_t column, const std::string &what) {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column + 1) + ": " + what;
}

// Function ranges [lo, hi) (absolute addresses) whose name contains a fragment, from the symbol
// tables of the loaded objects. Computed once per rule.
struct Ranges {
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
};

void symbols_matching(const char *path, uintptr_t bias, const std::string &fragment, Ranges *out) {
  void *map = nullptr;
  size_t len = 0;
  if (prim::map_file_readonly(path, &map, &len) != HM_OK) return;
  prim::elf::File(map, len).for_each_function(prim::elf::File::Table::kDefined, [&](const prim::elf::Function &f) {
    if (std::strstr(f.name, fragment.c_str()))
      out->spans.emplace_back(bias + f.value, bias + f.value + std::max<uint64_t>(f.size, 1));
  });
  prim::unmap(map, len);
}

std::vector<Ranges> *g_ranges = nullptr;  // one per rule, for function rules

void resolve_functions() {
  g_ranges = new std::vector<Ranges>(g_rules->size());
  for (size_t r = 0; r < g_rules->size(); ++r) {
    const Rule &rule = (*g_rules)[r];
    if (rule.kind != Rule::kFunction) continue;
    struct Ctx {
      const Rule *rule;
      Ranges *out;
    } ctx{&rule, &(*g_ranges)[r]};
    prim::for_each_loaded_object(
        [](const prim::LoadedObject &object, void *data) {
          auto *c = static_cast<Ctx *>(data);
          if (*object.path) symbols_matching(object.path, object.bias, c->rule->text, c->out);
        },
        &ctx);
  }
}

bool site_matches(const Rule &rule, const char *path, uintptr_t base, uintptr_t caller) {
  const size_t n = std::strlen(path), m = rule.text.size();
  const bool module_ok = (n >= m && std::memcmp(path + n - m, rule.text.data(), m) == 0);
  return module_ok && caller - base == rule.offset;
}

constexpr size_t kNoCallerRule = SIZE_MAX;

// The first rule that depends on the caller (function or site) that `caller` matches, or
// kNoCallerRule: one dladdr for the call site, not one per rule.
size_t first_caller_rule(uintptr_t caller) {
  const char *path = nullptr;
  uintptr_t base = 0;
  const bool located = caller && prim::object_at(reinterpret_cast<const void *>(caller), &path, &base);
  for (size_t i = 0; i < g_rules->size(); ++i) {
    const Rule &r = (*g_rules)[i];
    if (r.kind == Rule::kFunction) {
      for (const auto &span : (*g_ranges)[i].spans)
        if (caller >= span.first && caller < span.second) return i;
    } else if (r.kind == Rule::kSite && located && site_matches(r, path, base, caller)) {
      return i;
    }
  }
  return kNoCallerRule;
}

// What first_caller_rule answered for each call site seen, so that an allocation pays a hash
// lookup instead of a symbol lookup (a program allocates from a few thousand sites, millions of
// times). Lock-free open addressing: one word per site, (caller << 16) | (rule + 1), 0xffff for
// "no caller rule", written once with a compare-and-swap, 1 once forgotten; a full neighbourhood
// or an address or rule index that does not fit is answered without the table.
class SiteCache {
 public:
  static constexpr int kSlotBits = 16;
  static constexpr size_t kSlots = size_t{1} << kSlotBits;
  static constexpr int kProbes = 32;
  static constexpr uint64_t kNone = 0xffff;
  static constexpr uint64_t kForgotten = 1;  // caller 0 (never cached), rule 0

  // The table in fresh anonymous pages, which read as zeros (empty) until written: a table built
  // by its constructor was written whole (640 KiB), and every process under a plan faulted in 160
  // pages at start-up for the few its call sites use. nullptr if the pages cannot be mapped.
  static SiteCache *create() {
    void *mem = nullptr;
    if (prim::map_anon(kSlots * (sizeof(uint64_t) + sizeof(uint16_t)), prim::kPageSize, 0, &mem) != HM_OK)
      return nullptr;
    return new SiteCache(static_cast<uint64_t *>(mem));
  }

  size_t lookup(uintptr_t caller) {
    if ((caller >> 48) != 0 || caller == 0 || g_rules->size() >= kNone) return first_caller_rule(caller);
    size_t h = (caller * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits);
    bool decided = false;  // asked once, however many slots another thread takes first
    size_t rule = kNoCallerRule;
    for (int probe = 0; probe < kProbes; ++probe, h = (h + 1) & (kSlots - 1)) {
      uint64_t word = slot(h).load(std::memory_order_acquire);
      if (word == kForgotten) continue;
      if (word == 0) {
        if (!decided) {
          rule = first_caller_rule(caller);
          decided = true;
        }
        const uint64_t mine = (uint64_t{caller} << 16) | (rule == kNoCallerRule ? kNone : rule + 1);
        if (slot(h).compare_exchange_strong(word, mine, std::memory_order_acq_rel)) {
          filled(filled_count_.fetch_add(1, std::memory_order_acq_rel)).store(static_cast<uint16_t>(h),
                                                                               std::memory_order_release);
          return rule;
        }
        if ((word >> 16) == caller) return rule;  // another thread wrote the same answer
        continue;
      }
      if ((word >> 16) == caller) {
        const uint64_t v = word & 0xffff;
        return v == kNone ? kNoCallerRule : v - 1;
      }
    }
    return decided ? rule : first_caller_rule(caller);
  }

  // A module was unloaded: another may be mapped where it was, so the answers for call sites no
  // longer inside a loaded object's code are forgotten (marked, so that the probe sequences that
  // pass them stay whole); those of every object still loaded stand. Only the slots ever filled
  // are looked at (a program has a few thousand call sites; Open MPI closes dozens of components
  // at start-up).
  void forget_unloaded() {
    std::vector<std::pair<uintptr_t, uintptr_t>> code;
    prim::for_each_loaded_object(
        [](const prim::LoadedObject &o, void *ctx) {
          auto *out = static_cast<std::vector<std::pair<uintptr_t, uintptr_t>> *>(ctx);
          for (int i = 0; i < o.code_segments; ++i) out->emplace_back(o.code[i].start, o.code[i].end);
        },
        &code);
    std::sort(code.begin(), code.end());
    const size_t count = filled_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < count; ++i) {
      const std::atomic_ref<uint64_t> at = slot(filled(i).load(std::memory_order_acquire));
      const uint64_t word = at.load(std::memory_order_relaxed);
      if (word == 0 || word == kForgotten) continue;
      const uintptr_t caller = word >> 16;
      auto after = std::upper_bound(code.begin(), code.end(), std::make_pair(caller, UINTPTR_MAX));
      const bool loaded = after != code.begin() && caller < std::prev(after)->second;
      if (!loaded) at.store(kForgotten, std::memory_order_relaxed);
    }
  }

 private:
  explicit SiteCache(uint64_t *pages) : slots_(pages), filled_(reinterpret_cast<uint16_t *>(pages + kSlots)) {}
  std::atomic_ref<uint64_t> slot(size_t h) const { return std::atomic_ref<uint64_t>(slots_[h]); }
  std::atomic_ref<uint16_t> filled(size_t i) const { return std::atomic_ref<uint16_t>(filled_[i]); }

  uint64_t *slots_;   // kSlots words
  // The slots filled, in order (a slot is filled once: it is forgotten, never emptied). An entry
  // not yet written reads as slot 0, which is then merely looked at.
  uint16_t *filled_;  // kSlots entries
  std::atomic<size_t> filled_count_{0};
};

SiteCache *g_sites = nullptr;

}  // namespace

namespace {
// The words of a piece of a rule, one at a time ("" after the last).
class Words {
 public:
  explicit Words(const std::string &text) : words_(prim::words(text)) {}
  std::string next() { return at_ < words_.size() ? words_[at_++] : std::string(); }

 private:
  std::vector<std::string> words_;
  size_t at_ = 0;
};
}  // namespace

int parse_rules(const std::string &text, const std::string &file, std::vector<Rule> *rules, std::string *error) {
  rules->clear();
  int line_no = 0;
  for (const std::string &raw : prim::split(text, '\n')) {
    ++line_no;
    std::string line = raw.substr(0, raw.find('#'));
    size_t arrow = line.find("->");
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (arrow == std::string::npos) {
      *error = at(file, line_no, first, "expected 'CONDITION -> TARGET'");
      return HM_EFORMAT;
    }
    Rule rule;
    rule.line = line_no;
    Words cond(line.substr(0, arrow));
    const std::string word = cond.next();
    size_t col = first;
    if (word == "all") {
      rule.kind = Rule::kAll;
    } else if (word == "size") {
      const std::string op = cond.next();
      const std::string value = cond.next();
      size_t op_col = line.find(op, first + 4);
      if (op == ">=") rule.kind = Rule::kSizeAtLeast;
      else if (op == ">") rule.kind = Rule::kSizeAbove;
      else if (op == "<=") rule.kind = Rule::kSizeAtMost;
      else if (op == "<") rule.kind = Rule::kSizeBelow;
      else {
        *error = at(file, line_no, op.empty() ? arrow : op_col, "expected a comparison (>=, >, <=, <) after 'size'");
        return HM_EFORMAT;
      }
      std::string why;
      if (value.empty() || !parse_size(value, &rule.size, &why)) {
        *error = at(file, line_no, value.empty() ? arrow : line.find(value, op_col + op.size()),
                    "expected a size such as 2M or 4096" + (why.empty() ? "" : " (" + why + ")"));
        return HM_EFORMAT;
      }
    } else if (word == "function") {
      rule.kind = Rule::kFunction;
      rule.text = cond.next();
      if (rule.text.empty()) {
        *error = at(file, line_no, arrow, "expected a function name (or a part of one) after 'function'");
        return HM_EFORMAT;
      }
    } else if (word == "site") {
      rule.kind = Rule::kSite;
      const std::string where = cond.next();
      size_t plus = where.rfind("+0x");
      if (plus == std::string::npos || plus == 0) {
        *error = at(file, line_no, where.empty() ? arrow : line.find(where, first + 4),
                    "expected MODULE+0xOFFSET after 'site' (as `hetmem report` prints it)");
        return HM_EFORMAT;
      }
      rule.text = where.substr(0, plus);
      rule.offset = std::strtoull(where.c_str() + plus + 3, nullptr, 16);
    } else {
      *error = at(file, line_no, col, "unknown condition '" + word + "' (all, size, function, site)");
      return HM_EFORMAT;
    }
    if (const std::string extra = cond.next(); !extra.empty()) {
      *error = at(file, line_no, line.find(extra, first + word.size()), "unexpected '" + extra + "' before '->'");
      return HM_EFORMAT;
    }
    Words target(line.substr(arrow + 2));
    const std::string name = target.next();
    if (name.empty()) {
      *error = at(file, line_no, arrow + 2,
                  "expected a target after '->' (fast, capacity, persistent, a tier, huge, libc, class KIND)");
      return HM_EFORMAT;
    }
    if (name == "class") {
      const std::string kind = target.next();
      const std::string priority = target.next();
      size_t kind_col = kind.empty() ? arrow + 2 : line.find(kind, line.find("class", arrow) + 5);
      int k = class_kind_of(kind);
      if (k < 0) {
        *error = at(file, line_no, kind_col,
                    (kind.empty() ? std::string("expected a kind") : "unknown kind '" + kind + "'") +
                        " after 'class' (metadata, temporary, hot, streaming, cold)");
        return HM_EFORMAT;
      }
      rule.target = Rule::kClass;
      rule.class_kind = k;
      if (!priority.empty()) {
        char *end = nullptr;
        long v = std::strtol(priority.c_str(), &end, 10);
        if (*end || v < 0 || v > 1000000) {
          *error = at(file, line_no, line.find(priority, kind_col + kind.size()),
                      "expected a priority (a whole number, 0 to 1000000) after the kind, not '" + priority + "'");
          return HM_EFORMAT;
        }
        rule.priority = static_cast<int>(v);
      }
      if (const std::string more = target.next(); !more.empty()) {
        *error = at(file, line_no, line.find(more, kind_col + kind.size() + priority.size()),
                    "unexpected '" + more + "' after the class");
        return HM_EFORMAT;
      }
      rule.target_name = line.substr(first, arrow - first);
      rule.target_name.erase(rule.target_name.find_last_not_of(" \t") + 1);
      rules->push_back(rule);
      continue;
    }
    if (const std::string more = target.next(); !more.empty()) {
      *error = at(file, line_no, line.find(more, arrow + 2 + name.size()), "unexpected '" + more + "' after the target");
      return HM_EFORMAT;
    }
    if (name == "huge") rule.target = Rule::kHuge;
    else if (name == "libc") rule.target = Rule::kLibc;
    else rule.target = Rule::kTier;
    rule.target_name = name;
    rules->push_back(rule);
  }
  return HM_OK;
}

int load_rules(const std::string &path, std::vector<Rule> *rules, std::string *error, bool define_classes) {
  std::string text;
  if (!prim::read_text(path, &text)) {
    *error = path + ": cannot read the rules file";
    return HM_EIO;
  }
  int rc = parse_rules(text, path, rules, error);
  if (rc != HM_OK) return rc;
  for (Rule &r : *rules) {
    if (r.target == Rule::kClass) {
      if (!define_classes) continue;
      // One class per rule, named after its condition ("plan site ./app+0x51c0"), so that reports
      // and hm_class_info show where each object came from.
      std::string name = "plan " + r.target_name;
      if (name.size() > 63) name = name.substr(0, 40) + "~line" + std::to_string(r.line);
      hm_class_t cls = -1;
      if (hm_class_define(name.c_str(), static_cast<hm_class_kind_t>(r.class_kind), r.priority, &cls) != HM_OK) {
        *error = path + ":" + std::to_string(r.line) + ": " + hm_last_error();
        return hm_last_error_code();
      }
      r.tier = cls;
      continue;
    }
    if (r.target != Rule::kTier) continue;
    int id = -1;
    if (tier_find(r.target_name, &id) != HM_OK) {
      *error = path + ":" + std::to_string(r.line) + ": " + hm_last_error();
      return HM_ENOTIER;
    }
    r.tier = id;
  }
  return HM_OK;
}

void install(std::vector<Rule> rules) {
  uint64_t class_min = 0;
  if (option_size(Option::kClassMin, &class_min) == HM_OK) g_class_min = class_min;
  g_rules = new std::vector<Rule>(std::move(rules));
  g_matched = new std::atomic<bool>[g_rules->size() + 1]();
  g_size_rules = new std::vector<size_t>();
  g_first_caller_rule = g_rules->size();
  for (size_t i = 0; i < g_rules->size(); ++i) {
    const Rule &r = (*g_rules)[i];
    if (r.kind == Rule::kFunction || r.kind == Rule::kSite) g_first_caller_rule = std::min(g_first_caller_rule, i);
    else g_size_rules->push_back(i);
  }
  if (g_first_caller_rule < g_rules->size()) {  // some rule depends on the caller
    resolve_functions();
    g_sites = SiteCache::create();
  }
}

size_t placed_from() {
  size_t floor = SIZE_MAX;
  if (!g_rules) return floor;
  for (const Rule &r : *g_rules) {
    if (r.target == Rule::kLibc) continue;
    size_t least = 0;  // all, size <= / <, function and site rules match any size
    if (r.kind == Rule::kSizeAtLeast) least = r.size;
    if (r.kind == Rule::kSizeAbove) least = r.size == SIZE_MAX ? SIZE_MAX : r.size + 1;
    if (r.target == Rule::kClass) least = std::max<size_t>(least, g_class_min);
    floor = std::min(floor, least);
  }
  return floor;
}

bool uniform(Decision *d) {
  if (!g_rules || g_rules->empty()) return false;
  const Rule &first = g_rules->front();
  if (first.kind != Rule::kAll || first.target == Rule::kClass) return false;  // a class's use is reported
  d->target = first.target;
  d->tier = first.tier;
  return true;
}

void forget_sites() {
  if (g_sites) g_sites->forget_unloaded();
}

bool installed() { return g_rules && !g_rules->empty(); }

std::vector<std::string> unused_class_rules() {
  std::vector<std::string> out;
  if (!g_rules) return out;
  for (size_t i = 0; i < g_rules->size(); ++i) {
    const Rule &r = (*g_rules)[i];
    if (r.target != Rule::kClass || g_matched[i].load()) continue;
    std::string line = (g_rules_file ? *g_rules_file : std::string("rules")) + ":" + std::to_string(r.line) + ": " +
                       r.target_name + " -> class " + class_kind_name(static_cast<hm_class_kind_t>(r.class_kind));
    if (r.class_kind == HM_CLASS_HOT) line += " " + std::to_string(r.priority);
    out.push_back(line);
  }
  return out;
}

namespace {
bool size_rule_matches(const Rule &r, size_t size) {
  switch (r.kind) {
    case Rule::kAll: return true;
    case Rule::kSizeAtLeast: return size >= r.size;
    case Rule::kSizeAbove: return size > r.size;
    case Rule::kSizeAtMost: return size <= r.size;
    case Rule::kSizeBelow: return size < r.size;
    case Rule::kFunction:
    case Rule::kSite: break;
  }
  return false;
}

Decision matched(size_t i, size_t size) {
  const Rule &r = (*g_rules)[i];
  if (r.target == Rule::kClass && size < g_class_min) return Decision{};
  // Only "placed nothing" is reported: a flag, not a counter every thread increments.
  if (!g_matched[i].load(std::memory_order_relaxed)) g_matched[i].store(true, std::memory_order_relaxed);
  Decision d;
  d.target = r.target;
  d.tier = r.tier;
  return d;
}
}  // namespace

// The first rule in file order that matches: the caller-independent rules before the first caller
// rule need no look-up of the call site; past it, the call site's one caller rule (a hash look-up)
// competes with the caller-independent rules before it.
Decision decide(size_t size, const void *caller) {
  if (!g_rules) return Decision{};
  const std::vector<size_t> &sized = *g_size_rules;
  size_t k = 0;
  for (; k < sized.size() && sized[k] < g_first_caller_rule; ++k)
    if (size_rule_matches((*g_rules)[sized[k]], size)) return matched(sized[k], size);
  if (g_first_caller_rule == g_rules->size()) return Decision{};
  const size_t caller_rule =
      g_sites ? g_sites->lookup(reinterpret_cast<uintptr_t>(caller)) : first_caller_rule(reinterpret_cast<uintptr_t>(caller));
  for (; k < sized.size() && sized[k] < caller_rule; ++k)
    if (size_rule_matches((*g_rules)[sized[k]], size)) return matched(sized[k], size);
  return caller_rule == kNoCallerRule ? Decision{} : matched(caller_rule, size);
}

}  // namespace hm::place

namespace {
// Reads, checks and (when asked) installs a rules file; the message goes to error.
int load_file(const char *path, bool and_install, char *error, size_t error_len) {
  std::vector<hm::place::Rule> rules;
  std::string why;
  int rc = hm_init();
  if (rc == HM_OK) {
    try {
      rc = hm::place::load_rules(path ? path : "", &rules, &why, and_install);
      if (rc == HM_OK && and_install) {
        hm::place::install(std::move(rules));
        hm::place::g_rules_file = new std::string(path);
      }
    } catch (...) {
      rc = HM_ENOMEM;
      why = "out of memory";
    }
  } else {
    why = hm_last_error();
  }
  if (rc != HM_OK && error && error_len) std::snprintf(error, error_len, "%s", why.c_str());
  return rc;
}
}  // namespace

extern "C" {

int hm_rules_check(const char *path, char *error, size_t error_len) { return load_file(path, false, error, error_len); }

int hm_rules_install(const char *path, char *error, size_t error_len) { return load_file(path, true, error, error_len); }

namespace {
hm_rules_target_t target_of(const hm::place::Decision &d, int *tier) {
  if (tier) *tier = d.tier;
  switch (d.target) {
    case hm::place::Rule::kTier: return HM_RULES_TIER;
    case hm::place::Rule::kHuge: return HM_RULES_HUGE;
    case hm::place::Rule::kClass: return HM_RULES_CLASS;
    default: return HM_RULES_LIBC;
  }
}
}  // namespace

hm_rules_target_t hm_rules_decide(size_t size, const void *caller, int *tier) {
  return target_of(hm::place::decide(size, caller), tier);
}

int hm_rules_uniform(hm_rules_target_t *target, int *tier) {
  hm::place::Decision d;
  if (!hm::place::uniform(&d)) return 0;
  *target = target_of(d, tier);
  return 1;
}

size_t hm_rules_placed_from(void) { return hm::place::placed_from(); }

void hm_rules_forget_sites(void) { hm::place::forget_sites(); }

void hm_rules_report_unused(int fd) {
  std::vector<std::string> unused = hm::place::unused_class_rules();
  if (unused.empty()) return;
  hm::prim::print_fd(fd,
                     "hetmem: %zu plan site(s) placed nothing in this run of %s (process %d): no allocation of "
                     "HM_CLASS_MIN (%zu B) or more came from them (not an error: the run took another path):\n",
                     unused.size(), hm::prim::program_name(), hm::prim::process_id(),
                     static_cast<size_t>(hm::place::g_class_min));
  for (const std::string &u : unused) hm::prim::print_fd(fd, "  %s\n", u.c_str());
}

}  // extern "C"
