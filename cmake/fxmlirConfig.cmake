# The fxmlir package for CMake: `find_package(fxmlir CONFIG REQUIRED)`, then link
# `fxmlir::fxmlir` (the C API: include/fxmlir.h, libfxmlir.so).
#
# From a source build (`make build` or `cargo build --release --lib`):
#   cmake -DCMAKE_PREFIX_PATH=<repo>/cmake ...
# From an install (`make install PREFIX=<prefix>`): -DCMAKE_PREFIX_PATH=<prefix>.
#
# Sets fxmlir_ABI_VERSION (FXMLIR_ABI_VERSION in the header; check fxmlir_abi_version() at run
# time too), fxmlir_INCLUDE_DIR and fxmlir_LIBRARY. `fxmlir::mlir_c` is the MLIR C API fxmlir
# runs (libMLIR-C.so and MLIR's headers, from fxmlir_MLIR_PREFIX): link it to write a C pass
# for fxmlir_session_add_external_stage (include/fxmlir-mlir.h).

set(fxmlir_ABI_VERSION 1)
set(fxmlir_MLIR_PREFIX "/usr/lib/llvm-22" CACHE PATH "The LLVM/MLIR 22 fxmlir was built against")

get_filename_component(_fxmlir_here "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
if(EXISTS "${_fxmlir_here}/../include/fxmlir.h" AND EXISTS "${_fxmlir_here}/../Cargo.toml")
  # <repo>/cmake: the source tree.
  get_filename_component(_fxmlir_root "${_fxmlir_here}/.." ABSOLUTE)
  set(_fxmlir_libdir "${_fxmlir_root}/target/release")
  set(_fxmlir_hint "build it in ${_fxmlir_root} with `make build` (or `cargo build --release --lib`)")
else()
  # <prefix>/lib/cmake/fxmlir: an install.
  get_filename_component(_fxmlir_root "${_fxmlir_here}/../../.." ABSOLUTE)
  set(_fxmlir_libdir "${_fxmlir_root}/lib")
  set(_fxmlir_hint "reinstall fxmlir into ${_fxmlir_root} (`make install PREFIX=${_fxmlir_root}`)")
endif()
set(fxmlir_INCLUDE_DIR "${_fxmlir_root}/include")
set(fxmlir_LIBRARY "${_fxmlir_libdir}/libfxmlir.so")
set(fxmlir_MLIR_C_LIBRARY "${_fxmlir_libdir}/libMLIR-C.so")

if(NOT EXISTS "${fxmlir_LIBRARY}" OR NOT EXISTS "${fxmlir_INCLUDE_DIR}/fxmlir.h")
  set(fxmlir_FOUND FALSE)
  set(fxmlir_NOT_FOUND_MESSAGE "fxmlir: no ${fxmlir_LIBRARY}: ${_fxmlir_hint}")
  return()
endif()

# An imported shared library: its target, file, soname and include directory.
function(_fxmlir_import target location soname include)
  if(NOT TARGET ${target})
    add_library(${target} SHARED IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${location}"
      IMPORTED_SONAME "${soname}"
      INTERFACE_INCLUDE_DIRECTORIES "${include}")
  endif()
endfunction()
_fxmlir_import(fxmlir::fxmlir "${fxmlir_LIBRARY}" libfxmlir.so "${fxmlir_INCLUDE_DIR}")
_fxmlir_import(fxmlir::mlir_c "${fxmlir_MLIR_C_LIBRARY}" libMLIR-C.so "${fxmlir_MLIR_PREFIX}/include")
set(fxmlir_FOUND TRUE)
