// Small HDF5 writing helpers shared by the openPMD output and the checkpoints (apps/pic only: the
// files that include this are compiled with HDF5's headers).
#pragma once
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

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

// A 1-D dataset of `count` values; false when HDF5 refuses (the disk is full, say).
inline bool write_array(hid_t parent, const char *name, hid_t type, const void *data, hsize_t count) {
  hid_t space = H5Screate_simple(1, &count, nullptr);
  hid_t d = H5Dcreate2(parent, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  bool ok = d >= 0 && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
  if (d >= 0) H5Dclose(d);
  H5Sclose(space);
  return ok;
}

}  // namespace pic
