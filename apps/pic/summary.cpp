#include "summary.hpp"

#include <nlohmann/json.hpp>

namespace pic {

bool write_summary(const std::string &path, const Params &p, const RunRecord &run, std::string *error) {
  nlohmann::json own = {{"program", "hetmem-pic"},
                        {"cells", {p.grid.nx, p.grid.ny, p.grid.nz}},
                        {"particles", run.particles},
                        {"steps", p.steps},
                        {"threads", run.threads},
                        {"ranks", run.ranks},
                        {"footprint_bytes", {{"fields", run.footprint.fields}, {"particles", run.footprint.particles}}},
                        {"seconds", run.seconds},
                        {"cpu_seconds", run.cpu_seconds},
                        {"step_seconds", run.step_seconds},
                        {"step_cpu_seconds", run.step_cpu_seconds}};
  if (hm_summary_write(path.c_str(), own.dump().c_str()) != HM_OK) {
    *error = std::string("run summary: ") + hm_last_error();
    return false;
  }
  return true;
}

}  // namespace pic
