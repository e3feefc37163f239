/* A memkind client as codes are written: built against the system's memkind.h and linked with
 * -lmemkind. Run unchanged with hetmem's libmemkind in its place, it gets hetmem's kinds. Prints
 * what it sees. */
#include <hbwmalloc.h>
#include <memkind.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  printf("version %d\n", memkind_get_version());
  printf("hbw_check_available %d\n", hbw_check_available());
  printf("dax_kmem_available %d\n", memkind_check_available(MEMKIND_DAX_KMEM));
  char *big = memkind_malloc(MEMKIND_DAX_KMEM, 64 << 20);
  if (big) memset(big, 1, 64 << 20);
  printf("dax_kmem_malloc %s\n", big ? "ok" : "NULL");
  memkind_free(MEMKIND_DAX_KMEM, big);
  void *p = NULL;
  printf("hbw_posix_memalign %d\n", hbw_posix_memalign(&p, 64, 4096));
  hbw_free(p);
  char *d = memkind_malloc(MEMKIND_DEFAULT, 100);
  strcpy(d, "default");
  printf("default_malloc %s\n", d);
  memkind_free(NULL, d);
  return 0;
}
