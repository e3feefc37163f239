// openPMD 1.1.0 output in HDF5 (fileBased: one file per output step), written with libhdf5 by all
// ranks together: each writes the slab of its box of every mesh and the runs of its particles
// (collective MPI-IO writes). Meshes E and B (Yee staggering in `position`), particles with
// position, positionOffset, momentum, weighting, charge, mass and id, in global tile order: the
// same file from any number of ranks. Checked by openPMD_check_h5 and read back with openpmd-api
// in the tests.
#include <hdf5.h>

#include <cstdio>
#include <functional>
#include <ctime>
#include <tuple>
#include <string>
#include <vector>

#include "hdf5_io.hpp"
#include "openpmd.hpp"

static_assert(sizeof(hid_t) == sizeof(int64_t), "HDF5 1.10 or later: hid_t is 64 bits");

namespace pic {
namespace {

// A particle record component: this rank's runs of a dataset of every rank's particles.
hid_t particle_dataset(hid_t parent, const char *name, hid_t type, const LocalState::Particles &pp, const void *data,
                       hid_t xfer) {
  return write_blocks(parent, name, type, {pp.total}, pp.runs, data, xfer);
}

bool close_with_unit(hid_t d) {
  if (d < 0) return false;
  attr_scalar(d, "unitSI", H5T_NATIVE_DOUBLE, 1.0);
  return H5Dclose(d) >= 0;
}

// A record that holds one value for every particle: a group with value and shape attributes.
void constant_component(hid_t parent, const char *name, double value, uint64_t count, double unit_si) {
  hid_t g = group(parent, name);
  attr_scalar(g, "value", H5T_NATIVE_DOUBLE, value);
  attr_u64s(g, "shape", {count});
  attr_scalar(g, "unitSI", H5T_NATIVE_DOUBLE, unit_si);
  H5Gclose(g);
}

void record_attributes(hid_t record, const std::vector<double> &unit_dimension, double weighting_power,
                       float time_offset = 0.0f, uint32_t macro_weighted = 0) {
  attr_doubles(record, "unitDimension", unit_dimension);
  attr_scalar(record, "timeOffset", H5T_NATIVE_FLOAT, time_offset);
  attr_scalar(record, "macroWeighted", H5T_NATIVE_UINT32, macro_weighted);
  attr_scalar(record, "weightingPower", H5T_NATIVE_DOUBLE, weighting_power);
}

}  // namespace

const char *const kMeshRecords[6][2] = {{"E", "x"}, {"E", "y"}, {"E", "z"}, {"B", "x"}, {"B", "y"}, {"B", "z"}};

Block mesh_block(const Box &box) {
  return Block{{static_cast<unsigned long long>(box.lo[2]), static_cast<unsigned long long>(box.lo[1]),
                static_cast<unsigned long long>(box.lo[0])},
               {static_cast<unsigned long long>(box.extent(2)), static_cast<unsigned long long>(box.extent(1)),
                static_cast<unsigned long long>(box.extent(0))}};
}

bool write_openpmd(Simulation &sim, const std::string &dir, std::string *error) {
  char name[64];
  std::snprintf(name, sizeof name, "/openpmd_%06d.h5", sim.steps_done());
  LocalState state;
  sim.collect(&state);
  return write_openpmd_file(sim, state, dir + name, nullptr, error);
}

bool write_openpmd_file(const Simulation &sim, const LocalState &state, const std::string &path,
                        const std::function<bool(int64_t, int64_t)> &extra, std::string *error) {
  const Grid &g = sim.grid();
  const Comm &comm = sim.comm();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t xfer = H5P_DEFAULT;
  hid_t file = create_shared(comm, path, &xfer);
  if (!comm.all(file >= 0)) {
    if (file >= 0) close_shared(file, xfer);
    *error = "cannot create " + path;
    return false;
  }
  attr_string(file, "openPMD", "1.1.0");
  attr_scalar(file, "openPMDextension", H5T_NATIVE_UINT32, 1u);  // ED-PIC
  attr_string(file, "basePath", "/data/%T/");
  attr_string(file, "meshesPath", "meshes/");
  attr_string(file, "particlesPath", "particles/");
  attr_string(file, "iterationEncoding", "fileBased");
  attr_string(file, "iterationFormat", "openpmd_%06T.h5");
  attr_string(file, "software", "hetmem-pic");
  attr_string(file, "softwareVersion", "0.1.0");
  char date[64] = {};
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", std::localtime(&now));
  comm.broadcast(date, sizeof date);  // attributes are written by every rank, with the same value
  attr_string(file, "date", date);

  hid_t data = group(file, "data");
  hid_t it = group(data, std::to_string(sim.steps_done()));
  attr_scalar(it, "time", H5T_NATIVE_DOUBLE, sim.time());
  attr_scalar(it, "dt", H5T_NATIVE_DOUBLE, sim.dt());
  attr_scalar(it, "timeUnitSI", H5T_NATIVE_DOUBLE, 1.0);
  bool ok = true;

  // Meshes, C order A[z][y][x] (x varies fastest, as in memory); each rank writes its box.
  hid_t meshes = group(it, "meshes");
  // ED-PIC: the Yee solver on a periodic box, no smoothing, no charge correction (Esirkepov
  // deposition conserves charge by construction).
  attr_string(meshes, "fieldSolver", "Yee");
  attr_strings(meshes, "fieldBoundary", std::vector<std::string>(6, "periodic"));
  attr_strings(meshes, "particleBoundary", std::vector<std::string>(6, "periodic"));
  attr_string(meshes, "currentSmoothing", "none");
  attr_string(meshes, "chargeCorrection", "none");
  const std::vector<hsize_t> dims = {static_cast<hsize_t>(g.nz), static_cast<hsize_t>(g.ny), static_cast<hsize_t>(g.nx)};
  const Blocks box = {mesh_block(state.box)};
  const std::vector<double> positions[6] = {{0, 0, 0.5}, {0, 0.5, 0}, {0.5, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
  for (const char *rec : {"E", "B"}) {
    hid_t r = group(meshes, rec);
    attr_string(r, "geometry", "cartesian");
    attr_string(r, "dataOrder", "C");
    attr_strings(r, "axisLabels", {"z", "y", "x"});
    attr_doubles(r, "gridSpacing", {g.dz, g.dy, g.dx});
    attr_doubles(r, "gridGlobalOffset", {0, 0, 0});
    attr_scalar(r, "gridUnitSI", H5T_NATIVE_DOUBLE, 1.0);
    attr_scalar(r, "timeOffset", H5T_NATIVE_FLOAT, 0.0f);
    attr_string(r, "fieldSmoothing", "none");
    // E: V/m = kg m s^-3 A^-1; B: T = kg s^-2 A^-1 (L, M, T, I, theta, N, J).
    attr_doubles(r, "unitDimension", rec[0] == 'E' ? std::vector<double>{1, 1, -3, -1, 0, 0, 0}
                                                   : std::vector<double>{0, 1, -2, -1, 0, 0, 0});
    for (int c = 0; c < LocalState::kFields; ++c) {
      if (kMeshRecords[c][0][0] != rec[0]) continue;
      hid_t d = write_blocks(r, kMeshRecords[c][1], H5T_NATIVE_DOUBLE, dims, box, state.fields[c].data(), xfer);
      if (d >= 0) attr_doubles(d, "position", positions[c]);
      ok = close_with_unit(d) && ok;
    }
    H5Gclose(r);
  }
  H5Gclose(meshes);

  hid_t particles = group(it, "particles");
  for (size_t si = 0; si < sim.params().species.size(); ++si) {
    const SpeciesParams &params = sim.params().species[si];
    const LocalState::Particles &pp = state.species[si];
    const uint64_t n = pp.total;
    std::vector<double> momentum[3];  // u = gamma v times the mass
    for (int d = 0; d < 3; ++d)
      for (double u : pp.col[3 + d]) momentum[d].push_back(u * params.mass);
    hid_t s = group(particles, params.name);
    attr_scalar(s, "particleShape", H5T_NATIVE_DOUBLE, 1.0);  // ED-PIC: the order, as a number
    attr_string(s, "currentDeposition", "Esirkepov");
    attr_string(s, "particlePush", sim.params().pusher == "vay" ? "Vay" : "Boris");
    attr_string(s, "particleInterpolation", "energyConserving");
    attr_string(s, "particleSmoothing", "none");
    hid_t pos = group(s, "position");
    record_attributes(pos, {1, 0, 0, 0, 0, 0, 0}, 0);
    for (int d = 0; d < 3; ++d)
      ok = close_with_unit(particle_dataset(pos, kMeshRecords[d][1], H5T_NATIVE_DOUBLE, pp, pp.col[d].data(), xfer)) && ok;
    H5Gclose(pos);
    hid_t off = group(s, "positionOffset");
    record_attributes(off, {1, 0, 0, 0, 0, 0, 0}, 0);
    for (const char *a : {"x", "y", "z"}) constant_component(off, a, 0.0, n, 1.0);
    H5Gclose(off);
    hid_t mom = group(s, "momentum");
    // The leapfrog's momenta are half a step behind the positions.
    record_attributes(mom, {1, 1, -1, 0, 0, 0, 0}, 1, static_cast<float>(-0.5 * sim.dt()));
    for (int d = 0; d < 3; ++d)
      ok = close_with_unit(particle_dataset(mom, kMeshRecords[d][1], H5T_NATIVE_DOUBLE, pp, momentum[d].data(), xfer)) && ok;
    H5Gclose(mom);
    // Scalar records: a dataset (or constant group) directly under the species.
    hid_t d = particle_dataset(s, "weighting", H5T_NATIVE_DOUBLE, pp, pp.col[6].data(), xfer);
    if (d >= 0) record_attributes(d, {0, 0, 0, 0, 0, 0, 0}, 1, 0.0f, 1);  // ED-PIC: weighting is macro-weighted
    ok = close_with_unit(d) && ok;
    d = particle_dataset(s, "id", H5T_NATIVE_UINT64, pp, pp.id.data(), xfer);
    if (d >= 0) record_attributes(d, {0, 0, 0, 0, 0, 0, 0}, 0);
    ok = close_with_unit(d) && ok;
    for (auto [rec, value, dim] : {std::tuple<const char *, double, std::vector<double>>{"charge", params.charge, {0, 0, 1, 1, 0, 0, 0}},
                                   {"mass", params.mass, {0, 1, 0, 0, 0, 0, 0}}}) {
      hid_t r = group(s, rec);
      attr_scalar(r, "value", H5T_NATIVE_DOUBLE, value);
      attr_u64s(r, "shape", {n});
      attr_scalar(r, "unitSI", H5T_NATIVE_DOUBLE, 1.0);
      record_attributes(r, dim, 1);
      H5Gclose(r);
    }
    H5Gclose(s);
  }
  H5Gclose(particles);
  ok = (!extra || extra(it, xfer)) && ok;
  H5Gclose(it);
  H5Gclose(data);
  ok = close_shared(file, xfer) && ok;
  if (!comm.all(ok)) {
    *error = "cannot write " + path + " (disk full?)";
    return false;
  }
  return true;
}

}  // namespace pic
