#!/bin/sh
# test_no_mpi_needed.sh — libgpucore.so has no MPI library among its NEEDED entries (a
# single-process user needs no Open MPI installed); MPI is in the MPI module, which
# does list libmpi when the build has one.
#   usage: test_no_mpi_needed.sh READELF LIBGPUCORE [MPI_MODULE]
readelf=$1 lib=$2 module=$3
needed=$("$readelf" -d "$lib" | grep '(NEEDED)') || { echo "FAIL: no NEEDED entries read from $lib"; exit 1; }
echo "$needed"
if echo "$needed" | grep -E 'lib(mpi|open-pal|open-rte|pmix)[._]'; then
  echo "FAIL: $lib needs MPI libraries (above): MPI must stay in its module"
  exit 1
fi
if [ -n "$module" ]; then
  "$readelf" -d "$module" | grep '(NEEDED)' | grep -q 'libmpi\.so' ||
    { echo "FAIL: the MPI module $module does not need libmpi"; exit 1; }
  echo "the MPI module needs libmpi: ok"
fi
echo "test_no_mpi_needed: $lib needs no MPI library"
