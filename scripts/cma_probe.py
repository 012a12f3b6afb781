#!/usr/bin/python3
"""Exit 0 when one process may read another's memory with process_vm_readv (Linux's cross-memory
attach, CMA), 1 when it may not. Open MPI's shared-memory transport (vader) moves every message
over 4 KiB that way, in one copy that the receiver makes alone. Where the kernel refuses (a
container's seccomp profile, Yama's ptrace_scope 2 or 3), vader fails at the first large message,
so scripts/mpirun.sh asks here first and falls back to copying through shared memory twice
(btl_vader_single_copy_mechanism=none). That fallback is not free: the sender must call into MPI
to push each 32 KiB fragment, so a message waits on the sender's compute (a 2-stage pipeline of
`small` on 2 processes: 5,284 tok/s with it, 6,691 with CMA; docs/parallel-bench.md, issue #33).

As vader does, the process read says first that any process may trace it (Yama's PR_SET_PTRACER),
and the reader is not its ancestor: a child reads its parent, as sibling ranks read each other."""
import ctypes
import os
import sys


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PTRACER, PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1)
    libc.prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)   # fails harmlessly without Yama
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    text = b"pipetrain cma probe"
    theirs = ctypes.create_string_buffer(text)   # in the parent; the child has its own copy, unread
    pid = os.fork()
    if pid == 0:
        ours = ctypes.create_string_buffer(len(text) + 1)
        local = IoVec(ctypes.cast(ours, ctypes.c_void_p), len(text))
        remote = IoVec(ctypes.cast(theirs, ctypes.c_void_p), len(text))
        ctypes.memset(theirs, 0, len(text))   # so a read that "succeeds" from our own copy is caught
        got = libc.process_vm_readv(os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        os._exit(0 if got == len(text) and ours.raw[:len(text)] == text else 1)
    _, status = os.waitpid(pid, 0)
    return 0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
