#include "base/error.h"

#include <cstdio>
#include <cstring>

#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm {
namespace {
thread_local int t_code = HM_OK;
thread_local char t_message[512];
int g_log_level = 0;

void record(int code, const char *fmt, va_list ap) {
  char text[sizeof t_message];  // the arguments may include the previous message
  vsnprintf(text, sizeof text, fmt, ap);
  std::memcpy(t_message, text, sizeof text);
  t_code = code;
  log(1, "%s", t_message);
}
}  // namespace

int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(code, fmt, ap);
  va_end(ap);
  return code;
}

void *fail_null(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(code, fmt, ap);
  va_end(ap);
  return nullptr;
}

void set_log_level(int level) { g_log_level = level; }

void log(int level, const char *fmt, ...) {
  if (level > g_log_level) return;
  char line[600];
  int n = snprintf(line, sizeof line, "hetmem: ");
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - static_cast<size_t>(n), fmt, ap);
  va_end(ap);
  if (n > static_cast<int>(sizeof line) - 2) n = static_cast<int>(sizeof line) - 2;
  line[n++] = '\n';
  prim::write_fd(2, line, static_cast<size_t>(n));
}

}  // namespace hm

extern "C" {

const char *hm_strerror(int code) {
  switch (code) {
    case HM_OK: return "success";
    case HM_ENOMEM: return "out of memory: the operating system refused the mapping";
    case HM_EBUDGET: return "over budget: the tier's budget cannot hold the request";
    case HM_EINVAL: return "invalid argument";
    case HM_ENOTIER: return "unknown tier or role";
    case HM_EFORMAT: return "malformed configuration or file";
    case HM_EIO: return "file could not be created, sized, mapped or synced";
    case HM_ENOTSUP: return "operation not supported for this tier or allocation";
    case HM_ENOTOWNED: return "pointer not allocated by hetmem";
    case HM_EINIT: return "hetmem failed to initialise";
    case HM_ECAPACITY: return "the tier's backing is full";
    case HM_EBUSY: return "in use by another process";
    case HM_EAUTH: return "authentication failed";
    default: return "unknown error code";
  }
}

const char *hm_last_error(void) { return hm::t_message; }
int hm_last_error_code(void) { return hm::t_code; }

const char *hm_version(void) { return HM_VERSION_STRING; }

}  // extern "C"
