// Every form of operator new and delete, a known number of times each.
#include <cstdio>
#include <initializer_list>
#include <new>

struct alignas(64) Wide {
  double v[8];
};

volatile unsigned long sink;

__attribute__((noinline)) void forms() {
  for (int i = 0; i < 10; ++i) {
    int *a = new int(1);
    int *b = new int[25];
    int *c = new (std::nothrow) int(2);
    int *d = new (std::nothrow) int[7];
    Wide *e = new Wide();
    Wide *f = new Wide[3];
    // Every pointer escapes, so the compiler cannot elide a new/delete pair.
    for (void *p : {static_cast<void *>(a), static_cast<void *>(b), static_cast<void *>(c), static_cast<void *>(d),
                    static_cast<void *>(e), static_cast<void *>(f)})
      sink += reinterpret_cast<unsigned long>(p);
    delete a;
    delete[] b;
    ::operator delete(c, std::nothrow);
    ::operator delete[](d, std::nothrow);
    delete e;
    delete[] f;
  }
}

int main() {
  forms();
  return 0;
}
