#!/usr/bin/env bash
# The main job: the canonical reshard end to end.
#   f32[16,16,16], mesh x=4,y=2 (device = 2x+y)
#   from P('y', None, 'x') = {devices=[2,1,4]<=[4,2]T(1,0)}
#   to   P(None, ('x','y'), None) = {devices=[1,8,1]<=[8]}
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null  # a no-op when up to date
R=build/reshard
SRC="{devices=[2,1,4]<=[4,2]T(1,0)}"
DST="{devices=[1,8,1]<=[8]}"
set -x
$R show --shape 16,16,16 --mesh x=4,y=2 --sharding "P('y', None, 'x')" --dims 0,2
$R show --shape 16,16,16 --mesh x=4,y=2 --sharding "P(None, ('x','y'), None)" --dims 0,1
$R convert --shape 16,16,16 --mesh x=4,y=2 --sharding "P('y', None, 'x')" --to hlo
$R convert --shape 16,16,16 --mesh x=4,y=2 --sharding "$SRC" --to shardy
$R convert --shape 16,16,16 --mesh x=4,y=2 --sharding "$DST" --to jax
$R convert --shape 16,16,16 --mesh x=4,y=2 --sharding "$SRC" --to dtensor
$R plan --shape 16,16,16 --from "$SRC" --to "$DST" --explain
$R plan --shape 16,16,16 --from "$SRC" --to "$DST" --emit hlo
$R plan --shape 16,16,16 --mesh x=4,y=2 --from "P('y', None, 'x')" --to "P(None, ('x','y'), None)" --for jax-cpu --emit jax
$R verify --shape 16,16,16 --from "$SRC" --to "$DST"
# Executed: every device's buffers in this process, then as 8 MPI processes (device d = rank d).
$R run --shape 16,16,16 --from "$SRC" --to "$DST"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  mpirun -np 8 --oversubscribe $R run --backend mpi --shape 16,16,16 --from "$SRC" --to "$DST"
# reshard.jax.reshard in real JAX (8 CPU devices), beside XLA's own reshard.
set +x
py=$(scripts/setup_python_package.sh)
set -x
"$py" examples/jax_canonical.py
# The report's program, unchanged but for reshard.jax.jit in place of jax.jit: one all-to-all.
"$py" examples/jax_report.py
# The same case in PyTorch DTensor terms on 8 gloo processes: DTensor.redistribute beside
# reshard.torch.redistribute (installs torch once, about 1.5 minutes).
set +x
scripts/setup_torch.sh "$py"
set -x
"$py" examples/torch_report.py 2>&1 | grep -v -e "^\[rank" -e "Warning" -e "wait_tensor" -e "before the output" -e "^[12]\. "
