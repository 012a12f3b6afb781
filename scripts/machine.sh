# Sourced by the benchmarks and the reports they generate: the machine a table was measured on.
# A virtual machine's CPU name often hides its generation: "AMD EPYC" was, in this workplace, a
# core with one 512-bit fma a cycle on one day (one thread's peak 116.6 GFLOP/s) and one with two
# on another (x86 family 26, 207-230 GFLOP/s), under the same name. The family and model tell them apart.
machine_cpu() {
  local name family model
  name=$(sed -nE 's/^model name\s*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)
  family=$(sed -nE 's/^cpu family\s*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)
  model=$(sed -nE 's/^model\s*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)
  echo "${name:-$(uname -m)}${family:+ (x86 family $family, model ${model:-?})}"
}
