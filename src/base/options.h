// Every option in one table {name, default, doc}, read from HM_<NAME> environment variables.
#pragma once
#include <cstdint>
#include <string>

namespace hm {

struct OptionSpec {
  const char *name;
  const char *default_value;
  const char *doc;
};

enum class OptionSource { kDefault, kEnvironment, kApi };

// Reads every HM_* variable once. Safe to call again (re-reads).
void options_load();
int option_count();
const OptionSpec &option_spec(int i);
// Effective value as text; nullptr for an unknown name. Reads the environment first if nothing has
// (a layer used before hm_init).
const std::string *option_text(const char *name, OptionSource *source = nullptr);
void option_set(const char *name, const std::string &value);  // records source "api"
const char *option_source_name(OptionSource s);

// Parses "2G", "512MiB", "1.5g", "4096" into bytes. False (and *error set) on malformed text.
bool parse_size(const std::string &text, uint64_t *bytes, std::string *error);
// Reads a size option; on malformed text fails with HM_EFORMAT naming the variable and the text.
int option_size(const char *name, uint64_t *bytes);
int option_int(const char *name, long *value);
// Reads a number in [0, 1]; HM_EFORMAT naming the variable otherwise.
int option_fraction(const char *name, double *value);
std::string format_size(uint64_t bytes);

}  // namespace hm
