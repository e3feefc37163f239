// Small HDF5 helpers shared by the openPMD output and the checkpoints (apps/pic only: the files
// that include this are compiled with HDF5's headers). HDF5 is Debian's parallel build
// (libhdf5-openmpi-dev): files of a run on several ranks are written by all of them together
// (MPI-IO, collective writes), each rank its own blocks of every dataset; with one process the
// same calls write through HDF5's default driver and no MPI call is made.
#pragma once
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "domain.hpp"

namespace pic {

inline void attr_string(hid_t obj, const char *name, const std::string &value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() ? value.size() : 1);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, value.c_str());
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

inline void attr_strings(hid_t obj, const char *name, const std::vector<std::string> &values) {
  size_t width = 1;
  for (const auto &v : values) width = std::max(width, v.size());
  std::vector<char> buf(width * values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i) std::copy(values[i].begin(), values[i].end(), buf.begin() + i * width);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, width);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  hsize_t n = values.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, buf.data());
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

// An attribute of `count` values of an HDF5 type: a scalar when count is 0.
inline void attr_raw(hid_t obj, const char *name, hid_t type, const void *data, hsize_t count) {
  hid_t space = count ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, data);
  H5Aclose(a);
  H5Sclose(space);
}

template <class T>
void attr_scalar(hid_t obj, const char *name, hid_t type, T value) {
  attr_raw(obj, name, type, &value, 0);
}

inline void attr_doubles(hid_t obj, const char *name, const std::vector<double> &v) {
  attr_raw(obj, name, H5T_NATIVE_DOUBLE, v.data(), v.size());
}

inline void attr_u64s(hid_t obj, const char *name, const std::vector<uint64_t> &v) {
  attr_raw(obj, name, H5T_NATIVE_UINT64, v.data(), v.size());
}

inline hid_t group(hid_t parent, const std::string &name) {
  return H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

static_assert(std::is_same_v<hsize_t, unsigned long long>, "Block holds HDF5's hsize_t");

// A file created by every rank together (MPI-IO with several ranks); *xfer is the transfer
// property for collective writes (H5P_DEFAULT with one process), closed with close_shared.
inline hid_t create_shared(const Comm &comm, const std::string &path, hid_t *xfer) {
  *xfer = H5P_DEFAULT;
  hid_t access = H5P_DEFAULT;
  if (comm.parallel()) {
    access = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(access, comm.handle(), MPI_INFO_NULL);
    *xfer = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(*xfer, H5FD_MPIO_COLLECTIVE);
  }
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access);
  if (access != H5P_DEFAULT) H5Pclose(access);
  return file;
}

inline bool close_shared(hid_t file, hid_t xfer) {
  if (xfer != H5P_DEFAULT) H5Pclose(xfer);
  return H5Fclose(file) >= 0;
}

// Selects `blocks` of `space` (none when there are none).
inline void select_blocks(hid_t space, const Blocks &blocks) {
  H5Sselect_none(space);
  for (const Block &b : blocks) H5Sselect_hyperslab(space, H5S_SELECT_OR, b.start.data(), nullptr, b.count.data(), nullptr);
}

inline hsize_t elements(const Blocks &blocks) {
  hsize_t n = 0;
  for (const Block &b : blocks) {
    hsize_t e = 1;
    for (hsize_t c : b.count) e *= c;
    n += e;
  }
  return n;
}

// Creates a dataset of global shape `dims` (every rank calls this) and writes this rank's blocks
// of it from `data` (their elements in file order). Returns the open dataset (for attributes; the
// caller closes it), or -1 when HDF5 refuses (the disk is full, say).
inline hid_t write_blocks(hid_t parent, const char *name, hid_t type, const std::vector<hsize_t> &dims,
                          const Blocks &blocks, const void *data, hid_t xfer) {
  hid_t file_space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(parent, name, type, file_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t n = elements(blocks);
  const hsize_t one = 1;
  hid_t memory = H5Screate_simple(1, n ? &n : &one, nullptr);
  if (!n) H5Sselect_none(memory);
  select_blocks(file_space, blocks);
  bool ok = d >= 0 && H5Dwrite(d, type, memory, file_space, xfer, data) >= 0;
  H5Sclose(memory);
  H5Sclose(file_space);
  if (!ok && d >= 0) H5Dclose(d), d = -1;
  return d;
}

// Reads this rank's blocks of dataset `name` into `data`; false when it is missing, not of shape
// `dims`, or unreadable (damaged).
inline bool read_blocks(hid_t parent, const std::string &name, hid_t type, const std::vector<hsize_t> &dims,
                        const Blocks &blocks, void *data) {
  if (H5Lexists(parent, name.c_str(), H5P_DEFAULT) <= 0) return false;
  hid_t d = H5Dopen2(parent, name.c_str(), H5P_DEFAULT);
  if (d < 0) return false;
  hid_t file_space = H5Dget_space(d);
  std::vector<hsize_t> have(dims.size());
  bool ok = H5Sget_simple_extent_ndims(file_space) == static_cast<int>(dims.size()) &&
            H5Sget_simple_extent_dims(file_space, have.data(), nullptr) >= 0 && have == dims;
  const hsize_t n = elements(blocks), one = 1;
  hid_t memory = H5Screate_simple(1, n ? &n : &one, nullptr);
  if (!n) H5Sselect_none(memory);
  if (ok) {
    select_blocks(file_space, blocks);
    ok = H5Dread(d, type, memory, file_space, H5P_DEFAULT, data) >= 0;
  }
  H5Sclose(memory);
  H5Sclose(file_space);
  H5Dclose(d);
  return ok;
}

}  // namespace pic
