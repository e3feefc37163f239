// The run summary of hetmem-pic (diag.summary = FILE): what `hetmem compare` reads. The library's
// summary (hm_summary_write: tiers, classes, spaces, static placement, phases, charges) with the
// problem and the wall and CPU time of every step added.
#pragma once
#include <string>
#include <vector>

#include "pic.hpp"

namespace pic {

struct RunRecord {
  long particles = 0;
  int threads = 1;
  int ranks = 1;
  double seconds = 0;                  // the main loop
  double cpu_seconds = 0;              // the process's CPU time (user + system) in the main loop
  std::vector<double> step_seconds;    // each step
  std::vector<double> step_cpu_seconds;
  Footprint footprint;
};

// Writes the summary; false with a message naming the file when it cannot be written.
bool write_summary(const std::string &path, const Params &p, const RunRecord &run, std::string *error);

}  // namespace pic
