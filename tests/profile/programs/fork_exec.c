/* fork: the child allocates 77 blocks; exec: a program started with execv allocates 55 blocks.
 * The parent allocates 10. Usage: fork_exec [child-exec] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile unsigned long sink;

__attribute__((noinline)) static void blocks(int n, size_t size) {
  for (int i = 0; i < n; ++i) {
    void *p = malloc(size);
    sink += (unsigned long)p;
    free(p);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child-exec") == 0) {
    blocks(55, 333);
    return 0;
  }
  blocks(10, 111);
  pid_t pid = fork();
  if (pid == 0) {
    blocks(77, 222);
    exit(0);  /* a clean exit: the child's trace gets its end record */
  }
  waitpid(pid, NULL, 0);
  pid = fork();
  if (pid == 0) {
    char *args[] = {argv[0], "child-exec", NULL};
    execv("/proc/self/exe", args);
    _exit(3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
