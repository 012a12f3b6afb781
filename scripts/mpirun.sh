#!/usr/bin/env bash
# scripts/mpirun.sh NP PROGRAM [ARGS...] — runs PROGRAM as NP MPI ranks on this machine:
# `mpirun -np NP PROGRAM ARGS...` plus what Open MPI needs here and MPICH does not:
#   * as root, Open MPI refuses to start without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1;
#   * more ranks than cores (a laptop lab, CI) needs --oversubscribe;
#   * --bind-to none: a rank bound to one core cannot lend it to the others while it waits;
#   * where the kernel forbids one process to read another's memory (a container's seccomp,
#     Yama's ptrace_scope), its shared-memory transport's single copy (CMA) fails at the first
#     large message: scripts/cma_probe.py asks the kernel, and only then is
#     OMPI_MCA_btl_vader_single_copy_mechanism=none set (copies twice, and a message over the eager
#     limit then waits for its sender to call MPI: so the eager limit goes from 4 to 512 KiB).
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
  if [ -z "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ] && ! "$(dirname "$0")/cma_probe.py" 2>/dev/null; then
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
  fi
  # Copying twice, a message over the eager limit (4 KiB) goes in 32 KiB pieces, each only while its
  # sender is inside an MPI call; up to 512 KiB it now goes at once, in one piece. small's 2-stage
  # 1F1B: 3,300-3,356 tok/s copying twice, 4,115-4,231 with this, 4,199-4,285 with the single copy.
  if [ "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" = none ]; then
    export OMPI_MCA_btl_vader_eager_limit=${OMPI_MCA_btl_vader_eager_limit:-524288}
    export OMPI_MCA_btl_vader_max_send_size=${OMPI_MCA_btl_vader_max_send_size:-524288}
  fi
  # Open MPI binds each rank to one core by default; a rank waiting for a message then cannot lend
  # its core to the other ranks' kernels (kernels/cpu/threads.cpp). small's 2-stage pipeline on 2
  # cores: 3,400-3,530 tok/s bound, 3,800-3,910 unbound and lending.
  extra+=(--oversubscribe --bind-to none)
  # Two mpiruns at once on one host (ctest -j2) share Open MPI's session directory,
  # $TMPDIR/ompi.HOST.UID: one finishing removes it while the other is about to make its pid.N
  # inside, and that one fails "A call to mkdir was unable to create the desired directory"
  # (open-mpi/ompi#8510; CI, 2026-12-05). Each run gets a base of its own, removed after it.
  if [ -z "${OMPI_MCA_orte_tmpdir_base:-}" ]; then
    base=$(mktemp -d "${TMPDIR:-/tmp}/pipetrain-mpirun.XXXXXX")
    export OMPI_MCA_orte_tmpdir_base=$base
    # not exec: the base is removed once mpirun ends; a signal to this script goes on to mpirun
    "$MPIRUN" ${extra[@]+"${extra[@]}"} -np "$np" "$@" <&0 &   # the same command as the exec below
    pid=$!
    trap 'kill -TERM "$pid" 2>/dev/null' TERM INT HUP
    rc=0
    wait "$pid" || rc=$?
    while kill -0 "$pid" 2>/dev/null; do wait "$pid" || rc=$?; done   # a trapped signal ended the first wait
    rm -rf "$base"
    exit "$rc"
  fi
fi
exec "$MPIRUN" ${extra[@]+"${extra[@]}"} -np "$np" "$@"
