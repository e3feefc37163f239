// Every option in one table {id, name, default, doc}, read from HM_<NAME> environment variables
// (mimalloc's options.c is the model): code reads an option by its enum, never by its name; the
// names are for users (the environment, `hetmem options`, hm_option_get).
#pragma once
#include <cstdint>
#include <string>

namespace hm {

enum class Option : int {
  kTiers,
  kFastBudget,
  kCapacityBudget,
  kPersistentBudget,
  kPoolSize,
  kHugetlbPool,
  kHugetlb1G,
  kThp,
  kEmul,
  kPolicy,
  kMigrationSpace,
  kHelpers,
  kPrefetchDistance,
  kSampleBudget,
  kCalibration,
  kNtThreshold,
  kRetain,
  kDefaultRole,
  kVerbose,
  kProfile,
  kSummary,
  kProfileDepth,
  kProfileLarge,
  kProfileStackMin,
  kProfileSample,
  kProfileChildren,
  kProfileRootPid,
  kIterationWindow,
  kIterationAt,
  kRules,
  kClassMin,
  kReplicaKey,
  kPmCheck,
  kPmThp,
  kMemkind,
  kCount
};

// Ranges an option shares with the code behind it (the table checks them, the code sizes by them).
constexpr int kMaxProfileDepth = 32;      // HM_PROFILE_DEPTH: return addresses per call site
constexpr int kMaxPrefetchDistance = 64;  // HM_PREFETCH_DISTANCE and the prefetch model's k: units ahead

// What an option's text must be; hm_init refuses a value that is not (naming the variable, the
// text and what it expects), so that code reading a checked option parses it without a fallback.
enum class OptionKind : uint8_t {
  kText,      // anything (names, paths, lists parsed by their own layer)
  kSize,      // bytes: "2G", "512MiB", "4096"
  kSwitch,    // 0 or 1
  kInteger,   // an integer from lo to hi; empty when the default is empty (unset)
  kNumber,    // a decimal number from lo to hi
  kFraction,  // a number from 0 to 1
};

struct OptionSpec {
  Option id;
  const char *name;
  const char *default_value;
  const char *doc;
  OptionKind kind = OptionKind::kText;
  double lo = 0, hi = 0;  // kInteger and kNumber
};

enum class OptionSource { kDefault, kEnvironment, kApi };

// Reads every HM_* variable once. Safe to call again (re-reads).
void options_load();
// The next read loads the environment again (hm_finalize: a new initialisation reads it afresh).
void options_forget();
int option_count();
const OptionSpec &option_spec(int i);
const char *option_name(Option id);  // "HM_FAST_BUDGET"
const char *option_default(Option id);  // the table's default ("" for none)
// Effective value as text. Reads the environment first if nothing has (a layer used before hm_init).
const std::string &option_text(Option id, OptionSource *source = nullptr);
// The same by name, for the C API (hm_option_get); nullptr for an unknown name.
const std::string *option_text(const char *name, OptionSource *source = nullptr);
// The option called `name`; false for an unknown name.
bool option_find(const char *name, Option *id);
void option_set(const char *name, const std::string &value);  // records source "api"
const char *option_source_name(OptionSource s);

// Parses "2G", "512MiB", "1.5g", "4096" into bytes. False (and *error set) on malformed text.
bool parse_size(const std::string &text, uint64_t *bytes, std::string *error);
// Reads a size option; on malformed text fails with HM_EFORMAT naming the variable and the text.
int option_size(Option id, uint64_t *bytes);
int option_int(Option id, long *value);
std::string format_size(uint64_t bytes);

// HM_OK when `text` is a value option `id` accepts (its kind and range), else HM_EFORMAT with
// "NAME='text': what is expected" as the last error.
int option_check(Option id, const std::string &text);
// Checks every option's effective value that is not its default (hm_init, before it reads any).
int options_check();
// A checked numeric option's value: bytes for a size, 0/1 for a switch; NaN for an empty
// (unset) integer. HM_EFORMAT as option_check for a malformed one.
int option_number(Option id, double *value);

}  // namespace hm
