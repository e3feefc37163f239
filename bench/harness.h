// A small benchmark harness: repetitions, medians, and output as a table (stdout) and JSON
// (a file). Figures are compared as ratios inside one run: these machines are shared and noisy.
#pragma once
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace bench {

inline double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU time of every thread of the process so far, in seconds (a kernel on N threads that had N
// cores to itself spends N times its wall time).
inline double cpu_time() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The process's minor page faults so far: pages the kernel supplied (or mapped) on first touch.
inline long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

// In a virtual machine whose balloon device reports free memory to the host (virtio-balloon free
// page reporting), the smallest block it reports, as a page order (9: 2 MiB); -1 elsewhere. The
// host takes reported blocks back, so a 2 MiB page taken from one costs a fault in the host on
// first touch: single rounds of a benchmark that maps huge pages are then slower by tens of ms.
inline int free_page_reporting_order() {
  if (access("/sys/bus/virtio/drivers/virtio_balloon", F_OK) != 0) return -1;
  FILE *f = std::fopen("/sys/module/page_reporting/parameters/page_reporting_order", "r");
  if (f == nullptr) return -1;
  int order = -1;
  if (std::fscanf(f, "%d", &order) != 1) order = -1;
  std::fclose(f);
  return order;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double best(const std::vector<double> &v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

// A ratio of medians with the interval its repetitions allow: on a shared machine a ratio alone
// misleads, so a target is MET only when the whole interval meets it (python/hetmem/verdicts.py is
// the same for the Python benchmarks). Paired (the two were timed in turns, one of each per round):
// the extremes of the rounds' ratios; otherwise min(num)/max(den) .. max(num)/min(den).
struct Ratio {
  double value = 0, low = 0, high = 0;
};

inline Ratio ratio(const std::vector<double> &num, const std::vector<double> &den, bool paired = true) {
  Ratio r;
  if (num.empty() || den.empty() || median(den) <= 0) return r;
  r.value = median(num) / median(den);
  if (paired && num.size() == den.size()) {
    r.low = r.high = num[0] / den[0];
    for (size_t i = 1; i < num.size(); ++i) {
      r.low = std::min(r.low, num[i] / den[i]);
      r.high = std::max(r.high, num[i] / den[i]);
    }
  } else {
    r.low = *std::min_element(num.begin(), num.end()) / *std::max_element(den.begin(), den.end());
    r.high = *std::max_element(num.begin(), num.end()) / *std::min_element(den.begin(), den.end());
  }
  return r;
}

// Verdicts: MET when the whole interval meets the target, NOT MET when none of it does, else
// "cannot tell" (the target is within the run-to-run spread).
inline const char *at_least(const Ratio &r, double target) {
  return r.low >= target ? "MET" : r.high < target ? "NOT MET" : "cannot tell";
}
inline const char *at_most(const Ratio &r, double target) {
  return r.high <= target ? "MET" : r.low > target ? "NOT MET" : "cannot tell";
}
inline const char *between(const Ratio &r, double lo, double hi) {
  if (r.low >= lo && r.high <= hi) return "MET";
  return r.high < lo || r.low > hi ? "NOT MET" : "cannot tell";
}
// An absolute figure: every repetition at most (within) or at least (all_at_least) `target`.
inline const char *within(const std::vector<double> &runs, double target) {
  if (runs.empty()) return "NOT MET";
  const double lo = *std::min_element(runs.begin(), runs.end()), hi = *std::max_element(runs.begin(), runs.end());
  return hi <= target ? "MET" : lo > target ? "NOT MET" : "cannot tell";
}
inline const char *all_at_least(const std::vector<double> &runs, double target) {
  if (runs.empty()) return "NOT MET";
  const double lo = *std::min_element(runs.begin(), runs.end()), hi = *std::max_element(runs.begin(), runs.end());
  return lo >= target ? "MET" : hi < target ? "NOT MET" : "cannot tell";
}
// The verdict of several targets together: NOT MET if any is, MET if all are, else cannot tell.
inline std::string all_of(const std::vector<std::string> &verdicts) {
  std::string v = "MET";
  for (const std::string &x : verdicts)
    if (x == "NOT MET") return x;
    else if (x != "MET") v = x;
  return v;
}

// Builds a JSON document by hand (flat objects, arrays of objects): enough for results files.
class Json {
 public:
  Json &open(const std::string &key = "") { return begin(key, '{'); }
  Json &open_array(const std::string &key) { return begin(key, '['); }
  Json &close() {
    char c = stack_.back();
    stack_.pop_back();
    out_ += c == '{' ? "}" : "]";
    first_ = false;
    return *this;
  }
  Json &num(const std::string &key, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return raw(key, buf);
  }
  Json &str(const std::string &key, const std::string &v) {
    std::string quoted(1, '"');
    quoted.append(escape(v)).push_back('"');
    return raw(key, quoted);
  }
  Json &boolean(const std::string &key, bool v) { return raw(key, v ? "true" : "false"); }
  // A ratio with its spread: `key`, `key`_low and `key`_high.
  Json &ratio(const std::string &key, const Ratio &r) {
    return num(key, r.value).num(key + "_low", r.low).num(key + "_high", r.high);
  }
  const std::string &text() const { return out_; }
  bool write(const std::string &path) const {
    if (path == "-") {
      std::printf("%s\n", out_.c_str());
      return true;
    }
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    std::fprintf(f, "%s\n", out_.c_str());
    return std::fclose(f) == 0;
  }

 private:
  static std::string escape(const std::string &s) {
    std::string o;
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o;
  }
  void append_key(const std::string &key) {
    out_.push_back('"');
    out_.append(escape(key)).append("\": ");
  }
  void comma() {
    if (!first_) out_ += ", ";
    first_ = false;
  }
  Json &begin(const std::string &key, char c) {
    comma();
    if (!key.empty()) append_key(key);
    out_ += c;
    stack_.push_back(c);
    first_ = true;
    return *this;
  }
  Json &raw(const std::string &key, const std::string &v) {  // an empty key: an array's element
    comma();
    if (!key.empty()) append_key(key);
    out_.append(v);
    return *this;
  }
  std::string out_;
  std::vector<char> stack_;
  bool first_ = true;
};

// Where a results file goes when --json does not say: the build tree's results/ (HM_RESULTS_DIR,
// set by CMake), so that no run writes into the source tree. Created on demand.
inline std::string results_path(const std::string &file) {
#ifdef HM_RESULTS_DIR
  const std::string dir = HM_RESULTS_DIR;
#else
  const std::string dir = ".";
#endif
  std::string made;
  for (size_t at = 0; at != std::string::npos;) {  // mkdir -p
    at = dir.find('/', at + 1);
    made = dir.substr(0, at);
    if (!made.empty()) mkdir(made.c_str(), 0755);
  }
  return dir + "/" + file;
}

// The program's name and hetmem's version, as every hetmem program prints for --version.
inline void print_version(const char *argv0) {
  const char *slash = std::strrchr(argv0, '/');
  std::printf("%s %s\n", slash ? slash + 1 : argv0, HM_VERSION_STRING);
}

// The command line of a benchmark: "--name value" options and "--flag" switches, declared up
// front. --help prints the usage and exits 0, --version the version; anything not declared prints
// the usage and exits 2 (a mistyped option never runs a minute-long benchmark with the defaults).
class Args {
 public:
  Args(int argc, char **argv, std::string usage, std::vector<std::string> valued, std::vector<std::string> flags)
      : usage_(std::move(usage)) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("%s\n", usage_.c_str());
        std::exit(0);
      }
      if (a == "--version") {
        print_version(argv[0]);
        std::exit(0);
      }
      if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
        given_.emplace_back(a, "");
      } else if (std::find(valued.begin(), valued.end(), a) != valued.end()) {
        if (i + 1 == argc) refuse(a + " needs a value");
        given_.emplace_back(a, argv[++i]);
      } else {
        refuse("unknown option '" + a + "'");
      }
    }
  }
  std::string get(const std::string &name, const std::string &def) const {
    for (const auto &[key, value] : given_)
      if (key == name) return value;
    return def;
  }
  bool has(const std::string &name) const {
    return std::any_of(given_.begin(), given_.end(), [&](const auto &kv) { return kv.first == name; });
  }

 private:
  [[noreturn]] void refuse(const std::string &why) const {
    std::fprintf(stderr, "%s\n%s\n", why.c_str(), usage_.c_str());
    std::exit(2);
  }
  std::string usage_;
  std::vector<std::pair<std::string, std::string>> given_;
};

}  // namespace bench
