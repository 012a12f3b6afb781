// What the MPI tests share: whether they can run here at all.
#pragma once
#include <cstdio>
#include <cstdlib>

#include "src/mpi_comm.hpp"

namespace test {

// 77 (ctest's "skipped") after one line saying why, where this build has no MPI or no mpirun is
// on PATH; 0 where the MPI tests can run.
inline int mpi_skip_code() {
    if (!pt::mpi_built()) {
        std::printf("skipped: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin, then re-run cmake)\n");
        return 77;
    }
    if (std::system("command -v \"${MPIRUN:-mpirun}\" >/dev/null 2>&1") != 0) {
        std::printf("skipped: no mpirun on PATH (apt-get install openmpi-bin)\n");
        return 77;
    }
    return 0;
}

}   // namespace test
