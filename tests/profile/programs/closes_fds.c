/* What a launcher's child does before it execs the real program (Open MPI's daemons do it): every
 * descriptor above stderr closed, then numbers handed out again, here to a file of the program's
 * own on every number from 3 to 399. 100 mallocs before and 100 after, then a line into its own
 * file through each of those numbers. Its file must hold only its own lines; the trace must hold
 * all 200 allocations. With a second path, that file is removed first (the trace, by a program that
 * cleans its directory): then the profile must stop with a message and the program go on. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile unsigned long sink;

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: %s OWN_FILE [REMOVE_FIRST]\n", argv[0]);
    return 2;
  }
  void *keep[200];
  for (int i = 0; i < 100; ++i) keep[i] = malloc(300 + i);
  if (argc == 3 && unlink(argv[2]) != 0) return 6;
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  int own = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (own < 0) return 3;
  for (int fd = 3; fd < 400; ++fd)
    if (fd != own && dup2(own, fd) != fd) return 4;
  for (int i = 100; i < 200; ++i) keep[i] = malloc(300 + i);
  for (int fd = 3; fd < 400; ++fd)
    if (write(fd, "mine\n", 5) != 5) return 5;
  for (int i = 0; i < 200; ++i) sink += (unsigned long)keep[i];
  return 0;
}
