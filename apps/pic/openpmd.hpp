// openPMD 1.1.0 output (HDF5, one file per output step: DIR/openpmd_%06T.h5).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "pic.hpp"

namespace pic {
// Collective: the state gathered on rank 0, which writes DIR/openpmd_%06T.h5; every rank returns
// the same result (and error).
bool write_openpmd(Simulation &sim, const std::string &dir, std::string *error);
// A snapshot of `sim` (gathered) as an openPMD file at `path`; `extra` (may be empty) adds to the
// iteration's group (an HDF5 hid_t) before it closes. One process writes it.
bool write_openpmd_file(const Simulation &sim, const Snapshot &snapshot, const std::string &path,
                        const std::function<bool(int64_t)> &extra, std::string *error);
// Rank 0's `ok` and *error on every rank (a write only rank 0 did).
bool agree(const Comm &comm, bool ok, std::string *error);
}
