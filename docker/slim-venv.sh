#!/bin/sh
# Trims the image's virtual environment (docker/Dockerfile, slim stage) to what the server runs:
#   sh slim-venv.sh VENV
# Each removal below is something only installing, exporting or building uses; the container lane
# (tests/containers/) runs the server, the XNNPACK backend, the `etrt` command and the healthcheck
# from the result. docs/containers-image.md lists what remains and why.
set -eu
venv=$1
site=$(echo "$venv"/lib/python3*/site-packages)
[ -d "$site" ] || { echo "error: no site-packages under $venv" >&2; exit 1; }

# pip and setuptools (the venv's own): nothing is installed at run time.
rm -rf "$venv"/bin/pip* "$site"/pip "$site"/pip-*.dist-info "$site"/setuptools \
  "$site"/setuptools-*.dist-info "$site"/pkg_resources "$site"/_distutils_hack \
  "$site"/distutils-precedence.pth

# executorch: the server loads its shared libraries (lib/*.so: the runtime, kernels, the XNNPACK
# backend) and reads its version from the distribution record. Its Python export stack (exir,
# backends' partitioners, examples, devtools), its C++ headers and CMake files (for the native
# build) and flatc (for exporting) are not used here.
find "$site"/executorch -mindepth 1 -maxdepth 1 ! -name lib -exec rm -rf {} +
rm -rf "$site"/executorch/lib/cmake
# ... and its console scripts (bin/flatc), which would call the removed package.
for script in $(sed -n 's|^\.\./\.\./\.\./bin/\([^,]*\),.*|\1|p' "$site"/executorch-*.dist-info/RECORD); do
  rm -f "$venv/bin/$script"
done

# numpy's own test suite and f2py (a Fortran wrapper generator).
rm -rf "$site"/numpy/tests "$site"/numpy/*/tests "$site"/numpy/f2py "$venv"/bin/f2py \
  "$venv"/bin/numpy-config

# Extension modules whose wheels ship their debug sections (uvloop's is 13 MB, 1.6 MB without):
# only those are stripped, and only of debug sections. Libraries that auditwheel grafted and
# patched (*.libs/) are left as they are: strip can break patchelf-modified files.
find "$site" -name '*.so' ! -path '*.libs/*' | while read -r library; do
  if objdump -h "$library" 2>/dev/null | grep -q '\.debug_info'; then
    strip --strip-debug "$library"
  fi
done
