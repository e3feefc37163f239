// A small benchmark harness: repetitions, medians, and output as a table (stdout) and JSON
// (a file). Figures are compared as ratios inside one run: these machines are shared and noisy.
#pragma once
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace bench {

inline double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double best(const std::vector<double> &v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

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
  Json &raw(const std::string &key, const std::string &v) {
    comma();
    append_key(key);
    out_.append(v);
    return *this;
  }
  std::string out_;
  std::vector<char> stack_;
  bool first_ = true;
};

// Parses "--name value" and "--flag" options.
class Args {
 public:
  Args(int argc, char **argv) : argv_(argv + 1, argv + argc) {}
  std::string get(const std::string &name, const std::string &def) const {
    for (size_t i = 0; i + 1 < argv_.size(); ++i)
      if (argv_[i] == name) return argv_[i + 1];
    return def;
  }
  bool has(const std::string &name) const { return std::find(argv_.begin(), argv_.end(), name) != argv_.end(); }

 private:
  std::vector<std::string> argv_;
};

}  // namespace bench
