// Helper threads and the copy bandwidth they reach (place/stream.h).
#include <algorithm>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "place/policy.h"
#include "place/helpers.h"
#include "prim/prim.h"
#include "tier/copy_ops.h"
#include "tier/emul.h"

namespace hm::place {

HelperPool::~HelperPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread &t : threads_) t.join();
}

void HelperPool::set_helpers(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (static_cast<int>(threads_.size()) < n) {
    const int index = static_cast<int>(threads_.size());
    threads_.emplace_back([this, index] { run(index); });
  }
  active_ = n;
  work_.notify_all();
}

void HelperPool::submit(CopyJob *job, const std::vector<Copy> &copies) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job->left = static_cast<int>(copies.size());
    if (active_ > 0)
      for (const Copy &c : copies) queue_.push_back(Task{job, c});
  }
  if (active_ > 0) {
    work_.notify_all();
    return;
  }
  if (job->after) wait(*job->after);
  for (const Copy &c : copies) {
    const uint64_t t0 = prim::now_ns();
    hm_copy(c.dst, c.src, c.bytes);
    finish(job, prim::now_ns() - t0);
  }
}

void HelperPool::wait(const CopyJob &job) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return job.left == 0; });
}

double HelperPool::take_copy_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  const double s = static_cast<double>(copy_ns_) * 1e-9;
  copy_ns_ = 0;
  return s;
}

void HelperPool::finish(CopyJob *job, uint64_t ns) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copy_ns_ += ns;
    if (--job->left > 0) return;
  }
  done_.notify_all();
}

void HelperPool::run(int index) {
  set_thread_streaming_copies(true);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] { return stop_ || (index < active_ && !queue_.empty()); });
      if (stop_) return;
      task = queue_.front();
      queue_.pop_front();
      // The slot this copy fills must first be written back (tasks of that job were taken
      // before this one, by helpers that are copying them now).
      if (task.job->after) done_.wait(lock, [&] { return task.job->after->left == 0; });
    }
    const uint64_t t0 = prim::now_ns();
    hm_copy(task.copy.dst, task.copy.src, task.copy.bytes);
    finish(task.job, prim::now_ns() - t0);
  }
}

