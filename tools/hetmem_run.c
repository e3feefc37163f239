/* hetmem-run: `hetmem run` and `hetmem profile` in C, for each rank of an MPI job and for machines
 * without Python.
 *   hetmem-run [--rules FILE | --plan FILE] [--policy NAME] [--memkind] [--iteration-at FUNCTION]
 *              [--window SECONDS] [--] PROGRAM [ARGS...]
 *   hetmem-run --profile TRACE [--depth N] [--large SIZE] [--sample BYTES] [--children]
 *              [--iteration-at FUNCTION] [--window SECONDS] [--] PROGRAM [ARGS...]
 *   hetmem-run --version
 * Starts PROGRAM (exec: it takes this process's place) with the environment `hetmem run` (or, with
 * --profile, `hetmem profile -o TRACE`) gives it (docs/cli.md), after the same checks: the
 * environment's HM_* options, the policy, the rules file, the profile's options. Under an MPI
 * launcher that started several ranks each rank's trace is TRACE.rankN, as the command names it.
 * Having exec'd, it cannot check afterwards that a trace was written as the command does:
 * `hetmem report` says so of a missing or partial one.
 * `mpirun -n 1024 hetmem-run --plan P -- PROGRAM` costs each rank under 2 ms where the
 * Python command costs each rank its interpreter's start-up (about 25 ms here, more from a shared file
 * system). Exit status: the program's; 2 with a message for a bad option, file or policy; 127 or
 * 126 with the shell's message for a program that is not found or cannot be run.
 * --iteration-at takes a symbol (what `nm -D` lists) or a C++ name; `hetmem run` checks it before
 * the program starts, hetmem-run leaves it to the preload library, which says why at the program's
 * start when it cannot hook it. */
#define _GNU_SOURCE
#include <hetmem/hetmem.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char kUsage[] =
    "usage: hetmem-run [--rules FILE | --plan FILE] [--policy NAME] [--memkind] [--iteration-at FUNCTION] "
    "[--window SECONDS] [--] PROGRAM [ARGS...]\n"
    "       hetmem-run --profile TRACE [--depth N] [--large SIZE] [--sample BYTES] [--children] "
    "[--iteration-at FUNCTION] [--window SECONDS] [--] PROGRAM [ARGS...]\n";

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fputs("hetmem-run: error: ", stderr);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
  return 2;
}

/* `path` made absolute against the working directory and normalised as Python's os.path.abspath
 * does (no ".", "..", or repeated "/"; symbolic links kept): the HM_RULES `hetmem run` sets. */
static int absolute_path(const char *path, char *out, size_t len) {
  char joined[2 * PATH_MAX];
  char cwd[PATH_MAX];
  if (path[0] == '/') snprintf(joined, sizeof joined, "%s", path);
  else if (getcwd(cwd, sizeof cwd)) snprintf(joined, sizeof joined, "%s/%s", cwd, path);
  else return -1;
  size_t n = 0;
  for (char *part = strtok(joined, "/"); part; part = strtok(NULL, "/")) {
    if (strcmp(part, ".") == 0) continue;
    if (strcmp(part, "..") == 0) {
      while (n > 0 && out[--n] != '/') {}
      continue;
    }
    int w = snprintf(out + n, len - n, "/%s", part);
    if (w < 0 || (size_t)w >= len - n) return -1;
    n += (size_t)w;
  }
  if (n == 0) snprintf(out, len, "/");
  else out[n] = '\0';
  return 0;
}

/* The directory of the libhetmem.so this program runs with: the preload library and hetmem's
 * libmemkind are found beside it, as the hetmem command finds them. */
static int library_dir(char *dir, size_t len) {
  Dl_info info;
  char real[PATH_MAX];
  if (!dladdr((void *)hm_init, &info) || !info.dli_fname || !realpath(info.dli_fname, real)) return -1;
  char *slash = strrchr(real, '/');
  if (!slash) return -1;
  *slash = '\0';
  return snprintf(dir, len, "%s", real) < (int)len ? 0 : -1;
}

static int is_file(const char *path) { return access(path, F_OK) == 0; }

/* Sets `name` to `head`, followed by its value before, if any, after a ':'. */
static int set_before(const char *name, const char *head) {
  const char *old = getenv(name);
  const size_t n = strlen(head) + (old ? strlen(old) : 0) + 2;
  char *value = malloc(n);
  if (!value) return fail("out of memory");
  snprintf(value, n, "%s%s%s", head, old && *old ? ":" : "", old && *old ? old : "");
  setenv(name, value, 1);
  free(value);
  return 0;
}

