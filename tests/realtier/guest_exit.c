/* Ends a QEMU guest with a status the host can read: writes it to the isa-debug-exit port (0xf4),
 * and QEMU exits with (status << 1) | 1. A guest that never gets here makes QEMU exit 0 (power
 * off, panic) or time out, so a pass cannot happen by accident. Static, runs from the initramfs. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/io.h>

int main(int argc, char **argv) {
  int status = argc > 1 ? atoi(argv[1]) : 1;
  if (ioperm(0xf4, 4, 1) != 0) {
    perror("guest-exit: ioperm");
    return 1;
  }
  outl((unsigned)status, 0xf4);
  return 0;
}
