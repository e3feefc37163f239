// operator new under the preload library in a program with no C++ runtime to share (libstdc++
// linked in, nothing of it exported), called by looking it up: out of memory, the preload library
// (which carries no runtime) has no std::bad_alloc to throw that this program's unwinder could
// catch. Prints what happened; exits 2 if no operator new could be found to call.
#include <dlfcn.h>

#include <cstdio>
#include <new>

int main() {
  using NewArray = void *(*)(size_t);
  auto new_array = reinterpret_cast<NewArray>(dlsym(RTLD_DEFAULT, "_Znam"));
  if (!new_array) {
    std::puts("no operator new[] to call");
    return 2;
  }
  bool caught = false;
  try {
    void *p = new_array(static_cast<size_t>(1) << 62);
    std::printf("allocated %p\n", p);
  } catch (const std::bad_alloc &) {
    caught = true;
  }
  std::printf("bad_alloc caught %s\n", caught ? "yes" : "no");
  return caught ? 0 : 1;
}
