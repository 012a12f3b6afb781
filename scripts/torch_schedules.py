#!/usr/bin/python3
"""Dump the action schedules that PyTorch's own torch.distributed.pipelining
schedule classes generate, in PyTorch's own CSV format, so that the C++ side can
import them and test its schedules against the reference.

    python3 scripts/torch_schedules.py --out DIR [--timeout 120]

For every (class, P ranks, M micro-batches) it writes into DIR:
  <Class>_P<P>_M<M>.csv          compute-only `pipeline_order`, one row per rank
  <Class>_P<P>_M<M>_lowered.csv  the lowered schedule (SEND_F/RECV_F/..., what
                                 _PipelineScheduleRuntime executes)
  manifest.json                  per combination: placement, stage->rank map,
                                 files, which PyTorch path was taken, the CSV
                                 round trip result, or the refusal / error.
The repo commits DIR as tests/fixtures/torch_schedules/.

It runs on the borrowed GPU machine (no GPU is used) because only PyTorch >= 2.6
has these classes; it runs once, unattended, so every combination is wrapped in
try/except and recorded, never fatal. No process group is created: like
PyTorch's test_schedule.py we hand the schedules mock stages.
Exit: 0 if at least one compute-only CSV was written, 1 if none, 77 if
torch.distributed.pipelining is missing.
"""
import argparse
import csv
import inspect
import json
import os
import sys
import time
import traceback

# (class name, stages per rank, placement). Loop: rank r holds r, r+P.
# V: rank r holds r and 2P-1-r (ZBV and DualPipeV compute this themselves).
CLASSES = [
    ("ScheduleGPipe", 1, "loop"),
    ("Schedule1F1B", 1, "loop"),
    ("ScheduleInterleaved1F1B", 2, "loop"),
    ("ScheduleLoopedBFS", 2, "loop"),
    ("ScheduleInterleavedZeroBubble", 2, "loop"),
    ("ScheduleZBVZeroBubble", 2, "v"),
    ("ScheduleDualPipeV", 2, "v"),
]
SHAPES = [(2, 4), (2, 8), (4, 4), (4, 8)]


def dummy_loss(output, target):
    # Only its presence matters: it makes the schedules plan backward actions.
    return output


def cell(action):
    return "" if action is None else str(action)


def as_rows(order):
    return [[cell(a) for a in order[r]] for r in sorted(order)]


def error_record(exc):
    return {"type": type(exc).__name__, "message": str(exc)[:4000],
            "traceback": traceback.format_exc().rstrip().splitlines()[-12:]}


def takes_format(fn):
    try:
        return "format" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def make_mock_stage_class(torch, base):
    """A _PipelineStageBase that skips the real __init__ (which wants a module,
    a device and a process group); only what the constructors read is set."""
    class MockStage(base):
        def __init__(self, stage_index, num_stages, group_rank, group_size):
            self.stage_index = stage_index
            self.num_stages = num_stages
            self.group_rank = group_rank
            self.group_size = group_size
            self.group = None
            self.submod = torch.nn.Module()
            self.device = torch.device("cpu")
            self.p2p_per_edge = False
            self.chunks = None
            self._has_backward = True
            self.stage_index_to_group_rank = {i: i % group_size for i in range(num_stages)}

        def _create_grad_recv_info(self, *args, **kwargs):
            return None

        def _prepare_forward_infra(self, *args, **kwargs):
            return ()

        def _prepare_backward_infra(self, *args, **kwargs):
            return None

    # Newer versions may add abstract methods we never call; allow instantiation.
    MockStage.__abstractmethods__ = frozenset()
    return MockStage


def local_stages(rank, P, per_rank, placement):
    if placement == "v":
        return [rank, 2 * P - 1 - rank]
    return [rank + k * P for k in range(per_rank)]


