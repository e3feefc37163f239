/* What a real program does to the allocator that the preload library must survive, each checked
 * here and reported as one line "name ok" or "name FAILED: why" (exit 1 if any failed):
 * - realloc through every size class, up and down, with the contents checked at each step;
 * - the C library's statistics and knobs hetmem does not replace (mallinfo, mallinfo2,
 *   malloc_info, malloc_stats, malloc_trim, mallopt, malloc_usable_size of any pointer);
 * - fork, vfork + exec and posix_spawn while two other threads allocate and free, each child
 *   allocating too: a lock held by a thread the child does not have would hang it (the test's
 *   caller stops a hung run). */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static int failures = 0;

static void report(const char *name, const char *why) {
  if (why) {
    printf("%s FAILED: %s\n", name, why);
    ++failures;
  } else {
    printf("%s ok\n", name);
  }
  fflush(stdout);
}

static int filled(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return 0;
  return 1;
}

static const char *realloc_every_size_class(void) {
  /* small, medium, 1-2 MiB (a profiled object of its own), large, huge-page sized, then back */
  const size_t sizes[] = {24, 200, 3000, 70000, 300000, 1200000, 3u << 20, 9u << 20, 40u << 20,
                          5u << 20, 700000, 100, 16, 5000000, 64};
  unsigned char *p = NULL;
  size_t have = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    size_t n = sizes[i];
    unsigned char *q = realloc(p, n);
    if (!q) return "realloc returned NULL";
    size_t keep = have < n ? have : n;
    if (!filled(q, keep, (unsigned char)i)) return "contents lost across realloc";
    if (malloc_usable_size(q) < n) return "malloc_usable_size below the requested size";
    memset(q, (int)(i + 1), n);
    p = q;
    have = n;
  }
  free(p);
  void *z = realloc(NULL, 1 << 20);
  if (!z) return "realloc(NULL) failed";
  if (realloc(z, 0) != NULL) return "realloc(p, 0) did not free";
  return NULL;
}

static const char *statistics_and_knobs(void) {
  struct mallinfo2 before = mallinfo2();
  size_t big = 64u << 20;
  char *p = malloc(big);
  if (!p) return "malloc of 64 MiB failed";
  memset(p, 1, big);
  struct mallinfo2 during = mallinfo2();
  if (during.uordblks + during.hblkhd < before.uordblks + before.hblkhd + big)
    return "mallinfo2 does not count a live 64 MiB block";
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();  /* the old int interface, still called by older codes */
#pragma GCC diagnostic pop
  (void)old;
  if (malloc_usable_size(NULL) != 0) return "malloc_usable_size(NULL) is not 0";
  if (malloc_usable_size(p) < big) return "malloc_usable_size of a large block too small";
  FILE *sink = fopen("/dev/null", "w");
  if (!sink || malloc_info(0, sink) != 0) return "malloc_info failed";
  fclose(sink);
  int saved = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  malloc_stats();
  dup2(saved, 2);
  close(null);
  close(saved);
  if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1) return "mallopt refused";
  free(p);
  malloc_trim(0);
  char *small = malloc(100);
  if (!small) return "malloc after malloc_trim failed";
  free(small);
  return NULL;
}

static atomic_int stop;

static void *churn(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *held[64] = {0};
  while (!atomic_load(&stop)) {
    seed = seed * 1103515245u + 12345u;
    int i = (int)(seed >> 16) % 64;
    free(held[i]);
    size_t n = (seed % 7 == 0) ? (1u << 20) + (seed % 5000) : 16 + seed % 9000;
    held[i] = malloc(n);
    if (held[i]) memset(held[i], 1, n < 4096 ? n : 4096);
  }
  for (int i = 0; i < 64; ++i) free(held[i]);
  return NULL;
}

static int child_allocates(void) {
  for (int i = 0; i < 200; ++i) {
    void *p = malloc(i % 3 ? (size_t)(64 + i) : (1u << 20) + (size_t)i);
    if (!p) return 3;
    memset(p, 2, 64);
    free(p);
  }
  return 0;
}

static const char *forks_under_threads(const char *self) {
  pthread_t t[2];
  atomic_store(&stop, 0);
  for (int i = 0; i < 2; ++i) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 7));
  const char *why = NULL;
  for (int round = 0; round < 40 && !why; ++round) {
    pid_t pid = fork();
    if (pid == 0) {  /* half the children leave through exit(): the libraries' destructors run there */
      int rc = child_allocates();
      if (round % 2) exit(rc);
      _exit(rc);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      why = "a forked child that allocates failed";
  }
  for (int round = 0; round < 10 && !why; ++round) {
    pid_t pid = vfork();
    if (pid == 0) {
      execl(self, self, "--child", (char *)NULL);
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      why = "a vfork'd child that execs failed";
  }
  for (int round = 0; round < 10 && !why; ++round) {
    pid_t pid;
    char *argv[] = {(char *)self, "--child", NULL};
    int status = 0;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) != 0 || waitpid(pid, &status, 0) != pid ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      why = "a posix_spawn'd child failed";
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  return why;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_allocates();
  report("realloc", realloc_every_size_class());
  report("statistics", statistics_and_knobs());
  report("fork", forks_under_threads(argv[0]));
  return failures ? 1 : 0;
}
