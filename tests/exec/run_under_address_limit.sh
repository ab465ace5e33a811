#!/bin/bash
# Issue 15: `reshard run` under an address-space limit (prlimit --as) just
# below, at and above its own --max-memory estimate either runs (exit 0,
# "verified") or refuses up front (exit 1, "needs about"; or "could not
# start" threads, an error of their own); it never ends in
# std::bad_alloc ("out of memory", "internal error", exit 3).
#
#   run_under_address_limit.sh COMMAND...
#
# COMMAND is a whole `reshard run` command line ending in run's own
# arguments: the estimate is read from its refusal with --max-memory 1
# appended; each try runs it under prlimit --as=LIMIT, put where COMMAND
# says @PRLIMIT@ (under mpirun: before reshard, so that the limit is the
# ranks', not mpirun's own), or before COMMAND.
set -u
with_limit() {  # with_limit LIMIT: COMMAND with the limit in place (in array cmd)
  cmd=()
  local placed=0
  for a in "${args[@]}"; do
    if [ "$a" = @PRLIMIT@ ]; then
      [ "$1" = none ] || cmd+=(prlimit --as="$1")
      placed=1
    else
      cmd+=("$a")
    fi
  done
  if [ $placed = 0 ] && [ "$1" != none ]; then cmd=(prlimit --as="$1" "${cmd[@]}"); fi
}
args=("$@")
with_limit none
est=$("${cmd[@]}" --max-memory 1 2>&1 | sed -n 's/.*needs about \([0-9][0-9]*\) B.*/\1/p' | head -n 1)
if [ -z "$est" ]; then
  echo "no estimate in the refusal of: $* --max-memory 1"
  exit 1
fi
echo "estimate: $est bytes"
mib=1048576
floor=128
case " $* " in *" --backend mpi "*) floor=256 ;; esac
status=0
# From half the estimate to the estimate plus 1 GiB: the limit counts the
# process's own mappings and threads too, so the refusals turn into runs
# somewhere above the estimate itself.
for extra in -$((est / 2)) -$((16 * mib)) -1 0 $((64 * mib)) $((128 * mib)) $((256 * mib)) $((384 * mib)) \
             $((512 * mib)) $((768 * mib)) $((1024 * mib)); do
  limit=$((est + extra))
  # Below 128 MiB the process cannot start at all (its libraries, MPI's own);
  # under mpirun, below 256 MiB OpenMPI may fail to map its shared memory at
  # MPI_Init and then crash or hang in its own fallback (seen near 180 MB).
  [ $limit -ge $((floor * mib)) ] || continue
  with_limit $limit
  # Each try within 60 s: OpenMPI whose shared memory could not be mapped
  # may fall back to TCP and hang there (readv errors), its own failure.
  out=$(timeout 60 "${cmd[@]}" 2>&1)
  rc=$?
  case "$rc:$out" in
    124:*"during shared memory initialization"*) echo "--as=$limit: MPI could not start (hung after its shared memory failed)" ;;
    0:*verified*) echo "--as=$limit: ran" ;;
    1:*"needs about"*) echo "--as=$limit: refused" ;;
    1:*"could not start"*) echo "--as=$limit: refused (threads)" ;;
    # OpenMPI itself failing to map its shared memory at MPI_Init (it then
    # crashes inside its own init, before reshard's code runs): the limit is
    # below what the launcher's ranks need, as below 128 MiB; seen near
    # 180 MB, depending on where the kernel places the mappings.
    *"during shared memory initialization"*) echo "--as=$limit: MPI could not start" ;;
    # The same near 180 MB, another way: OpenMPI's help-text parser (flex)
    # runs out of memory while reporting a component it could not map at
    # MPI_Init, and exits with flex's fatal-error status 2.
    2:*"out of dynamic memory in opal_show_help"*) echo "--as=$limit: MPI could not start (help text)" ;;
    # And a third: ORTE's show_help cannot unpack its message about that
    # component ("Data unpack had inadequate space in ... show_help.c") and
    # the rank exits 255, still inside MPI_Init (reshard's own failures exit
    # 1 or 3 with "reshard: error").
    255:*"show_help.c"*) echo "--as=$limit: MPI could not start (help text)" ;;
    *)
      echo "--as=$limit: exit $rc, neither a run nor a refusal:"
      echo "$out" | head -n 20
      status=1
      ;;
  esac
done
exit $status
