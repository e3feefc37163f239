/* Allocates 5000 blocks (more than two event buffers), then ends without a clean exit:
 * dies kill -> waits a little over a second, allocates once more (a thread whose events are a
 * second old writes them), then SIGKILLs itself; dies exit -> _exit(0). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

int main(int argc, char **argv) {
  for (int i = 0; i < 5000; ++i) {
    void *p = malloc(64);
    sink += (unsigned long)p;
  }
  if (argc > 1 && strcmp(argv[1], "kill") == 0) {
    const struct timespec wait = {1, 200000000};
    nanosleep(&wait, NULL);
    sink += (unsigned long)malloc(64);
    raise(SIGKILL);
  }
  _exit(0);
}
