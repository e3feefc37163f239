#include "base/error.h"

#include <cstdio>
#include <cstring>

#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm {
namespace {
constexpr size_t kMessageBytes = 512;
thread_local int t_code = HM_OK;
// The thread's last message, in a block of its own (prim::thread_block: not in the static TLS
// block); a thread that could not map one shares the fallback.
thread_local char *t_message = nullptr;
prim::ThreadBlockKey g_message_key;
char g_fallback_message[kMessageBytes];
int g_log_level = 0;

void record(int code, const char *fmt, va_list ap) {
  char text[kMessageBytes];  // the arguments may include the previous message
  vsnprintf(text, sizeof text, fmt, ap);
  if (!t_message) t_message = static_cast<char *>(prim::thread_block(&g_message_key, kMessageBytes));
  char *message = t_message ? t_message : g_fallback_message;
  std::memcpy(message, text, sizeof text);
  t_code = code;
  log(1, "%s", message);
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

const char *hm_last_error(void) { return hm::t_message ? hm::t_message : hm::g_fallback_message; }
int hm_last_error_code(void) { return hm::t_code; }

const char *hm_version(void) { return HM_VERSION_STRING; }

}  // extern "C"