// ------------------------------------------------------------------------------------------------
namespace {

std::mutex g_bw_mutex;
CopyBandwidth g_bw;
bool g_bw_ready = false;

// What makes a measurement another configuration's: the machine (the calibration's CPU and
// thread count), the two tiers (kind and name, which carries an emulated profile) and the
// calibration it was taken under. A new calibration (`hetmem tiers --bench`) measures the copies
// again: a figure taken while the machine was busy is not kept for good.
constexpr const char *kCalibratedTag = "|calibrated=";

std::string bandwidth_key(int fast, int cap) {
  hm_calibration_t cal;
  hm_tier_info_t f, c;
  if (hm_calibration_get(&cal) != HM_OK || hm_tier_info(fast, &f) != HM_OK || hm_tier_info(cap, &c) != HM_OK)
    return "";
  return std::string(cal.cpu) + "|cpus=" + std::to_string(prim::cpu_count()) + "|fast=" + std::to_string(f.kind) + ":" +
         f.name + "|capacity=" + std::to_string(c.kind) + ":" + c.name + "|emul=" + (emul_enabled() ? "1" : "0") +
         "|copies=streaming" + kCalibratedTag + std::to_string(cal.measured_unix);
}

// The calibration a cache line's key was taken under ("" for none).
std::string calibrated_part(const std::string &key) {
  const size_t at = key.rfind(kCalibratedTag);
  return at == std::string::npos ? std::string() : key.substr(at);
}

std::string cache_file() {
  hm_calibration_t cal;
  if (hm_calibration_get(&cal) != HM_OK || !cal.path[0]) return "";
  std::string path = cal.path;
  auto slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/copy-bandwidth";
}

// Space-separated MB/s figures as bytes/s.
std::vector<double> numbers(const std::string &text) {
  std::vector<double> v;
  double x = 0;
  for (const std::string &word : prim::words(text)) {
    if (!prim::parse_number(word, &x)) break;
    v.push_back(x * 1e6);
  }
  return v;
}

// The cache holds one line per configuration: "key\tin MB/s...\tout MB/s...".
bool read_cache(const std::string &key, int threads, CopyBandwidth *out) {
  std::string text;
  if (!prim::read_text(cache_file(), &text)) return false;
  for (const std::string &line : prim::split(text, '\n')) {
    const std::vector<std::string> fields = prim::split(line, '\t');  // key, in MB/s, out MB/s
    if (fields.size() != 3 || fields[0] != key) continue;
    CopyBandwidth bw;
    bw.in = numbers(fields[1]);
    bw.out = numbers(fields[2]);
    if (static_cast<int>(bw.in.size()) >= threads && static_cast<int>(bw.out.size()) >= threads &&
        std::all_of(bw.in.begin(), bw.in.end(), [](double x) { return x > 0; }) &&
        std::all_of(bw.out.begin(), bw.out.end(), [](double x) { return x > 0; })) {
      *out = bw;
      return true;
    }
  }
  return false;
}

void write_cache(const std::string &key, const CopyBandwidth &bw) {
  const std::string path = cache_file();
  if (path.empty()) return;
  std::string text, kept;
  prim::read_text(path, &text);  // none yet: the first row
  // Other configurations' rows stay, as long as they were taken under the same calibration.
  const std::string calibrated = calibrated_part(key);
  for (const std::string &line : prim::split(text, '\n')) {
    const std::string other = line.substr(0, line.find('\t'));
    if (!line.empty() && other != key && calibrated_part(other) == calibrated) kept += line + "\n";
  }
  std::string row = key + "\t";
  for (double x : bw.in) row += " " + prim::format_number(x * 1e-6);
  row += "\t";
  for (double x : bw.out) row += " " + prim::format_number(x * 1e-6);
  prim::write_text_atomic(path, kept + row + "\n");  // a read-only directory: measured again next time
}

// Best of three passes of `threads` threads each copying its share of `bytes`.
double measure(void *dst, const void *src, size_t bytes, int threads) {
  double best = 0;
  const size_t share = bytes / static_cast<size_t>(threads) / prim::kPageSize * prim::kPageSize;
  if (share == 0) return 0;
  for (int pass = 0; pass < 3; ++pass) {
    const uint64_t t0 = prim::now_ns();
    std::vector<std::thread> team;
    for (int i = 0; i < threads; ++i)
      team.emplace_back([&, i] {
        set_thread_streaming_copies(true);  // as the helpers copy
        hm_copy(static_cast<char *>(dst) + i * share, static_cast<const char *>(src) + i * share, share);
      });
    for (std::thread &t : team) t.join();
    const double s = static_cast<double>(prim::now_ns() - t0) * 1e-9;
    if (s > 0) best = std::max(best, static_cast<double>(share) * threads / s);
  }
  return best;
}

}  // namespace

const CopyBandwidth &copy_bandwidth(void *fast_buf, size_t bytes, int max_threads) {
  std::lock_guard<std::mutex> lock(g_bw_mutex);
  if (g_bw_ready && static_cast<int>(g_bw.in.size()) >= max_threads) return g_bw;
  const int fast = fast_tier(), cap = capacity_tier();
  g_bw = CopyBandwidth{};
  g_bw_ready = true;
  if (fast < 0 || cap < 0) return g_bw;
  const std::string key = bandwidth_key(fast, cap);
  if (!key.empty() && read_cache(key, max_threads, &g_bw)) return g_bw;
  void *own = nullptr;  // without staging slots to measure over: a buffer of its own
  if (!fast_buf || bytes < prim::kPageSize) {
    bytes = size_t{32} << 20;
    fast_buf = own = hm_tier_alloc(fast, bytes, prim::kPageSize, HM_STRICT);
    if (!own) return g_bw;
  }
  void *slow = hm_tier_alloc(cap, bytes, prim::kPageSize, HM_STRICT);
  if (!slow) {
    hm_free(own);
    return g_bw;
  }
  hm_copy(slow, fast_buf, bytes);  // first touch outside the measurement
  for (int h = 1; h <= max_threads; ++h) {
    g_bw.in.push_back(measure(fast_buf, slow, bytes, h));
    g_bw.out.push_back(measure(slow, fast_buf, bytes, h));
  }
  hm_free(slow);
  hm_free(own);
  log(2, "streaming: copy bandwidth measured with 1..%d threads (cached in %s)", max_threads, cache_file().c_str());
  if (!key.empty()) write_cache(key, g_bw);
  return g_bw;
}

void copy_bandwidth_forget() {
  std::lock_guard<std::mutex> lock(g_bw_mutex);
  g_bw = CopyBandwidth{};
  g_bw_ready = false;
}

}  // namespace hm::place
