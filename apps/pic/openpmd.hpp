// openPMD 1.1.0 output (HDF5, one file per output step: DIR/openpmd_%06T.h5).
#pragma once
#include <string>

#include "pic.hpp"

namespace pic {
bool write_openpmd(Simulation &sim, const std::string &dir, std::string *error);
}
