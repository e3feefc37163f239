// Checkpoints: an openPMD file (the same meshes and particles as the output) whose iteration also
// holds a group `hetmem_restart` with everything needed to continue bit for bit: each field with
// its guard layer as it is in memory, every tile's particles in order (momenta as u, not u m,
// which would not round-trip), the step, the time, the neutralising background. Written to
// PATH.partial, synced and renamed: a run killed while writing leaves the previous checkpoint.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "hdf5_io.hpp"
#include "openpmd.hpp"
#include "pic.hpp"

namespace pic {
namespace {

constexpr int kFormat = 2;  // 2: fields without guards, particles of every tile in global tile order

bool read_attr(hid_t obj, const char *name, hid_t type, void *value) {
  if (H5Aexists(obj, name) <= 0) return false;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  bool ok = a >= 0 && H5Aread(a, type, value) >= 0;
  if (a >= 0) H5Aclose(a);
  return ok;
}

// Reads a 1-D dataset of exactly `count` values; false when it is missing, of another length or
// unreadable (damaged).
template <class T>
bool read_array(hid_t parent, const char *name, hid_t type, hsize_t count, std::vector<T> *out) {
  if (H5Lexists(parent, name, H5P_DEFAULT) <= 0) return false;
  hid_t d = H5Dopen2(parent, name, H5P_DEFAULT);
  if (d < 0) return false;
  hid_t space = H5Dget_space(d);
  hsize_t have = 0;
  bool ok = H5Sget_simple_extent_ndims(space) == 1 && H5Sget_simple_extent_dims(space, &have, nullptr) == 1 && have == count;
  out->resize(count);
  ok = ok && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data()) >= 0;
  H5Sclose(space);
  H5Dclose(d);
  return ok;
}

const char *kFieldNames[6] = {"ex", "ey", "ez", "bx", "by", "bz"};

// Rank 0's part of save_checkpoint: the gathered snapshot as an openPMD file with the restart
// data beside it, written under another name, synced and renamed into place.
bool write_checkpoint(const Simulation &sim, const Snapshot &snap, const std::string &path, std::string *error) {
  const std::string partial = path + ".partial";
  const Params &p = sim.params();
  auto restart_data = [&](int64_t it) {
    hid_t r = group(it, "hetmem_restart");
    if (r < 0) return false;
    const int grid[3] = {p.grid.nx, p.grid.ny, p.grid.nz};
    attr_scalar(r, "format", H5T_NATIVE_INT, kFormat);
    attr_scalar(r, "step", H5T_NATIVE_LLONG, static_cast<long long>(sim.steps_done()));
    attr_scalar(r, "time", H5T_NATIVE_DOUBLE, sim.time());
    attr_scalar(r, "dt", H5T_NATIVE_DOUBLE, sim.dt());
    attr_scalar(r, "background_rho", H5T_NATIVE_DOUBLE, sim.background_charge_density());
    attr_scalar(r, "species", H5T_NATIVE_INT, static_cast<int>(snap.species.size()));
    attr_scalar(r, "ranks", H5T_NATIVE_INT, sim.comm().size());  // for the record: any count may restart
    bool ok = write_array(r, "grid", H5T_NATIVE_INT, grid, 3) && write_array(r, "tile", H5T_NATIVE_INT, p.tile, 3);
    for (int c = 0; ok && c < Snapshot::kFields; ++c)
      ok = write_array(r, kFieldNames[c], H5T_NATIVE_DOUBLE, snap.fields[c].data(), snap.fields[c].size());
    for (size_t s = 0; ok && s < snap.species.size(); ++s) {
      const Snapshot::Particles &pp = snap.species[s];
      hid_t g = group(r, "species_" + std::to_string(s));
      if (g < 0) {
        ok = false;
        break;
      }
      attr_string(g, "name", p.species[s].name);
      const char *names[7] = {"x", "y", "z", "ux", "uy", "uz", "w"};
      ok = write_array(g, "tile_counts", H5T_NATIVE_UINT64, pp.tile_counts.data(), pp.tile_counts.size()) &&
           write_array(g, "id", H5T_NATIVE_UINT64, pp.id.data(), pp.id.size());
      for (int c = 0; ok && c < 7; ++c) ok = write_array(g, names[c], H5T_NATIVE_DOUBLE, pp.col[c].data(), pp.col[c].size());
      H5Gclose(g);
    }
    H5Gclose(r);
    if (!ok) *error = "writing the restart data of " + partial + " failed (disk full?)";
    return ok;
  };
  std::remove(partial.c_str());
  if (!write_openpmd_file(sim, snap, partial, restart_data, error)) {
    std::remove(partial.c_str());
    return false;
  }
  // On the medium before it takes the place of the previous checkpoint.
  int fd = open(partial.c_str(), O_RDONLY | O_CLOEXEC);
  bool synced = fd >= 0 && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  if (!synced || std::rename(partial.c_str(), path.c_str()) != 0) {
    std::remove(partial.c_str());
    *error = "checkpoint " + path + " could not be synced and renamed into place";
    return false;
  }
  return true;
}

}  // namespace

