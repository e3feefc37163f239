// Error reporting: a thread-local last error (code + message) behind hm_last_error().
#pragma once
#include <cstdarg>

namespace hm {

// Records code and a printf-style message as the calling thread's last error; returns code so
// that callers can write `return fail(HM_EINVAL, "...")`.
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The same, returning nullptr for allocation paths.
void *fail_null(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Writes a diagnostic line to stderr when HM_VERBOSE >= level (without allocating).
void log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void set_log_level(int level);

}  // namespace hm
