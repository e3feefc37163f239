// openPMD 1.1.0 output (HDF5, one file per output step: DIR/openpmd_%06T.h5).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "pic.hpp"

namespace pic {
bool write_openpmd(Simulation &sim, const std::string &dir, std::string *error);
// The same file at `path`; `extra` (may be empty) adds to the iteration's group (an HDF5 hid_t)
// before it closes.
bool write_openpmd_file(Simulation &sim, const std::string &path, const std::function<bool(int64_t)> &extra,
                        std::string *error);
}
