#!/usr/bin/python3
"""The documented commands run as written (ctest: doc_commands).

Every line of an ```sh block in README.md and docs/*.md is a command a reader copies, so every
one is run here, in document order, from a scratch directory laid out like a checkout
(scripts/, build/ and the sources are links to this one; data/ and runs/ are its own), with
`pipetrain` on the PATH as the README says. A command that trains gets `--steps 2` appended (a
flag given twice takes its last value). A non-zero exit fails the test, naming the file, the line
and the command.

A line whose trailing comment says `# exits N` (a lab's check on its starter, which must fail
until the student writes the lab) must exit with exactly N. The labs' READMEs (labs/NN_topic/)
are documents too.

Lines marked with a trailing comment `# needs ...` (a GPU, two machines, Slurm, MPICH, the
downloaded ERNIE weights) cannot run here: their pipetrain command is checked for flag validity
only (`train --dry-run` parses and plans without training; any other command's flags must be ones
its `--help` lists), and a launcher's process count must equal --stages x --dp. Stand-ins for the
files a reader brings (a downloaded ERNIE directory, a labeled TSV) are made in the scratch
directory and named below. Also checked: the README's CLI block is `pipetrain --help`, verbatim.

Usage: tests/doc_commands.py SOURCE_DIR BUILD_DIR [--list]
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

PREFIXES = ("pipetrain ", "build/pipetrain ", "scripts/", "mpirun ", "mpiexec", "srun ")
NEEDS = re.compile(r"#\s*needs ([^#]*)$")   # at the end of a command, or a comment line alone
EXITS = re.compile(r"#\s*exits (\d+)\b")     # the exit code a line must end with
LINK = ("scripts", "tests", "docs", "src", "kernels", "tutorials", "labs", "CMakeLists.txt", "pipeline.hpp",
        "pipeline_lab.hpp")


def commands(path):
    """(line number, command, mark, exit code) for every command line of the file's sh blocks."""
    out, block, start, pending, block_mark = [], None, 0, "", ""
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            block, block_mark = (stripped[3:].strip() if block is None else None), ""
            continue
        if block not in ("sh", "bash"):
            continue
        if NEEDS.match(stripped):   # a comment line "# needs ..." marks the rest of its block
            block_mark = NEEDS.match(stripped).group(1).strip()
            continue
        if not pending:
            start = n
        pending += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if stripped.endswith("\\"):
            continue
        cmd, pending = pending, ""
        if not cmd.startswith(PREFIXES):
            continue
        mark, exits = NEEDS.search(cmd), EXITS.search(cmd)
        cmd = re.sub(r"\s+#.*$", "", cmd)   # a trailing comment says what the line is for
        out.append((start, cmd, mark.group(1).strip() if mark else block_mark, int(exits.group(1)) if exits else 0))
    return out


