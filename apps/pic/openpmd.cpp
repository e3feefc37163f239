// openPMD 1.1.0 output in HDF5 (fileBased: one file per output step), written with libhdf5.
// Meshes E and B (Yee staggering in `position`), particles with position, positionOffset,
// momentum, weighting, charge, mass and id. Checked by openPMD_check_h5 and read back with
// openpmd-api in the tests.
#include <hdf5.h>

#include <cstdio>
#include <functional>
#include <ctime>
#include <string>
#include <vector>

#include "hdf5_io.hpp"
#include "openpmd.hpp"

static_assert(sizeof(hid_t) == sizeof(int64_t), "HDF5 1.10 or later: hid_t is 64 bits");

namespace pic {
namespace {

void dataset(hid_t parent, const char *name, hid_t type, int rank, const hsize_t *dims, const void *data) {
  hid_t space = H5Screate_simple(rank, dims, nullptr);
  hid_t d = H5Dcreate2(parent, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  attr_scalar(d, "unitSI", H5T_NATIVE_DOUBLE, 1.0);
  H5Dclose(d);
  H5Sclose(space);
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

bool write_openpmd(Simulation &sim, const std::string &dir, std::string *error) {
  char name[64];
  std::snprintf(name, sizeof name, "/openpmd_%06d.h5", sim.steps_done());
  Snapshot snapshot;
  sim.gather(&snapshot);
  bool ok = sim.comm().rank() != 0 || write_openpmd_file(sim, snapshot, dir + name, nullptr, error);
  return agree(sim.comm(), ok, error);
}

bool agree(const Comm &comm, bool ok, std::string *error) {
  if (!comm.parallel()) return ok;
  int good = ok ? 1 : 0;
  comm.broadcast(&good, sizeof good);
  unsigned long length = good ? 0 : error->size();
  comm.broadcast(&length, sizeof length);
  error->resize(length);
  comm.broadcast(error->data(), length);
  return good == 1;
}

bool write_openpmd_file(const Simulation &sim, const Snapshot &snap, const std::string &path,
                        const std::function<bool(int64_t)> &extra, std::string *error) {
  const Grid &g = sim.grid();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) {
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
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", std::localtime(&now));
  attr_string(file, "date", date);

  hid_t data = group(file, "data");
  hid_t it = group(data, std::to_string(sim.steps_done()));
  attr_scalar(it, "time", H5T_NATIVE_DOUBLE, sim.time());
  attr_scalar(it, "dt", H5T_NATIVE_DOUBLE, sim.dt());
  attr_scalar(it, "timeUnitSI", H5T_NATIVE_DOUBLE, 1.0);

  // Meshes, C order A[z][y][x] (x varies fastest, as in memory).
  hid_t meshes = group(it, "meshes");
  // ED-PIC: the Yee solver on a periodic box, no smoothing, no charge correction (Esirkepov
  // deposition conserves charge by construction).
  attr_string(meshes, "fieldSolver", "Yee");
  attr_strings(meshes, "fieldBoundary", std::vector<std::string>(6, "periodic"));
  attr_strings(meshes, "particleBoundary", std::vector<std::string>(6, "periodic"));
  attr_string(meshes, "currentSmoothing", "none");
  attr_string(meshes, "chargeCorrection", "none");
  hsize_t dims[3] = {static_cast<hsize_t>(g.nz), static_cast<hsize_t>(g.ny), static_cast<hsize_t>(g.nx)};
  struct Comp {
    const char *record, *axis;
    const std::vector<double> *values;
    std::vector<double> position;  // (z, y, x)
  };
  const auto &f = snap.fields;
  std::vector<Comp> comps = {{"E", "x", &f[0], {0, 0, 0.5}}, {"E", "y", &f[1], {0, 0.5, 0}}, {"E", "z", &f[2], {0.5, 0, 0}},
                             {"B", "x", &f[3], {0.5, 0.5, 0}}, {"B", "y", &f[4], {0.5, 0, 0.5}}, {"B", "z", &f[5], {0, 0.5, 0.5}}};
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
    for (const Comp &c : comps) {
      if (c.record[0] != rec[0]) continue;
      hid_t space = H5Screate_simple(3, dims, nullptr);
      hid_t d = H5Dcreate2(r, c.axis, H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.values->data());
      attr_scalar(d, "unitSI", H5T_NATIVE_DOUBLE, 1.0);
      attr_doubles(d, "position", c.position);
      H5Dclose(d);
      H5Sclose(space);
    }
    H5Gclose(r);
  }
  H5Gclose(meshes);

  hid_t particles = group(it, "particles");
  for (size_t si = 0; si < sim.params().species.size(); ++si) {
    const SpeciesParams &params = sim.params().species[si];
    const Snapshot::Particles &pp = snap.species[si];
    const uint64_t n = pp.id.size();
    const std::vector<double> *cols = pp.col;
    std::vector<double> momentum[3];  // u = gamma v times the mass
    for (int d = 0; d < 3; ++d)
      for (double u : cols[3 + d]) momentum[d].push_back(u * params.mass);
    const std::vector<uint64_t> &ids = pp.id;
    hid_t s = group(particles, params.name);
    attr_scalar(s, "particleShape", H5T_NATIVE_DOUBLE, 1.0);  // ED-PIC: the order, as a number
    attr_string(s, "currentDeposition", "Esirkepov");
    attr_string(s, "particlePush", sim.params().pusher == "vay" ? "Vay" : "Boris");
    attr_string(s, "particleInterpolation", "energyConserving");
    attr_string(s, "particleSmoothing", "none");
    hsize_t count = n;
    hid_t pos = group(s, "position");
    record_attributes(pos, {1, 0, 0, 0, 0, 0, 0}, 0);
    dataset(pos, "x", H5T_NATIVE_DOUBLE, 1, &count, cols[0].data());
    dataset(pos, "y", H5T_NATIVE_DOUBLE, 1, &count, cols[1].data());
    dataset(pos, "z", H5T_NATIVE_DOUBLE, 1, &count, cols[2].data());
    H5Gclose(pos);
    hid_t off = group(s, "positionOffset");
    record_attributes(off, {1, 0, 0, 0, 0, 0, 0}, 0);
    for (const char *a : {"x", "y", "z"}) constant_component(off, a, 0.0, n, 1.0);
    H5Gclose(off);
    hid_t mom = group(s, "momentum");
    // The leapfrog's momenta are half a step behind the positions.
    record_attributes(mom, {1, 1, -1, 0, 0, 0, 0}, 1, static_cast<float>(-0.5 * sim.dt()));
    dataset(mom, "x", H5T_NATIVE_DOUBLE, 1, &count, momentum[0].data());
    dataset(mom, "y", H5T_NATIVE_DOUBLE, 1, &count, momentum[1].data());
    dataset(mom, "z", H5T_NATIVE_DOUBLE, 1, &count, momentum[2].data());
    H5Gclose(mom);
    // Scalar records: a dataset (or constant group) directly under the species.
    {
      hid_t space = H5Screate_simple(1, &count, nullptr);
      hid_t d = H5Dcreate2(s, "weighting", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, cols[6].data());
      attr_scalar(d, "unitSI", H5T_NATIVE_DOUBLE, 1.0);
      record_attributes(d, {0, 0, 0, 0, 0, 0, 0}, 1, 0.0f, 1);  // ED-PIC: weighting is macro-weighted
      H5Dclose(d);
      d = H5Dcreate2(s, "id", H5T_NATIVE_UINT64, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data());
      attr_scalar(d, "unitSI", H5T_NATIVE_DOUBLE, 1.0);
      record_attributes(d, {0, 0, 0, 0, 0, 0, 0}, 0);
      H5Dclose(d);
      H5Sclose(space);
    }
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
  bool extra_ok = !extra || extra(it);
  H5Gclose(it);
  H5Gclose(data);
  bool ok = H5Fclose(file) >= 0 && extra_ok;
  if (!ok) *error = "cannot finish " + path;
  return ok;
}

}  // namespace pic