class Dumper:
    def __init__(self, torch, pp, schedules, stage_base, out):
        self.torch, self.pp, self.schedules, self.out = torch, pp, schedules, out
        self.Stage = make_mock_stage_class(torch, stage_base)
        self.Runtime = getattr(schedules, "_PipelineScheduleRuntime", None)
        self.Multi = getattr(schedules, "PipelineScheduleMulti", None)
        self.Action = getattr(schedules, "_Action", None)
        self.used_process_group = False

    def stages(self, rank, P, per_rank, placement):
        n = P * per_rank
        return [self.Stage(s, n, rank, P) for s in local_stages(rank, P, per_rank, placement)]

    def build(self, cls, rank, P, M, per_rank, placement):
        st = self.stages(rank, P, per_rank, placement)
        try:
            return cls(st[0] if per_rank == 1 else st, M, loss_fn=dummy_loss)
        except Exception as e:  # noqa: BLE001
            # The snapshot's constructors never touch torch.distributed; if this
            # version does, give it a private 1-process gloo group and retry once.
            if "process group" not in str(e).lower() or not self.init_group():
                raise
            st = self.stages(rank, P, per_rank, placement)
            return cls(st[0] if per_rank == 1 else st, M, loss_fn=dummy_loss)

    def init_group(self):
        dist = self.torch.distributed
        if not dist.is_available() or dist.is_initialized():
            return False
        import tempfile
        try:
            store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        except Exception as e:  # noqa: BLE001 - then the original error is reported
            self.used_process_group = f"init failed: {type(e).__name__}: {e}"
            return False
        self.used_process_group = True
        return True

    def runtime(self, P, per_rank, placement, M):
        if self.Runtime is None:
            raise RuntimeError("this torch has no _PipelineScheduleRuntime")
        return self.Runtime(self.stages(0, P, per_rank, placement), M, loss_fn=dummy_loss)

    def dump(self, holder, order, path, fmt):
        """PyTorch's own _dump_csv when there is one, checked against memory;
        otherwise (or if it disagrees) csv.writer over str(action)."""
        expected, note = as_rows(order), ""
        fn = getattr(holder, "_dump_csv", None)
        how = None
        try:
            if fn is not None and takes_format(fn):
                fn(path, format=fmt)
                how = f"{type(holder).__name__}._dump_csv(format={fmt!r})"
            elif fmt == "compute_only" and self.Multi and isinstance(holder, self.Multi):
                self.Multi._dump_csv(holder, path)  # the base one writes pipeline_order
                how = "PipelineScheduleMulti._dump_csv"
            elif fmt == "compute_comms" and self.Runtime and isinstance(holder, self.Runtime):
                fn(path)  # older runtimes dumped the comms schedule without a format
                how = "_PipelineScheduleRuntime._dump_csv()"
        except Exception as e:  # noqa: BLE001 - any failure means: use the fallback
            how, note = None, f" (own dumper failed: {type(e).__name__}: {e})"
        if how is not None:
            with open(path, newline="") as f:
                if list(csv.reader(f)) == expected:
                    return how
            note = f" ({how} disagreed with memory, rewritten)"
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(expected)
        return "csv.writer(str(action))" + note

    def lower(self, sched, order, P, per_rank, placement, M):
        comms = getattr(sched, "pipeline_order_with_comms", None)
        if comms:
            return sched, comms, "constructor's pipeline_order_with_comms"
        # Single-stage schedules: lower their order with the runtime's own passes.
        # Its compute_only check refuses REDUCE_GRAD, which it re-adds itself.
        rt = self.runtime(P, per_rank, placement, M)
        compute = {r: [a for a in acts if a is None or is_compute(a)] for r, acts in order.items()}
        dropped = sum(len(order[r]) - len(compute[r]) for r in order)
        name = "_prepare_schedule_with_comms" if hasattr(rt, "_prepare_schedule_with_comms") else "_load_actions"
        getattr(rt, name)(compute)
        rt.pipeline_order = compute
        how = f"_PipelineScheduleRuntime.{name}(pipeline_order minus {dropped} non-compute actions)"
        return rt, rt.pipeline_order_with_comms, how

    def round_trip(self, path, order, comms, P, per_rank, placement, M):
        rec = {}
        try:
            rt = self.runtime(P, per_rank, placement, M)
            rt._load_csv(path)  # compute_only: parse, validate, lower
            loaded, rec["path"] = rt.pipeline_order, "_PipelineScheduleRuntime._load_csv"
            rec["lowered_equal"] = as_rows(rt.pipeline_order_with_comms) == as_rows(comms)
        except Exception as e:  # noqa: BLE001
            rec["load_csv_error"] = error_record(e)
            with open(path, newline="") as f:
                loaded = {r: [self.Action.from_str(s) for s in row] for r, row in enumerate(csv.reader(f))}
            rec["path"] = "_Action.from_str (after _load_csv failed)"
        want = {int(r): list(v) for r, v in order.items()}
        got = {int(r): list(v) for r, v in loaded.items()}
        rec["equal"] = want == got
        if not rec["equal"]:
            rec["first_difference"] = first_difference(as_rows(want), as_rows(got))
        return rec


def is_compute(action):
    flag = getattr(action, "is_compute_op", None)
    return bool(flag) if flag is not None else str(action.computation_type) in ("F", "B", "I", "W")


def first_difference(a, b):
    for r in range(max(len(a), len(b))):
        ra, rb = (a[r] if r < len(a) else None), (b[r] if r < len(b) else None)
        if ra != rb:
            if ra is None or rb is None:
                return {"rank": r, "original": ra, "loaded": rb}
            step = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
            return {"rank": r, "step": step, "original": ra[step:step + 3], "loaded": rb[step:step + 3]}
    return None


