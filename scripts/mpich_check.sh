#!/usr/bin/env bash
# MPICH instead of Open MPI (prints, and fails on a difference): builds pipetrain against MPICH in
# build-mpich/ (Debian's mpich + libmpich-dev, which `apt-get install` beside Open MPI leaves the
# default), runs test_mpi_comm under MPICH's launcher (mpiexec.mpich, Hydra), then a 4-process
# training under mpiexec.mpich against the same run as 4 threads: every file must be identical.
#   usage: scripts/mpich_check.sh            (about 2 minutes on 2 cores; not part of ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mpiexec.mpich >/dev/null && [ -x /usr/bin/mpicxx.mpich ] ||
  { echo "mpich_check: needs MPICH: sudo apt-get install -y mpich libmpich-dev" >&2; exit 77; }
cmake -S . -B build-mpich -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA=OFF -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich |
  grep 'pipetrain: MPI'
cmake --build build-mpich -j"$(nproc)" --target pipetrain mpi_comm_worker test_mpi_comm >/dev/null
MPIRUN=mpiexec.mpich build-mpich/test_mpi_comm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(--preset tiny --data tests/fixtures/text/sample_zh.txt --stages 4 --micro-batches 4 --steps 3 --save-every 3)
build-mpich/pipetrain train "${flags[@]}" --out "$tmp/threads" >/dev/null
timeout 120 mpiexec.mpich -n 4 build-mpich/pipetrain train "${flags[@]}" --out "$tmp/procs" | tail -n 1
diff -r -x metrics.jsonl "$tmp/threads" "$tmp/procs" >/dev/null && echo "mpich_check: 4 MPICH processes wrote the bits of 4 threads" ||
  { echo "mpich_check: the MPICH run differs from the threads" >&2; exit 1; }
