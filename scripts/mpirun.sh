#!/usr/bin/env bash
# scripts/mpirun.sh NP PROGRAM [ARGS...] — runs PROGRAM as NP MPI ranks on this machine:
# `mpirun -np NP PROGRAM ARGS...` plus what Open MPI needs here and MPICH does not:
#   * as root, Open MPI refuses to start without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1;
#   * more ranks than cores (a laptop lab, CI) needs --oversubscribe;
#   * in containers, its shared-memory transport's single-copy mechanism (CMA) is often not
#     allowed (ptrace limits): OMPI_MCA_btl_vader_single_copy_mechanism=none copies twice instead.
# A setting already in the environment is kept. Tests and docs launch MPI runs through this.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/mpirun.sh NP PROGRAM [ARGS...]" >&2
  exit 2
fi
np=$1
shift
MPIRUN=${MPIRUN:-mpirun}
if ! command -v "$MPIRUN" >/dev/null; then
  echo "scripts/mpirun.sh: no $MPIRUN on PATH (install openmpi-bin, or set MPIRUN)" >&2
  exit 127
fi
extra=()
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
    export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
  fi
  if [ -f /.dockerenv ] || [ -f /run/.containerenv ] || grep -qaE 'docker|containerd|kubepods|lxc' /proc/1/cgroup 2>/dev/null; then
    export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
  fi
  extra+=(--oversubscribe)
fi
exec "$MPIRUN" ${extra[@]+"${extra[@]}"} -np "$np" "$@"