bool Simulation::save_checkpoint(const std::string &path, std::string *error) {
  Snapshot snap;
  gather(&snap);
  bool ok = comm_.rank() != 0 || write_checkpoint(*this, snap, path, error);
  return agree(comm_, ok, error);
}

bool Simulation::restore(const std::string &path, std::string *error) {
  // Every rank reads the file (each takes its part); all must succeed before any state changes.
  Checkpoint c;
  bool ok = read_checkpoint(path, &c, error);
  if (!comm_.all(ok)) {
    if (ok) *error = "restart = '" + path + "': another rank could not read it";
    return false;
  }
  std::string why;
  if (!comm_.all(adopt(c.snapshot, &why))) {
    *error = "restart = '" + path + "': " + (why.empty() ? "another rank could not take its part" : why);
    return false;
  }
  steps_ = static_cast<int>(c.step);
  time_ = c.time;
  background_rho_ = c.background_rho;
  return true;
}

bool Simulation::read_checkpoint(const std::string &path, Checkpoint *out, std::string *error) const {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  auto fail = [&](const std::string &why) {
    *error = "restart = '" + path + "': " + why;
    return false;
  };
  if (H5Fis_hdf5(path.c_str()) <= 0)
    return fail(access(path.c_str(), R_OK) == 0 ? "not an HDF5 file, or damaged" : "cannot be read");
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return fail("cannot be opened (damaged or truncated)");
  // The iteration: the one group under /data.
  std::string iteration;
  hid_t data = H5Lexists(file, "data", H5P_DEFAULT) > 0 ? H5Gopen2(file, "data", H5P_DEFAULT) : -1;
  if (data >= 0) {
    H5G_info_t info;
    if (H5Gget_info(data, &info) >= 0 && info.nlinks == 1) {
      char name[64] = {};
      H5Lget_name_by_idx(data, ".", H5_INDEX_NAME, H5_ITER_INC, 0, name, sizeof name, H5P_DEFAULT);
      iteration = name;
    }
  }
  std::string where = iteration.empty() ? "" : iteration + "/hetmem_restart";
  hid_t r = data >= 0 && !where.empty() && H5Lexists(data, iteration.c_str(), H5P_DEFAULT) > 0 &&
                    H5Lexists(data, where.c_str(), H5P_DEFAULT) > 0
                ? H5Gopen2(data, where.c_str(), H5P_DEFAULT)
                : -1;
  auto done = [&](bool ok) {
    if (r >= 0) H5Gclose(r);
    if (data >= 0) H5Gclose(data);
    H5Fclose(file);
    return ok;
  };
  if (r < 0) return done(fail("not a hetmem-pic checkpoint (no restart data; an openPMD output file cannot be restarted from)"));
  int format = 0, species = 0;
  long long step = 0;
  double time = 0, dt = 0, background = 0;
  std::vector<int> grid, tile;
  if (!read_attr(r, "format", H5T_NATIVE_INT, &format) || !read_attr(r, "step", H5T_NATIVE_LLONG, &step) ||
      !read_attr(r, "time", H5T_NATIVE_DOUBLE, &time) || !read_attr(r, "dt", H5T_NATIVE_DOUBLE, &dt) ||
      !read_attr(r, "background_rho", H5T_NATIVE_DOUBLE, &background) ||
      !read_attr(r, "species", H5T_NATIVE_INT, &species) || !read_array(r, "grid", H5T_NATIVE_INT, 3, &grid) ||
      !read_array(r, "tile", H5T_NATIVE_INT, 3, &tile))
    return done(fail("its restart data is damaged (a header value cannot be read)"));
  if (format != kFormat)
    return done(fail("restart data format " + std::to_string(format) + "; this hetmem-pic reads " + std::to_string(kFormat)));
  if (grid[0] != p_.grid.nx || grid[1] != p_.grid.ny || grid[2] != p_.grid.nz)
    return done(fail("it is of another problem: a " + std::to_string(grid[0]) + " x " + std::to_string(grid[1]) + " x " +
                     std::to_string(grid[2]) + " grid, this input has " + std::to_string(p_.grid.nx) + " x " +
                     std::to_string(p_.grid.ny) + " x " + std::to_string(p_.grid.nz)));
  if (tile[0] != p_.tile[0] || tile[1] != p_.tile[1] || tile[2] != p_.tile[2])
    return done(fail("its tiles are " + std::to_string(tile[0]) + " x " + std::to_string(tile[1]) + " x " +
                     std::to_string(tile[2]) + " cells, this input's hetmem.tile_size differs"));
  if (species != static_cast<int>(species_.size()))
    return done(fail("it has " + std::to_string(species) + " species, this input " + std::to_string(species_.size())));
  if (dt != dt_) return done(fail("its time step differs from this input's (warpx.cfl or the cell size changed)"));
  // Everything read before anything is replaced: a damaged file leaves this simulation as it was.
  const size_t cells = static_cast<size_t>(p_.grid.cells());
  Snapshot &snap = out->snapshot;
  for (int c = 0; c < Snapshot::kFields; ++c)
    if (!read_array(r, kFieldNames[c], H5T_NATIVE_DOUBLE, cells, &snap.fields[c]))
      return done(fail(std::string("field ") + kFieldNames[c] + " is missing or damaged"));
  snap.species.resize(species_.size());
  for (size_t s = 0; s < species_.size(); ++s) {
    const std::string group = "species_" + std::to_string(s);
    if (H5Lexists(r, group.c_str(), H5P_DEFAULT) <= 0) return done(fail(group + " is missing"));
    hid_t g = H5Gopen2(r, group.c_str(), H5P_DEFAULT);
    char name[256] = {};
    hid_t a = H5Aexists(g, "name") > 0 ? H5Aopen(g, "name", H5P_DEFAULT) : -1;
    if (a >= 0) {
      hid_t type = H5Aget_type(a);
      if (H5Tget_size(type) < sizeof name) H5Aread(a, type, name);
      H5Tclose(type);
      H5Aclose(a);
    }
    bool ok = name == species_[s].params.name;
    Snapshot::Particles &pp = snap.species[s];
    ok = ok && read_array(g, "tile_counts", H5T_NATIVE_UINT64, static_cast<size_t>(decomposition_.global_tiles()),
                          &pp.tile_counts);
    uint64_t total = 0;
    for (uint64_t c : pp.tile_counts) total += c;
    const char *names[7] = {"x", "y", "z", "ux", "uy", "uz", "w"};
    ok = ok && read_array(g, "id", H5T_NATIVE_UINT64, total, &pp.id);
    for (int c = 0; ok && c < 7; ++c) ok = read_array(g, names[c], H5T_NATIVE_DOUBLE, total, &pp.col[c]);
    H5Gclose(g);
    if (!ok)
      return done(fail(name == species_[s].params.name
                           ? "the particles of species '" + std::string(name) + "' are missing or damaged"
                           : "species " + std::to_string(s) + " is '" + name + "', this input's is '" +
                                 species_[s].params.name + "'"));
  }
  out->step = step;
  out->time = time;
  out->background_rho = background;
  return done(true);
}

}  // namespace pic
