// Checkpoints: an openPMD file (the same meshes and particles as the output, written by every rank
// together) whose iteration also holds a group `hetmem_restart` with what the openPMD records do
// not: the momenta as u (the records hold u m, which would not round-trip), every tile's particle
// count, the step, the time, the neutralising background. The fields are the meshes, the
// positions, weights and ids the particle records: all held exactly. Written to PATH.partial,
// synced and renamed: a run killed while writing leaves the previous checkpoint. Every rank reads
// its own box and tiles back, whatever the number of ranks that wrote it.
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

// 2: fields from the meshes and particles from the records in global tile order, with u and the
// tile counts beside them (1: fields with guard layers and every particle in the restart group).
constexpr int kFormat = 2;

bool read_attr(hid_t obj, const char *name, hid_t type, void *value) {
  if (H5Aexists(obj, name) <= 0) return false;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  bool ok = a >= 0 && H5Aread(a, type, value) >= 0;
  if (a >= 0) H5Aclose(a);
  return ok;
}

const char *const kMomentumNames[3] = {"ux", "uy", "uz"};

}  // namespace

bool Simulation::save_checkpoint(const std::string &path, std::string *error) {
  const std::string partial = path + ".partial";
  LocalState state;
  collect(&state);
  auto restart_data = [&](int64_t it, int64_t xfer) {
    hid_t r = group(it, "hetmem_restart");
    if (r < 0) return false;
    attr_scalar(r, "format", H5T_NATIVE_INT, kFormat);
    attr_scalar(r, "step", H5T_NATIVE_LLONG, static_cast<long long>(steps_));
    attr_scalar(r, "time", H5T_NATIVE_DOUBLE, time_);
    attr_scalar(r, "dt", H5T_NATIVE_DOUBLE, dt_);
    attr_scalar(r, "background_rho", H5T_NATIVE_DOUBLE, background_rho_);
    attr_scalar(r, "species", H5T_NATIVE_INT, static_cast<int>(species_.size()));
    attr_scalar(r, "ranks", H5T_NATIVE_INT, comm_.size());  // for the record: any count may restart
    const int grid[3] = {p_.grid.nx, p_.grid.ny, p_.grid.nz};
    attr_raw(r, "grid", H5T_NATIVE_INT, grid, 3);
    attr_raw(r, "tile", H5T_NATIVE_INT, p_.tile, 3);
    bool ok = true;
    for (size_t s = 0; s < species_.size(); ++s) {
      const LocalState::Particles &pp = state.species[s];
      hid_t g = group(r, "species_" + std::to_string(s));
      attr_string(g, "name", species_[s].params.name);
      // The counts are the same on every rank: rank 0 writes them.
      const Blocks all = comm_.rank() == 0 ? Blocks{Block{{0}, {pp.tile_counts.size()}}} : Blocks{};
      hid_t d = write_blocks(g, "tile_counts", H5T_NATIVE_UINT64, {pp.tile_counts.size()}, all, pp.tile_counts.data(), xfer);
      ok = d >= 0 && H5Dclose(d) >= 0 && ok;
      for (int c = 0; c < 3; ++c) {
        d = write_blocks(g, kMomentumNames[c], H5T_NATIVE_DOUBLE, {pp.total}, pp.runs, pp.col[3 + c].data(), xfer);
        ok = d >= 0 && H5Dclose(d) >= 0 && ok;
      }
      H5Gclose(g);
    }
    H5Gclose(r);
    return ok;
  };
  if (comm_.rank() == 0) std::remove(partial.c_str());
  if (!write_openpmd_file(*this, state, partial, restart_data, error)) {
    if (comm_.rank() == 0) std::remove(partial.c_str());
    *error = "checkpoint " + path + ": " + *error;
    return false;
  }
  // On the medium before it takes the place of the previous checkpoint.
  bool ok = true;
  if (comm_.rank() == 0) {
    int fd = open(partial.c_str(), O_RDONLY | O_CLOEXEC);
    ok = fd >= 0 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!ok || std::rename(partial.c_str(), path.c_str()) != 0) {
      std::remove(partial.c_str());
      *error = "checkpoint " + path + " could not be synced and renamed into place";
      ok = false;
    }
  }
  return comm_.agree(ok, error);
}

