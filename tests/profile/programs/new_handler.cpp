// A C++ program's new handler and std::bad_alloc under the preload library, whose operator new
// replaces the program's: the handler the program set is called, and the bad_alloc it catches is
// its own runtime's. Prints what happened; exits 1 if anything differs from the C++ standard.
#include <cstdio>
#include <new>

static int g_calls = 0;

static void handler() {
  ++g_calls;
  std::set_new_handler(nullptr);  // the next failure throws
}

int main() {
  std::set_new_handler(handler);
  volatile size_t huge = static_cast<size_t>(1) << 62;
  bool caught = false;
  try {
    char *p = new char[huge];
    std::printf("allocated %p\n", static_cast<void *>(p));
  } catch (const std::bad_alloc &) {
    caught = true;
  }
  char *q = new (std::nothrow) char[huge];
  std::printf("handler calls %d, bad_alloc caught %s, nothrow %s\n", g_calls, caught ? "yes" : "no",
              q ? "allocated" : "null");
  return g_calls == 1 && caught && !q ? 0 : 1;
}