/* LD_PRELOAD: libhetmem.so.0, then the preload library, then what it held (lib.preload_value). */
static int set_preload(const char *dir) {
  char preload[PATH_MAX + 32];
  const char *explicit_preload = getenv("HETMEM_PRELOAD");
  if (explicit_preload && *explicit_preload) {
    snprintf(preload, sizeof preload, "%.*s", PATH_MAX, explicit_preload);
  } else {
    snprintf(preload, sizeof preload, "%s/libhetmem_preload.so", dir);
    if (!is_file(preload)) return fail("libhetmem_preload.so not found next to libhetmem.so (%s)", dir);
  }
  /* libhetmem.so.0 from the preload library's directory, when it is there. */
  char head[3 * PATH_MAX];
  const char *slash = strrchr(preload, '/');
  const int dir_length = slash ? (int)(slash - preload) : 1;
  snprintf(head, sizeof head, "%.*s/libhetmem.so.0", dir_length, slash ? preload : ".");
  if (is_file(head)) snprintf(head + strlen(head), sizeof head - strlen(head), ":%s", preload);
  else snprintf(head, sizeof head, "%s", preload);
  return set_before("LD_PRELOAD", head);
}

/* hetmem's libmemkind first on LD_LIBRARY_PATH (lib.find_memkind_dir). */
static int set_memkind(const char *dir) {
  static const char *const kDirs[] = {"memkind", "hetmem-memkind"};
  for (size_t i = 0; i < sizeof kDirs / sizeof kDirs[0]; ++i) {
    char candidate[PATH_MAX + 32], lib[PATH_MAX + 64], real[PATH_MAX];
    snprintf(candidate, sizeof candidate, "%s/%s", dir, kDirs[i]);
    snprintf(lib, sizeof lib, "%s/libmemkind.so.0", candidate);
    if (is_file(lib) && realpath(candidate, real)) return set_before("LD_LIBRARY_PATH", real);
  }
  return fail("hetmem's libmemkind.so.0 not found next to libhetmem.so (%s): build the project (scripts/setup.sh)", dir);
}

/* The option's value: "--name VALUE" or "--name=VALUE" at argv[*i] (advanced past it); NULL if
 * argv[*i] is not this option. A missing value is said and ends the program. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  if (*i + 1 >= argc) exit(fail("%s needs a value", name));
  return argv[++*i];
}

/* This process's rank when an MPI launcher started several (Open MPI, MPICH/PMI, Slurm), else -1:
 * the command's _mpi_rank. */
static long mpi_rank(void) {
  static const char *const kVariables[][2] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                              {"PMI_SIZE", "PMI_RANK"},
                                              {"SLURM_NTASKS", "SLURM_PROCID"}};
  for (size_t i = 0; i < sizeof kVariables / sizeof kVariables[0]; ++i) {
    const char *size = getenv(kVariables[i][0]), *rank = getenv(kVariables[i][1]);
    char *end;
    if (!size || !rank || strtol(size, &end, 10) <= 1 || *end) continue;
    long r = strtol(rank, &end, 10);
    if (*rank && !*end && r >= 0) return r;
  }
  return -1;
}

/* The profile's options checked by the library and set for the program, as `hetmem profile` sets
 * them; an option not given is left to the environment and the library's default (base/options.cpp). */
struct Profile {
  const char *trace, *depth, *large, *sample;
  int children;
};