def one_combination(d, name, per_rank, placement, P, M):
    entry = {"class": name, "P": P, "M": M, "stages_per_rank": per_rank, "placement": placement,
             "rank_to_stages": {str(r): local_stages(r, P, per_rank, placement) for r in range(P)}}
    cls = getattr(d.pp, name, None) or getattr(d.schedules, name, None)
    if cls is None:
        entry.update(status="missing", message=f"{name} is not in this torch")
        return entry, "missing"
    try:
        sched = d.build(cls, 0, P, M, per_rank, placement)
    except Exception as e:  # noqa: BLE001 - a refusal is data, not a failure
        entry.update(status="refused" if isinstance(e, ValueError) else "error", error=error_record(e))
        return entry, f"{entry['status']}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    order = getattr(sched, "pipeline_order", None)
    if not order:
        entry.update(status="error", message="schedule has no pipeline_order")
        return entry, "error: no pipeline_order"
    base = f"{name}_P{P}_M{M}"
    entry["files"] = [base + ".csv"]
    entry["compute_dump"] = d.dump(sched, order, os.path.join(d.out, base + ".csv"), "compute_only")
    entry["status"] = "ok"
    counts = [sum(a is not None for a in order[r]) for r in sorted(order)]
    entry["actions_per_rank"] = counts
    entry["ranks_agree"] = ranks_agree(d, cls, order, P, M, per_rank, placement)
    parts = [f"{min(counts)}-{max(counts)}" if min(counts) != max(counts) else f"{counts[0]}"]
    parts[0] += " actions/rank"
    holder, comms = None, None
    try:
        holder, comms, entry["lowering"] = d.lower(sched, order, P, per_rank, placement, M)
        entry["lowered_dump"] = d.dump(holder, comms, os.path.join(d.out, base + "_lowered.csv"), "compute_comms")
        entry["files"].append(base + "_lowered.csv")
        parts.append("lowered ok")
    except Exception as e:  # noqa: BLE001
        entry["lowering_error"] = error_record(e)
        parts.append(f"lowering failed ({type(e).__name__})")
    mapping = getattr(sched, "stage_index_to_group_rank", None) or getattr(holder, "stage_index_to_group_rank", None)
    entry["stage_to_rank"] = {str(s): r for s, r in sorted(mapping.items())} if mapping else None
    try:
        rt = d.round_trip(os.path.join(d.out, base + ".csv"), order, comms or {}, P, per_rank, placement, M)
        entry["round_trip"] = rt
        bad = [k for k in ("equal", "lowered_equal") if rt.get(k) is False]
        parts.append("round trip ok" if not bad else "round trip DIFFERS (" + ", ".join(bad) + ")")
    except Exception as e:  # noqa: BLE001
        entry["round_trip"] = {"error": error_record(e)}
        parts.append(f"round trip failed ({type(e).__name__})")
    return entry, ", ".join(parts)


def ranks_agree(d, cls, order, P, M, per_rank, placement):
    """Every rank computes the whole plan; check that rank r's copy is rank 0's."""
    differ = []
    for r in range(1, P):
        try:
            if as_rows(d.build(cls, r, P, M, per_rank, placement).pipeline_order) != as_rows(order):
                differ.append(r)
        except Exception as e:  # noqa: BLE001
            differ.append(f"rank {r}: {type(e).__name__}: {e}")
    return True if not differ else differ


def write_manifest(out, manifest):
    tmp = os.path.join(out, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "manifest.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    try:
        import torch
        import torch.distributed.pipelining as pp
        from torch.distributed.pipelining import schedules
        from torch.distributed.pipelining.stage import _PipelineStageBase
    except Exception as e:  # noqa: BLE001
        print(f"torch.distributed.pipelining is not available ({type(e).__name__}: {e}); nothing dumped")
        return 77
    os.makedirs(args.out, exist_ok=True)
    d = Dumper(torch, pp, schedules, _PipelineStageBase, args.out)
    manifest = {"torch_version": torch.__version__, "python": sys.version.split()[0],
                "generator": "scripts/torch_schedules.py", "entries": []}
    start, tally = time.monotonic(), {}
    for name, per_rank, placement in CLASSES:
        for P, M in SHAPES:
            if time.monotonic() - start > args.timeout:
                entry, line = {"class": name, "P": P, "M": M, "status": "skipped",
                               "message": f"--timeout {args.timeout}s reached"}, "skipped (timeout)"
            else:
                try:
                    entry, line = one_combination(d, name, per_rank, placement, P, M)
                except Exception as e:  # noqa: BLE001 - last resort: never lose the run
                    entry = {"class": name, "P": P, "M": M, "status": "error", "error": error_record(e)}
                    line = f"error: {type(e).__name__}: {e}"
            entry["torch_version"] = torch.__version__
            manifest["entries"].append(entry)
            tally[entry["status"]] = tally.get(entry["status"], 0) + 1
            print(f"{name} P={P} M={M}: {line}", flush=True)
            write_manifest(args.out, manifest)
    manifest["used_process_group"] = d.used_process_group
    write_manifest(args.out, manifest)
    written = sum(1 for e in manifest["entries"] if e.get("files"))
    print(f"summary: torch {torch.__version__}, {written} compute-only CSVs written, "
          + ", ".join(f"{v} {k}" for k, v in sorted(tally.items()))
          + f", {time.monotonic() - start:.1f}s, manifest {os.path.join(args.out, 'manifest.json')}")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
