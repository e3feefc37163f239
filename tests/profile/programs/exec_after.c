/* 100 mallocs and 50 frees, then the process replaces itself: execlp("true"). The trace must hold
 * all 150 events and say that the process exec'd. */
#include <stdlib.h>
#include <unistd.h>

volatile unsigned long sink;

int main(void) {
  void *keep[100];
  for (int i = 0; i < 100; ++i) keep[i] = malloc(100 + i);
  for (int i = 0; i < 50; ++i) free(keep[i]);
  sink = (unsigned long)keep[99];
  execlp("true", "true", (char *)0);
  return 3;
}
