# `cmake --install build --prefix PREFIX`: everything a user runs and builds against (docs/install.md).
#
#   PREFIX/bin                  the hetmem command (a launcher for its Python package), hetmem-tiers,
#                               hetmem-run, hetmem-pic, hetmem-amr, hetmem-mg, hetmem-replica, hetmem_demo
#   PREFIX/lib                  libhetmem.so, libhetmem.a, libhetmem_fortran.a, libhetmem_preload.so,
#                               hetmem-memkind/libmemkind.so.0, pkgconfig/hetmem.pc,
#                               cmake/hetmem/ (find_package(hetmem CONFIG))
#   PREFIX/include              hetmem/*.h, hetmem.mod (gfortran's module of the Fortran interface)
#   PREFIX/lib/hetmem           what only the command uses, laid out as the build tree: python/ (the
#                               package and numpy's handler), bench/ (the benchmarks' programs), fdb/
#                               (the FDB store plugin and its manifest)
#   PREFIX/share/man/man1       hetmem.1 and one page per subcommand (from the command's parsers)
include(CMakePackageConfigHelpers)

set(HM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hetmem)

# Libraries and headers, with the targets a user's CMake imports: hetmem::hetmem (shared),
# hetmem::hetmem_static, hetmem::fortran, hetmem::pm_octree.
set_target_properties(hetmem_static PROPERTIES EXPORT_NAME hetmem_static)
set_target_properties(hetmem_pm_octree PROPERTIES EXPORT_NAME pm_octree)
install(TARGETS hetmem hetmem_pm_octree EXPORT hetmemTargets)
install(TARGETS hetmem_static EXPORT hetmemStaticTargets)
install(DIRECTORY include/hetmem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(HM_ENABLE_FORTRAN)
  set_target_properties(hetmem_fortran PROPERTIES EXPORT_NAME fortran)
  install(TARGETS hetmem_fortran EXPORT hetmemTargets)
  install(FILES ${CMAKE_BINARY_DIR}/fortran/hetmem.mod DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
install(EXPORT hetmemTargets NAMESPACE hetmem:: DESTINATION ${HM_CMAKE_DIR})
install(EXPORT hetmemStaticTargets NAMESPACE hetmem:: DESTINATION ${HM_CMAKE_DIR})
configure_package_config_file(cmake/hetmemConfig.cmake.in ${CMAKE_BINARY_DIR}/cmake/hetmemConfig.cmake
                              INSTALL_DESTINATION ${HM_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/hetmemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/hetmemConfig.cmake ${CMAKE_BINARY_DIR}/cmake/hetmemConfigVersion.cmake
        DESTINATION ${HM_CMAKE_DIR})
# The same package from the build tree (find_package(hetmem CONFIG) with hetmem_DIR=build/cmake).
export(EXPORT hetmemTargets NAMESPACE hetmem:: FILE ${CMAKE_BINARY_DIR}/cmake/hetmemTargets.cmake)
export(EXPORT hetmemStaticTargets NAMESPACE hetmem:: FILE ${CMAKE_BINARY_DIR}/cmake/hetmemStaticTargets.cmake)

# pkg-config: one file for the install (relocatable: paths from the file's own place) and one for
# the build tree (headers in the source tree, libraries in the build tree).
file(RELATIVE_PATH HM_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
set(HM_PC_PREFIX "\${pcfiledir}/${HM_PC_TO_PREFIX}")
set(HM_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(HM_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
set(HM_PC_FMODDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
foreach(pc hetmem hetmem-static hetmem-fortran)
  configure_file(cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/pkgconfig-install/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/pkgconfig-install/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
set(HM_PC_PREFIX ${CMAKE_BINARY_DIR})
set(HM_PC_LIBDIR ${CMAKE_BINARY_DIR})
set(HM_PC_INCLUDEDIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
set(HM_PC_FMODDIR ${CMAKE_BINARY_DIR}/fortran)
foreach(pc hetmem hetmem-static hetmem-fortran)
  configure_file(cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/pkgconfig/${pc}.pc @ONLY)
endforeach()

# Run paths. Every installed binary finds libhetmem.so relative to itself, by one run path that
# holds in the build tree and in the install alike (BUILD_WITH_INSTALL_RPATH), so that `cmake
# --install` rewrites nothing. (CMake's own way, an absolute build path rewritten at install, pads
# a build path shorter than the install's with ':', empty entries the loader reads as the current
# directory: every library looked for there first.) Directories outside the system's that a
# target links from (Open MPI's HDF5, FDB's wheels) are kept (INSTALL_RPATH_USE_LINK_PATH).
function(hm_relative_run_path target build_dir install_dir)
  file(RELATIVE_PATH to_build_lib ${build_dir} ${CMAKE_BINARY_DIR})
  file(RELATIVE_PATH to_install_lib ${CMAKE_INSTALL_PREFIX}/${install_dir} ${CMAKE_INSTALL_FULL_LIBDIR})
  set(paths "$ORIGIN/${to_install_lib}")
  if(NOT to_build_lib STREQUAL to_install_lib)
    list(APPEND paths "$ORIGIN/${to_build_lib}")
  endif()
  list(TRANSFORM paths REPLACE "/$" "")
  set_target_properties(${target} PROPERTIES BUILD_WITH_INSTALL_RPATH TRUE INSTALL_RPATH "${paths};${ARGN}"
                        INSTALL_RPATH_USE_LINK_PATH TRUE)
endfunction()

# Programs: the applications and tools into bin, the benchmarks' programs into the hetmem home.
set(HM_APPS hetmem-tiers hetmem-run hetmem-pic hetmem-amr hetmem-replica hetmem_demo)
if(TARGET hetmem-mg)
  list(APPEND HM_APPS hetmem-mg)
endif()
foreach(app ${HM_APPS})
  get_target_property(dir ${app} BINARY_DIR)
  hm_relative_run_path(${app} ${dir} ${CMAKE_INSTALL_BINDIR})
endforeach()
install(TARGETS ${HM_APPS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(HM_ENABLE_BENCH)
  get_directory_property(HM_BENCH_TARGETS DIRECTORY bench BUILDSYSTEM_TARGETS)
  set(HM_BENCH_PROGRAMS)
  foreach(t ${HM_BENCH_TARGETS})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "EXECUTABLE")
      list(APPEND HM_BENCH_PROGRAMS ${t})
      hm_relative_run_path(${t} ${CMAKE_BINARY_DIR}/bench ${HM_INSTALL_HOME}/bench)
    endif()
  endforeach()
  install(TARGETS ${HM_BENCH_PROGRAMS} RUNTIME DESTINATION ${HM_INSTALL_HOME}/bench)
endif()
hm_relative_run_path(hetmem_preload ${CMAKE_BINARY_DIR} ${CMAKE_INSTALL_LIBDIR})
install(TARGETS hetmem_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# In a directory of its own: on LD_LIBRARY_PATH only for the programs that should use it.
hm_relative_run_path(hetmem_memkind ${CMAKE_BINARY_DIR}/memkind ${CMAKE_INSTALL_LIBDIR}/hetmem-memkind)
install(TARGETS hetmem_memkind LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/hetmem-memkind)

# The FDB store and the programs that load FDB keep their paths to FDB's libraries (the Python
# environment's wheels, as in the build tree).
if(HM_FDB_BUILT)
  set(HM_FDB_RPATH "${HM_FDB_DIR}/lib64;${HM_ECKIT_DIR}/lib64;${HM_METKIT_DIR}/lib64;${HM_ECCODES_DIR}/lib64")
  get_target_property(dir hetmem-mg BINARY_DIR)
  hm_relative_run_path(hetmem-mg ${dir} ${CMAKE_INSTALL_BINDIR} ${HM_FDB_RPATH})
  hm_relative_run_path(hetmem_fdb ${CMAKE_BINARY_DIR}/fdb/lib ${HM_INSTALL_HOME}/fdb/lib ${HM_FDB_RPATH})
  install(TARGETS hetmem_fdb LIBRARY DESTINATION ${HM_INSTALL_HOME}/fdb/lib)
  install(FILES ${CMAKE_BINARY_DIR}/fdb/share/plugins/hetmem-fdb.yml DESTINATION ${HM_INSTALL_HOME}/fdb/share/plugins)
endif()

# The hetmem command: its Python package, numpy's handler beside it, a note that says where the
# rest of the install is, and a launcher that runs the package with the Python it was built for.
install(DIRECTORY python/hetmem DESTINATION ${HM_INSTALL_HOME}/python
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
if(TARGET hetmem_numpy)
  hm_relative_run_path(hetmem_numpy ${CMAKE_BINARY_DIR}/python ${HM_INSTALL_HOME}/python)
  install(TARGETS hetmem_numpy LIBRARY DESTINATION ${HM_INSTALL_HOME}/python)
endif()
file(RELATIVE_PATH HM_HOME_TO_LIB ${CMAKE_INSTALL_FULL_LIBDIR}/hetmem ${CMAKE_INSTALL_FULL_LIBDIR})
file(RELATIVE_PATH HM_HOME_TO_BIN ${CMAKE_INSTALL_FULL_LIBDIR}/hetmem ${CMAKE_INSTALL_FULL_BINDIR})
file(RELATIVE_PATH HM_BIN_TO_HOME ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR}/hetmem)
configure_file(cmake/installed.py.in ${CMAKE_BINARY_DIR}/install/_installed.py @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/install/_installed.py DESTINATION ${HM_INSTALL_HOME}/python/hetmem)
configure_file(cmake/hetmem-launcher.sh.in ${CMAKE_BINARY_DIR}/install/hetmem @ONLY)
install(PROGRAMS ${CMAKE_BINARY_DIR}/install/hetmem DESTINATION ${CMAKE_INSTALL_BINDIR})

# Sources the commands read at run time: the program hetmem bench memkind compiles, the inputs of
# the real-program suite (hetmem bench unchanged, overhead), the quick tour's rules.
install(FILES bench/programs/memkind_pairs.c DESTINATION ${HM_INSTALL_HOME}/bench/programs)
install(FILES examples/unchanged_numpy.py examples/placement.rules DESTINATION ${HM_INSTALL_HOME}/examples)
install(FILES examples/lammps/in.lj DESTINATION ${HM_INSTALL_HOME}/examples/lammps)

# Man pages, written by the command from its own parsers (python/hetmem/manpages.py).
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import argparse_manpage" RESULT_VARIABLE HM_MANPAGE_RC
                OUTPUT_QUIET ERROR_QUIET)
if(NOT HM_MANPAGE_RC EQUAL 0)
  message(STATUS "hetmem: no man pages (${Python3_EXECUTABLE} lacks argparse-manpage; scripts/setup.sh installs it)")
  return()
endif()
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/man/hetmem.1
                   COMMAND ${CMAKE_COMMAND} -E env --modify PYTHONPATH=path_list_prepend:${CMAKE_CURRENT_SOURCE_DIR}/python
                           ${Python3_EXECUTABLE} -m hetmem.manpages ${CMAKE_BINARY_DIR}/man
                   DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/hetmem/cli.py ${CMAKE_CURRENT_SOURCE_DIR}/python/hetmem/manpages.py
                   COMMENT "Writing the man pages from the hetmem command's parsers")
add_custom_target(hetmem_man ALL DEPENDS ${CMAKE_BINARY_DIR}/man/hetmem.1)
install(DIRECTORY ${CMAKE_BINARY_DIR}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 FILES_MATCHING PATTERN "*.1")