bool Simulation::restore(const std::string &path, std::string *error) {
  // Every rank reads its share; all must succeed before any state changes.
  Checkpoint c;
  bool ok = read_checkpoint(path, &c, error);
  if (!comm_.all(ok)) {
    if (ok) *error = "restart = '" + path + "': another rank could not read its part";
    return false;
  }
  std::string why;
  if (!comm_.all(adopt(c.state, &why))) {
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
  hid_t it = data >= 0 && !iteration.empty() && H5Lexists(data, iteration.c_str(), H5P_DEFAULT) > 0
                 ? H5Gopen2(data, iteration.c_str(), H5P_DEFAULT)
                 : -1;
  hid_t r = it >= 0 && H5Lexists(it, "hetmem_restart", H5P_DEFAULT) > 0 ? H5Gopen2(it, "hetmem_restart", H5P_DEFAULT) : -1;
  auto done = [&](bool ok) {
    if (r >= 0) H5Gclose(r);
    if (it >= 0) H5Gclose(it);
    if (data >= 0) H5Gclose(data);
    H5Fclose(file);
    return ok;
  };
  if (r < 0) return done(fail("not a hetmem-pic checkpoint (no restart data; an openPMD output file cannot be restarted from)"));
  int format = 0, species = 0;
  long long step = 0;
  double time = 0, dt = 0, background = 0;
  int grid[3] = {}, tile[3] = {};
  if (!read_attr(r, "format", H5T_NATIVE_INT, &format))
    return done(fail("its restart data is damaged (a header value cannot be read)"));
  if (format != kFormat)
    return done(fail("restart data format " + std::to_string(format) + "; this hetmem-pic reads " + std::to_string(kFormat) +
                     (format == 1 ? " (format 1 came before the MPI build: rerun, or restart it with that build)" : "")));
  if (!read_attr(r, "step", H5T_NATIVE_LLONG, &step) || !read_attr(r, "time", H5T_NATIVE_DOUBLE, &time) ||
      !read_attr(r, "dt", H5T_NATIVE_DOUBLE, &dt) || !read_attr(r, "background_rho", H5T_NATIVE_DOUBLE, &background) ||
      !read_attr(r, "species", H5T_NATIVE_INT, &species) || !read_attr(r, "grid", H5T_NATIVE_INT, grid) ||
      !read_attr(r, "tile", H5T_NATIVE_INT, tile))
    return done(fail("its restart data is damaged (a header value cannot be read)"));
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
  LocalState &state = out->state;
  state.box = box();
  const std::vector<hsize_t> dims = {static_cast<hsize_t>(grid[2]), static_cast<hsize_t>(grid[1]),
                                     static_cast<hsize_t>(grid[0])};
  for (int c = 0; c < LocalState::kFields; ++c) {
    state.fields[c].resize(static_cast<size_t>(state.box.cells()));
    const std::string name = std::string("meshes/") + kMeshRecords[c][0] + "/" + kMeshRecords[c][1];
    if (!read_blocks(it, name, H5T_NATIVE_DOUBLE, dims, {mesh_block(state.box)}, state.fields[c].data()))
      return done(fail("field " + std::string(kMeshRecords[c][0]) + kMeshRecords[c][1] + " is missing or damaged"));
  }
  state.species.resize(species_.size());
  const size_t tiles = static_cast<size_t>(decomposition_.global_tiles());
  for (size_t s = 0; s < species_.size(); ++s) {
    const std::string &expected = species_[s].params.name;
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
    LocalState::Particles &pp = state.species[s];
    pp.tile_counts.resize(tiles);
    bool ok = name == expected &&
              read_blocks(g, "tile_counts", H5T_NATIVE_UINT64, {tiles}, {Block{{0}, {tiles}}}, pp.tile_counts.data());
    for (uint64_t c : pp.tile_counts) pp.total += c;
    pp.runs = particle_runs(pp.tile_counts, tile_ids_);
    const size_t mine = static_cast<size_t>(elements(pp.runs));
    for (auto &c : pp.col) c.resize(mine);
    pp.id.resize(mine);
    const std::string records = "particles/" + expected + "/";
    const std::vector<hsize_t> all = {pp.total};
    for (int c = 0; ok && c < 3; ++c)
      ok = read_blocks(it, records + "position/" + kMeshRecords[c][1], H5T_NATIVE_DOUBLE, all, pp.runs, pp.col[c].data()) &&
           read_blocks(g, kMomentumNames[c], H5T_NATIVE_DOUBLE, all, pp.runs, pp.col[3 + c].data());
    ok = ok && read_blocks(it, records + "weighting", H5T_NATIVE_DOUBLE, all, pp.runs, pp.col[6].data()) &&
         read_blocks(it, records + "id", H5T_NATIVE_UINT64, all, pp.runs, pp.id.data());
    H5Gclose(g);
    if (!ok)
      return done(fail(name == expected ? "the particles of species '" + expected + "' are missing or damaged"
                                        : "species " + std::to_string(s) + " is '" + name + "', this input's is '" +
                                              expected + "'"));
  }
  out->step = step;
  out->time = time;
  out->background_rho = background;
  return done(true);
}

}  // namespace pic
