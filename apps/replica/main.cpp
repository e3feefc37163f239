// hetmem-replica: keeps the replica of a PM-octree pool for a primary on another host (Nguyen et al. (SC'17)
// §3.4). It listens on a TCP address; a primary opened with replica "tcp://THIS_HOST:PORT" sends
// each version's delta, which lands in the replica pool file at the same offsets and is committed
// under the same version number. A primary whose pool is gone fetches the replica's last version
// back. Every primary proves it holds a shared key (by default ~/.hetmem/replica.key, made on first
// use); stop it with SIGINT or SIGTERM (docs/replica.md: the threat model).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "hetmem/hetmem.h"
#include "hetmem/pm_octree.h"

namespace {

const char kUsage[] =
    "usage: hetmem-replica --pool PATH [--listen ADDRESS:PORT] [--key FILE | --unauthenticated]\n"
    "  --pool PATH            the replica pool file (made by the first primary that connects)\n"
    "  --listen ADDRESS:PORT  where to listen; default 127.0.0.1:0 (this host only, a free port,\n"
    "                         printed at start)\n"
    "  --port N               the same as --listen 127.0.0.1:N\n"
    "  --key FILE             the shared key (owner-only file, at least 16 bytes): primaries must\n"
    "                         prove they hold it (HM_REPLICA_KEY=FILE on their side), and so does\n"
    "                         this server. Default ~/.hetmem/replica.key, made on first use; a\n"
    "                         primary sharing this home directory finds it by itself\n"
    "  --unauthenticated      no key: anyone who can connect may overwrite or fetch the replica\n"
    "                         (loopback addresses only; a login or compute node is shared)\n";

[[noreturn]] void usage_error(const std::string &why) {
  std::fprintf(stderr, "hetmem-replica: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

struct Where {
  std::string pool;
  std::string key;  // "" : unauthenticated
  bool key_made;
};

void ready(const char *address, int port, void *arg) {
  const auto *w = static_cast<const Where *>(arg);
  if (w->key_made)
    std::printf("hetmem-replica: made the key file %s (owner-only); primaries on hosts that do not share this home "
                "directory need a copy (HM_REPLICA_KEY=FILE)\n", w->key.c_str());
  if (w->key.empty())
    std::printf("hetmem-replica: listening on %s port %d, replica pool %s, UNAUTHENTICATED (anyone on this host may "
                "overwrite or fetch it)\n", address, port, w->pool.c_str());
  else
    std::printf("hetmem-replica: listening on %s port %d, replica pool %s, primaries must hold the key %s\n", address,
                port, w->pool.c_str(), w->key.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
  std::string pool, listen = "127.0.0.1:0", key;
  bool unauthenticated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--version") {
      std::printf("hetmem-replica %s\n", hm_version());
      return 0;
    } else if (a == "--pool" && v) {
      pool = v;
      ++i;
    } else if (a == "--listen" && v) {
      listen = v;
      ++i;
    } else if (a == "--key" && v) {
      key = v;
      ++i;
    } else if (a == "--unauthenticated") {
      unauthenticated = true;
    } else if (a == "--port" && v) {
      char *end = nullptr;
      long port = std::strtol(v, &end, 10);
      if (!*v || *end || port < 0 || port > 65535) usage_error(std::string("--port wants 0..65535, got '") + v + "'");
      listen = "127.0.0.1:" + std::to_string(port);
      ++i;
    } else {
      usage_error(v || a.rfind("--", 0) != 0 ? "unknown option '" + a + "'" : a + " needs a value");
    }
  }
  if (pool.empty()) usage_error("--pool is required");
  if (unauthenticated && !key.empty()) usage_error("--unauthenticated and --key contradict each other");
  int rc;
  if (unauthenticated) {
    Where where{pool, "", false};
    rc = pm_replica_serve_unauthenticated(listen.c_str(), pool.c_str(), ready, &where);
  } else {
    const std::string file = key.empty() ? pm_replica_default_key() : key;
    Where where{pool, file, key.empty() && !file.empty() && access(file.c_str(), F_OK) != 0};
    rc = pm_replica_serve(listen.c_str(), pool.c_str(), key.empty() ? nullptr : key.c_str(), ready, &where);
  }
  std::fprintf(stderr, "hetmem-replica: %s\n", hm_last_error());
  return rc == HM_EINVAL || rc == HM_EAUTH ? 2 : 1;
}
