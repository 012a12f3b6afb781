// src/cli/schedule_csv.hpp — PyTorch's pipeline-schedule CSV (torch.distributed.pipelining,
// `_PipelineScheduleRuntime._load_csv` / `_dump_csv`) to a pp::Schedule and back.
//
// One row per rank, one cell per action: `<stage><F|B|I|W><micro-batch>` (F forward, B full
// backward, I its input half = pp BI, W its weight half = pp BW), DualPipeV's `(0F3;3B1)OVERLAP_F_B`
// (pp: the F, then the B with `overlapped`), an empty cell an idle step. The lowered form adds
// SEND_F/RECV_F/SEND_B/RECV_B, UNSHARD, RESHARD and REDUCE_GRAD: checked where it is cheap, then
// dropped, as pipetrain derives its own transfers (pp::plan_for). PyTorch numbers stages; rank r
// holds stage c*P + r as chunk c (loop) or stages r and 2P-1-r (V), inferred or given.
#pragma once
#include <string>

#include "pipeline.hpp"

namespace pt {

// What the caller already knows of the file; 0 or "" where it is to be inferred from it.
struct CsvExpect {
    int P = 0;                // ranks (rows)
    int M = 0;                // micro-batches; inferred: the first stage's forwards
    int V = 0;                // chunks per rank; inferred: the largest stage
    std::string placement;    // "loop", "v" or ""
};

struct CsvSchedule {
    pp::Schedule schedule;    // with its placement
    int M = 0, V = 0;
};

// Parses and validates (pp::validate with pp::plan_for) the CSV `text`, read from `name`. Errors are
// one line, "NAME:LINE:COLUMN: CELL: what" (the column counts cells from 1): an unknown action, a
// stage out of range or on the wrong rank, a micro-batch run twice or missing, a transfer that does
// not match, and what validate finds (order, deadlock: which ranks wait for what).
CsvSchedule parse_schedule_csv(const std::string& text, const std::string& name, const CsvExpect& expect = {});
CsvSchedule read_schedule_csv(const std::string& path, const CsvExpect& expect = {});

// PyTorch's compute-only CSV of `schedule` (lines end in CRLF, as Python's csv.writer ends them).
std::string schedule_csv(const pp::Schedule& schedule);

}  // namespace pt
