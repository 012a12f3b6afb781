#!/usr/bin/env bash
# netns_mpirun.sh — two "machines" on one box, for tests that run under mpirun.
#
#   tests/netns_mpirun.sh RANKS_PER_HOST -- COMMAND ARGS...
#
# runs COMMAND on 2*RANKS_PER_HOST ranks, RANKS_PER_HOST on host pt-a and as many on pt-b,
# and exits with mpirun's exit code. Exit code 77 (one line saying why) where it cannot run:
# not root, no `ip`, `unshare`, `timeout` or `mpirun`, or `ip netns add` fails.
# PT_NETNS_TIMEOUT (seconds, default 120) bounds the whole mpirun; on expiry the exit code is 124.
#
# How it works
#   * Two network namespaces, pt<pid>a and pt<pid>b (the pid makes them unique per invocation,
#     so parallel ctest runs do not collide), each with lo up and one end of a veth pair, pt0,
#     on 10.X.Y.0/24 (X.Y also from the pid; within the namespaces any subnet would do, since
#     they see no other interface, but a unique one keeps `ip addr` on the host unambiguous).
#   * Host names: each process runs under `ip netns exec NS unshare --uts`, which gives it a UTS
#     namespace of its own where `hostname pt-a` (or pt-b) changes nothing outside.
#   * Name resolution: mpirun resolves the -H names (strace shows it reading /etc/hosts for
#     them). Without entries it asks DNS: here that fails at once (ENETUNREACH, a namespace has
#     no route to the nameserver) and the run still works, since a name that does not resolve is
#     taken as remote and handed to the agent, and the ranks exchange IP addresses, not names.
#     But with a reachable nameserver each lookup would wait for it, so both namespaces get
#     pt-a and pt-b in /etc/hosts, as a cluster would have them. `ip netns exec NS` bind-mounts
#     every file of /etc/netns/NS/ over /etc/ in a private mount namespace (iproute2's
#     convention): /etc/netns/NS/hosts is that namespace's /etc/hosts and the real one is never
#     edited. Cleanup removes /etc/netns/NS.
#   * The rsh agent: mpirun starts its daemon (orted) on a remote host by running
#     `AGENT HOST ORTED-COMMAND-WORDS...`, as it would run `ssh HOST ...`. The generated agent
#     maps HOST to its namespace and runs the words there through `sh -c`, joined by spaces as
#     ssh joins them (Open MPI quotes the words that need it). The agent is a local child of
#     mpirun, so the remote orted inherits mpirun's whole environment and working directory;
#     `-x` still names PATH, LD_LIBRARY_PATH and every PT_* variable, as a real two-machine run
#     would need: those that are set (mpirun warns `could not find environment variable "X"`
#     for an unset one).
#   * mpirun itself runs inside namespace A, with host name pt-a, so that -H pt-a:N is "here".
#
# The MCA flags
#   plm_rsh_agent          the generated agent instead of ssh.
#   oob_tcp_if_include     the daemons' control channel (OOB) uses the veth subnet only.
#   btl_tcp_if_include     the ranks' MPI traffic uses the veth subnet only.
#   btl tcp,self           no shared memory (vader) even between the two ranks of one host: every
#                          message between ranks is a TCP message, and those between pt-a and
#                          pt-b cross the veth pair.
#   pml ob1                the BTLs above carry the messages. Debian's Open MPI picks ob1 anyway
#                          (/etc/openmpi/openmpi-mca-params.conf says pml = ^ucx), but a build
#                          that prefers pml ucx or cm ignores the btl flags and chooses its own
#                          transports, shared memory included.
#   --oversubscribe        2 cores here, up to 8 ranks.
#   --bind-to none         both "machines" are one CPU: each daemon binds its first rank to core 0
#                          of what it takes for its own machine, so 1 + 1 ranks would share core 0
#                          and compute at half speed (measured: a 2-stage step 499 ms of compute
#                          against 289 ms unbound). On real machines the binding is right.
#   OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1   the test runs as root (namespaces need it).
#
# What it proves, and what not
#   It proves that the program runs as 2 x N processes that find each other only through TCP
#   between two IP hosts with different names, launched the way mpirun launches on a cluster
#   (a daemon per host started through a remote shell), and that nothing relies on the ranks
#   sharing a host name, a loopback address or shared memory.
#   It does not prove a real cluster: both "machines" share one kernel, one clock, one
#   filesystem (a real run needs the binary, the data and the output directory at the same path
#   on both, usually a shared filesystem), one pid space and one CPU; the veth pair has no
#   latency, loss or MTU quirks of a real NIC, and no ssh (keys, remote PATH) is involved.
set -u

