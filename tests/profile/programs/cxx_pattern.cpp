// Every form of operator new and delete, a known number of times each.
#include <cstdio>
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
    sink += reinterpret_cast<unsigned long>(a) + reinterpret_cast<unsigned long>(f);
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