static int set_profile(const struct Profile *profile) {
  static const char *const kNames[] = {"--depth", "--large", "--sample"};
  static const char *const kOptions[] = {"HM_PROFILE_DEPTH", "HM_PROFILE_LARGE", "HM_PROFILE_SAMPLE"};
  const char *values[] = {profile->depth, profile->large, profile->sample};
  for (size_t k = 0; k < 3; ++k) {
    if (!values[k]) continue;
    if (hm_option_check(kOptions[k], values[k]) != HM_OK)
      return fail("%s %s: %s", kNames[k], values[k], hm_last_error());
    setenv(kOptions[k], values[k], 1);
  }
  char path[PATH_MAX];
  if (absolute_path(profile->trace, path, sizeof path) != 0) return fail("%s: path too long", profile->trace);
  const long rank = mpi_rank();
  const size_t used = strlen(path);
  if (rank >= 0 && snprintf(path + used, sizeof path - used, ".rank%ld", rank) >= (int)(sizeof path - used))
    return fail("%s: path too long", profile->trace);
  setenv("HM_PROFILE", path, 1);
  setenv("HM_PROFILE_CHILDREN", profile->children ? "1" : "0", 1);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("hetmem-run %s\n", hm_version());
    return 0;
  }
  const char *rules = NULL, *plan = NULL, *policy = NULL, *iteration_at = NULL, *window = NULL;
  struct Profile profile = {0};
  int memkind = 0, i = 1;
  for (; i < argc; ++i) {
    const char *v;
    if (strcmp(argv[i], "--") == 0) {
      ++i;
      break;
    }
    if (argv[i][0] != '-') break;
    if ((v = option_value(argc, argv, &i, "--rules"))) rules = v;
    else if ((v = option_value(argc, argv, &i, "--plan"))) plan = v;
    else if ((v = option_value(argc, argv, &i, "--policy"))) policy = v;
    else if ((v = option_value(argc, argv, &i, "--iteration-at"))) iteration_at = v;
    else if ((v = option_value(argc, argv, &i, "--window"))) window = v;
    else if ((v = option_value(argc, argv, &i, "--profile"))) profile.trace = v;
    else if ((v = option_value(argc, argv, &i, "--depth"))) profile.depth = v;
    else if ((v = option_value(argc, argv, &i, "--large"))) profile.large = v;
    else if ((v = option_value(argc, argv, &i, "--sample"))) profile.sample = v;
    else if (strcmp(argv[i], "--children") == 0) profile.children = 1;
    else if (strcmp(argv[i], "--memkind") == 0) memkind = 1;
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(kUsage, stdout);
      return 0;
    } else {
      fputs(kUsage, stderr);
      return fail("unrecognized argument: %s", argv[i]);
    }
  }
  if (i >= argc) return fail("no program given after --");

  if (plan && rules) return fail("give --rules or --plan, not both (a plan is a rules file with class targets)");
  if (profile.trace && (rules || plan || policy || memkind))
    return fail("--profile writes a trace of the program as it is; give --%s to a later run (hetmem plan TRACE writes "
                "a plan from it)", rules ? "rules" : plan ? "plan" : policy ? "policy" : "memkind");
  if (!profile.trace && (profile.depth || profile.large || profile.sample || profile.children))
    return fail("--%s is an option of --profile", profile.depth ? "depth" : profile.large ? "large"
                                                  : profile.sample ? "sample" : "children");
  /* A plan's classes are placed by static placement unless another policy is asked for. */
  const char *asked_policy = policy;
  if (plan) {
    rules = plan;
    if (!policy) policy = getenv("HM_POLICY") && *getenv("HM_POLICY") ? getenv("HM_POLICY") : "hetmem-static";
  }
  /* The environment's own options as the library reads them: a typo is refused here, not ignored
   * by a program that never asks hetmem. */
  int rc = hm_init();
  if (rc != HM_OK) return fail("%s", *hm_last_error() ? hm_last_error() : hm_strerror(rc));
  const char *checked = policy ? policy : getenv("HM_POLICY");
  if (checked && *checked && hm_policy_select(checked) != HM_OK)
    return fail("%s%s", hm_last_error(), asked_policy || plan ? "" : " (HM_POLICY in the environment)");
  if (policy) setenv("HM_POLICY", policy, 1);
  if (rules) {
    char path[PATH_MAX], error[1024] = "";
    if (absolute_path(rules, path, sizeof path) != 0) return fail("%s: path too long", rules);
    if (hm_rules_check(path, error, sizeof error) != HM_OK) return fail("%s", error[0] ? error : hm_last_error());
    setenv("HM_RULES", path, 1);
  }
  char dir[PATH_MAX];
  if (library_dir(dir, sizeof dir) != 0) return fail("cannot find the directory of libhetmem.so");
  if (memkind && set_memkind(dir) != 0) return 2;
  if (window) {
    if (hm_option_check("HM_ITERATION_WINDOW", window) != HM_OK) return fail("--window %s: %s", window, hm_last_error());
    setenv("HM_ITERATION_WINDOW", window, 1);
  }
  /* A C++ name is resolved by the preload library in the program, which says at its start when it
   * cannot hook the function (windows are used then). */
  if (iteration_at) setenv("HM_ITERATION_AT", iteration_at, 1);
  if (profile.trace && set_profile(&profile) != 0) return 2;
  /* HM_PROFILE_ROOT_PID marks a run's first process; one left by an enclosing run would make this
   * program a child of that one. */
  unsetenv("HM_PROFILE_ROOT_PID");
  if (set_preload(dir) != 0) return 2;

  const char *prog = argv[i];
  fflush(stdout);
  execvp(prog, argv + i);
  /* As a shell says it: not found (127), found but not runnable (126: not executable, or a script
   * whose #! interpreter is missing, which is ENOENT too). */
  int err = errno;
  if (err == ENOENT && !strchr(prog, '/')) {
    fprintf(stderr, "hetmem-run: error: %s: command not found\n", prog);
    return 127;
  }
  if (err == ENOENT && access(prog, F_OK) != 0) {
    fprintf(stderr, "hetmem-run: error: %s: No such file or directory\n", prog);
    return 127;
  }
  fprintf(stderr, "hetmem-run: error: %s: %s\n", prog, strerror(err));
  return 126;
}
