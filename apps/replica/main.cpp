// hetmem-replica: keeps the replica of a PM-octree pool for a primary on another host (seed 003
// §3.4). It listens on a TCP port; a primary opened with replica "tcp://THIS_HOST:PORT" sends each
// version's delta, which lands in the replica pool file at the same offsets and is committed under
// the same version number. A primary whose pool is gone fetches the replica's last version back.
// One primary at a time; stop it with SIGINT or SIGTERM.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hetmem/hetmem.h"
#include "persist/replica.h"
#include "prim/prim.h"

namespace {

const char kUsage[] =
    "usage: hetmem-replica --pool PATH [--port N]\n"
    "  --pool PATH   the replica pool file (made by the first primary that connects)\n"
    "  --port N      TCP port to listen on; 0 (default) picks a free one, printed at start\n";

[[noreturn]] void usage_error(const std::string &why) {
  std::fprintf(stderr, "hetmem-replica: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

}  // namespace

int main(int argc, char **argv) {
  std::string pool;
  long port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--pool" && v) {
      pool = v;
      ++i;
    } else if (a == "--port" && v) {
      char *end = nullptr;
      port = std::strtol(v, &end, 10);
      if (!*v || *end || port < 0 || port > 65535) usage_error(std::string("--port wants 0..65535, got '") + v + "'");
      ++i;
    } else {
      usage_error(v || a.rfind("--", 0) != 0 ? "unknown option '" + a + "'" : a + " needs a value");
    }
  }
  if (pool.empty()) usage_error("--pool is required");
  int listener = -1, bound = 0;
  if (hm::prim::tcp_listen(static_cast<int>(port), &listener, &bound) != HM_OK) {
    std::fprintf(stderr, "hetmem-replica: cannot listen on port %ld: %s\n", port, std::strerror(errno));
    return 1;
  }
  std::printf("hetmem-replica: listening on port %d, replica pool %s\n", bound, pool.c_str());
  std::fflush(stdout);
  for (;;) {
    int fd = -1;
    if (hm::prim::tcp_accept(listener, &fd) != HM_OK) continue;
    if (hm::persist::serve_replica(fd, pool) != HM_OK)
      std::fprintf(stderr, "hetmem-replica: a primary's connection ended with an error: %s\n", hm_last_error());
  }
}