def scratch(source, build):
    """A directory that looks like a checkout after `cmake -B build`, plus the readers' own files."""
    root = tempfile.mkdtemp(prefix="pipetrain_doc_")
    for name in LINK:
        os.symlink(os.path.join(source, name), os.path.join(root, name))
    os.symlink(build, os.path.join(root, "build"))
    os.makedirs(os.path.join(root, "bin"))
    os.symlink(os.path.join(build, "pipetrain"), os.path.join(root, "bin", "pipetrain"))
    fx = os.path.join(source, "tests", "fixtures")
    # A stand-in for "the downloaded ernie-3.0-nano-zh": the real model's config.json (the shape a
    # dry run plans for) and a vocabulary.
    nano = os.path.join(root, "ernie-3.0-nano-zh")
    os.makedirs(nano)
    shutil.copy(os.path.join(fx, "ernie", "nano-like", "paddle", "vocab.txt"), nano)
    json.dump({"model_type": "ernie", "vocab_size": 40000, "hidden_size": 312, "num_hidden_layers": 4,
               "num_attention_heads": 12, "intermediate_size": 1248, "hidden_act": "gelu",
               "max_position_embeddings": 2048, "type_vocab_size": 4, "task_type_vocab_size": 16,
               "use_task_id": True, "layer_norm_eps": 1e-05, "hidden_dropout_prob": 0.1,
               "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "pad_token_id": 0},
              open(os.path.join(nano, "config.json"), "w"))
    return root


def run(cmd, cwd, env, timeout=600):
    try:
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode("utf-8", "replace") + "\n(timed out after %d s)" % timeout


def help_flags(command, cwd, env):
    code, out = run("pipetrain %s --help" % command, cwd, env)
    return set(re.findall(r"--[a-z][a-z0-9-]*", out)) if code == 0 else None


def launcher_ranks(words):
    """The processes a launcher starts: mpirun -np N, mpiexec -n N, srun -N nodes --ntasks-per-node K."""
    get = lambda flag: int(words[words.index(flag) + 1]) if flag in words else None
    if words[0] == "srun":
        return (get("-N") or 1) * (get("--ntasks-per-node") or 1)
    return get("-np") or get("-n")


def check_flags_only(cmd, cwd, env):
    """What a line that cannot run here is checked for; returns an error or ""."""
    words = shlex.split(cmd)
    at = next((i for i, w in enumerate(words) if os.path.basename(w) == "pipetrain"), None)
    if at is None:   # a script: it must exist and be executable
        script = os.path.join(cwd, words[0])
        if words[0] == "scripts/run.sh":
            code, out = run(cmd + " --dry-run", cwd, env)
            return "" if code == 0 else "scripts/run.sh --dry-run failed:\n" + out
        return "" if os.access(script, os.X_OK) else words[0] + ": not an executable script"
    command, args = words[at + 1], words[at + 2:]
    if command == "train":
        code, out = run("pipetrain train " + " ".join(shlex.quote(a) for a in args) + " --dry-run", cwd, env)
        if code != 0:
            return "pipetrain train --dry-run failed:\n" + out
        ranks = launcher_ranks(words) if at > 0 else None
        planned = re.search(r"= (\d+) ranks?\)", out)
        if ranks is not None and planned and int(planned.group(1)) != ranks:
            return "the launcher starts %d processes but the flags ask for %s ranks" % (ranks, planned.group(1))
        return ""
    flags = help_flags(command, cwd, env)
    if flags is None:
        return "pipetrain %s: no such command" % command
    unknown = [a for a in args if a.startswith("--") and a not in flags]
    return "unknown flags for pipetrain %s: %s" % (command, " ".join(unknown)) if unknown else ""


def mpi_here(env):
    return shutil.which("mpirun", path=env["PATH"]) is not None


def check_cli_block(source, cwd, env):
    """The README's CLI block between its markers is `pipetrain --help`."""
    text = open(os.path.join(source, "README.md"), encoding="utf-8").read()
    m = re.search(r"<!-- cli: generated by scripts/readme_cli.sh -->\n```\n(.*?)```\n<!-- end of the cli -->", text, re.S)
    if not m:
        return "README.md: no CLI block between <!-- cli: generated by scripts/readme_cli.sh --> and <!-- end of the cli -->"
    code, out = run("pipetrain --help", cwd, env)
    if m.group(1) != out:
        return "README.md's CLI block differs from `pipetrain --help`: run scripts/readme_cli.sh"
    return ""


def main():
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    labs = os.path.join(source, "labs")
    docs += sorted("labs/%s/README.md" % d for d in os.listdir(labs) if os.path.isfile(os.path.join(labs, d, "README.md")))
    for doc in docs:   # a doc that is not UTF-8 fails by name, not with a traceback
        try:
            open(os.path.join(source, doc), encoding="utf-8").read()
        except UnicodeDecodeError as e:
            print("FAILED: %s: not valid UTF-8 at byte %d" % (doc, e.start))
            return 1
    todo = [(doc, n, cmd, mark, exits) for doc in docs for n, cmd, mark, exits in commands(os.path.join(source, doc))]
    if "--list" in sys.argv:
        for doc, n, cmd, mark, exits in todo:
            print("%s:%d: %s%s%s" % (doc, n, cmd, "   [flags only: needs %s]" % mark if mark else "",
                                     "   [exits %d]" % exits if exits else ""))
        return 0
    cwd = scratch(source, build)
    env = dict(os.environ, PATH=os.path.join(cwd, "bin") + os.pathsep + os.environ["PATH"])
    env.pop("COLUMNS", None)
    env["PIPETRAIN_NO_OPTIONAL"] = "1"   # run.sh's setup: the required packages only (CI's test.sh tried the rest)
    failures, ran, flags_only = [], 0, 0
    error = check_cli_block(source, cwd, env)
    if error:
        failures.append(error)
    for doc, n, cmd, mark, exits in todo:
        where = "%s:%d: %s" % (doc, n, cmd)
        if cmd.startswith("scripts/test.sh"):
            print("skipped (this test runs inside it): " + where)
            continue
        if not mark and (cmd.startswith(("mpirun", "scripts/mpirun.sh")) or "lab.sh pair" in cmd) and not mpi_here(env):
            mark = "MPI (not installed here)"
        if mark:
            error = check_flags_only(cmd, cwd, env)
            flags_only += 1
            print("%s [flags only: needs %s]: %s" % ("FAIL" if error else "ok", mark, where))
        else:
            trains = re.search(r"(^scripts/run\.sh|\btrain)\b", cmd) is not None
            code, out = run(cmd + (" --steps 2" if trains else ""), cwd, env)
            error = "" if code == exits else "exit %d (expected %d):\n%s" % (code, exits, out[-3000:])
            ran += 1
            print("%s: %s" % ("FAIL" if error else "ok", where))
        if error:
            failures.append(where + "\n  " + error.replace("\n", "\n  "))
    shutil.rmtree(cwd, ignore_errors=True)
    print("%d commands run, %d checked for flags only, %d failed" % (ran, flags_only, len(failures)))
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
