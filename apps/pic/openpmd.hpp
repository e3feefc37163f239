// openPMD 1.1.0 output (HDF5, one file per output step: DIR/openpmd_%06T.h5).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "pic.hpp"

namespace pic {
// Collective: every rank writes its share of DIR/openpmd_%06T.h5; every rank returns the same
// result (and error).
bool write_openpmd(Simulation &sim, const std::string &dir, std::string *error);
// This rank's share of `sim` as the openPMD file at `path`, written by every rank together;
// `extra` (may be empty) adds to the iteration's group (an HDF5 hid_t) before it closes, with the
// transfer property of the file's collective writes (also an hid_t).
bool write_openpmd_file(const Simulation &sim, const LocalState &state, const std::string &path,
                        const std::function<bool(int64_t, int64_t)> &extra, std::string *error);
// The openPMD mesh records of the six field components (E x .. B z), and a rank's block of a mesh.
extern const char *const kMeshRecords[6][2];
Block mesh_block(const Box &box);
}
