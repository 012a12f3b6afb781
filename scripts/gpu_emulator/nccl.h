// scripts/gpu_emulator/nccl.h — the NCCL calls that src/nccl_comm.cpp makes, for the emulated GPU
// (implemented at the end of emu_runtime.cpp; README.md says how). Only what pipetrain calls is
// here: a new NCCL call fails to compile instead of being emulated wrongly.
#pragma once
#include <cuda_runtime.h>

enum ncclResult_t {  // the values of the real nccl.h
    ncclSuccess = 0,
    ncclSystemError = 2,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
};
enum ncclDataType_t { ncclChar = 0, ncclFloat = 7 };
enum ncclRedOp_t { ncclSum = 0 };
typedef struct EmuNcclComm* ncclComm_t;
struct ncclUniqueId {
    char internal[128];
};

const char* ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int n, const int* devices);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int n, ncclUniqueId id, int rank);  // on the rank's device
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclAllReduce(const void* sendbuf, void* recvbuf, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s);