skip() { echo "skipped: $*"; exit 77; }

[[ $# -ge 3 && $1 =~ ^[1-9][0-9]*$ && $2 == -- ]] || { echo "usage: $0 RANKS_PER_HOST -- COMMAND ARGS..." >&2; exit 2; }
per_host=$1
shift 2

# ---- can we? (exit 77 before touching anything) -----------------------------------------------
[[ $EUID == 0 ]] || skip "network namespaces need root (uid $EUID)"
for tool in ip unshare timeout mpirun; do
  command -v "$tool" >/dev/null || skip "no '$tool' on PATH"
done

tag=pt$$
ns_a=${tag}a
ns_b=${tag}b
subnet=10.$(( ($$ >> 8) % 256 )).$(( $$ % 256 ))
tmp=$(mktemp -d "${TMPDIR:-/tmp}/netns_mpirun.XXXXXX")
made_etc_netns=0
[[ -d /etc/netns ]] || made_etc_netns=1

runner=
# shellcheck disable=SC2317 # (cleanup is called by the EXIT trap)
cleanup() {
  local ns pid
  for ns in "$ns_a" "$ns_b"; do
    # What is still running in a namespace (an orted or rank left by a timeout) is ours.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null   # deletes its end of the veth pair, and so the pair
    rm -rf "/etc/netns/$ns"
  done
  # timeout(1), outside the namespaces: it ends with mpirun.
  [[ -n $runner ]] && { kill -KILL "$runner"; wait "$runner"; }
  (( made_etc_netns )) && rmdir /etc/netns 2>/dev/null
  rm -rf "$tmp"
}
trap "cleanup 2>/dev/null" EXIT   # quietly: no "Killed" line for what it kills
trap 'exit 130' INT
trap 'exit 143' TERM

err=$(ip netns add "$ns_a" 2>&1) || skip "cannot create a network namespace: ${err//$'\n'/ }"
err=$(unshare --uts true 2>&1) || skip "cannot create a UTS namespace: ${err//$'\n'/ }"

# ---- the two machines ------------------------------------------------------------------------
die() { echo "netns_mpirun: $*" >&2; exit 1; }
ip netns add "$ns_b" || die "ip netns add $ns_b failed"
ip link add pt0 netns "$ns_a" type veth peer name pt0 netns "$ns_b" || die "cannot create the veth pair"
{ ip -n "$ns_a" addr add "$subnet.1/24" dev pt0 && ip -n "$ns_b" addr add "$subnet.2/24" dev pt0; } || die "ip addr add failed"
for ns in "$ns_a" "$ns_b"; do
  { ip -n "$ns" link set lo up && ip -n "$ns" link set pt0 up; } || die "cannot bring up the links of $ns"
  mkdir -p "/etc/netns/$ns" || die "cannot create /etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s.1 pt-a\n%s.2 pt-b\n' "$subnet" "$subnet" >"/etc/netns/$ns/hosts"
done

# ---- the rsh agent: `agent HOST WORDS...` runs WORDS on HOST's namespace ------------------------
cat >"$tmp/agent" <<EOF
#!/bin/sh
case "\$1" in
  pt-a) ns=$ns_a ;;
  pt-b) ns=$ns_b ;;
  *) echo "netns agent: unknown host '\$1'" >&2; exit 1 ;;
esac
host=\$1
shift
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && eval "\$*"' "\$host" "\$@"
EOF
chmod +x "$tmp/agent"

# ---- mpirun, from pt-a ---------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
env_flags=()
for var in PATH LD_LIBRARY_PATH $(compgen -v PT_); do
  [[ -n ${!var+set} ]] && env_flags+=(-x "$var")
done
timeout --kill-after=5 "${PT_NETNS_TIMEOUT:-120}" \
  ip netns exec "$ns_a" unshare --uts sh -c 'hostname pt-a && exec "$@"' sh \
  mpirun -np $((2 * per_host)) -H "pt-a:$per_host,pt-b:$per_host" --oversubscribe --bind-to none \
    --mca plm_rsh_agent "$tmp/agent" \
    --mca oob_tcp_if_include "$subnet.0/24" \
    --mca btl_tcp_if_include "$subnet.0/24" \
    --mca btl tcp,self --mca pml ob1 \
    "${env_flags[@]}" "$@" &
# In the background, because bash runs a trap only once the foreground command has ended: a
# SIGTERM to this script must end the run now, not when mpirun does. (So stdin is /dev/null.)
runner=$!
wait "$runner"
rc=$?
runner=
(( rc == 124 )) && echo "netns_mpirun: mpirun ran past ${PT_NETNS_TIMEOUT:-120} s and was killed" >&2
exit $rc
