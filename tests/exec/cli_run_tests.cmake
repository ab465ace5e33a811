# reshard run: outputs and exit codes (included by tests/CMakeLists.txt after cli_tests.cmake).
cli_test(run_canonical_json "^{\"backend\":\"in-process\",\"bytes_moved\":16384,\"seconds\":[0-9.e-]+,\"gbps\":[0-9.e+-]+,\"memcpy_gbps\":[0-9.e+-]+,\"fraction_of_memcpy\":[0-9.e+-]+,\"verified\":true,"
         ${R} run --shape 16,16,16 --from ${CANON_FROM} --to ${CANON_TO} --repeat 2 --threads 2 --json)
cli_test(run_staged_jax "^verified: 16384 B .*\\(14336 B .* as messages\\) on 8 devices, 1 step \\(all-to-all\\)"
         ${R} run --shape 16,16,16 --mesh x=4,y=2 --from "P('y', None, 'x')" --to "P(None, ('x','y'), None)" --transport staged --repeat 1)
# Issue 16: every device a rank (a fiber) running the per-rank step runner MPI runs.
cli_test(run_ranks_jax "^verified: 16384 B .*\\(14336 B .* as messages\\) on 8 devices, 1 step \\(all-to-all, over alltoallw\\)"
         ${R} run --shape 16,16,16 --mesh x=4,y=2 --from "P('y', None, 'x')" --to "P(None, ('x','y'), None)" --transport ranks --repeat 1)
# Threads as ranks take box messages for block-cyclic runs of 16 bytes and
# more on average (bf16 8x8 blocks), where MPI's datatypes stop at 64.
cli_test(run_ranks_short_block_runs_are_boxes "\"verified\":true.*\"transports\":\\[\"alltoallw\"\\]"
         ${R} run --shape 256,256 --dtype bf16 --from "blockcyclic(block=[8,8], grid=[2,4])"
         --to "blockcyclic(block=[64,64], grid=[4,2])" --transport ranks --repeat 1 --json)
cli_test(run_ranks_multi_step "\"verified\":true.*\"transport\":\"ranks\""
         ${R} run --shape 10,12 --mesh x=2,y=3 --from "P('x', 'y')" --to "P('y', 'x')" --for jax-cpu --transport ranks --repeat 1 --json)
cli_test(run_multi_step "\"verified\":true"
         ${R} run --shape 10,12 --mesh x=2,y=3 --from "P('x', 'y')" --to "P('y', 'x')" --for jax-cpu --repeat 1 --json)
cli_test(run_block_cyclic "\"verified\":true"
         ${R} run --shape 13,7 --from "blockcyclic(grid=[2,2], block=[3,2])" --to "{devices=[1,4]<=[4]}" --repeat 1 --json)
# Issue 17: partial sums run; every element combined in part order, checked with numeric tags.
cli_test(run_partial_reduce_scatter "^verified: 8192 B .*\\(6144 B .* as messages\\) on 8 devices, 1 step \\(reduce-scatter, over alltoallv over groups\\)"
         ${R} run --shape 16,16 --mesh x=4,y=2 --from "P(None, None, unreduced={'x'})" --to "P('x', None)" --repeat 1)
cli_test(run_partial_uneven_bf16 "^verified: .* 1 step \\(exchange, over alltoallv\\)"
         ${R} run --shape 13,5 --mesh x=3,y=2 --from "[Partial(\"max\"), Shard(0)]" --to "P(None, 'x')" --dtype bf16 --strategy exchange --transport ranks --repeat 1)
# An average of more parts than the type sums exactly (s8 from 128, bf16 from 257): integers' sums wrap, and the
# checker's expected value is the reduce kernel's arithmetic (it expected the exact average); floats hold 0 there.
cli_test(run_partial_avg_beyond_exact_s8 "^verified: .* on 128 devices"
         ${R} run --shape 4 --dtype s8 --mesh x=128 --from "[Partial(\"avg\")]" --to "[Shard(0)]" --repeat 1)
cli_test(run_partial_avg_beyond_exact_bf16_ranks "^verified: .* on 512 devices"
         ${R} run --shape 4 --dtype bf16 --mesh x=512 --from "[Partial(\"avg\")]" --to "[Shard(0)]" --transport ranks --repeat 1)
cli_test(run_partial_avg_beyond_exact_into_avg "^verified: .* on 256 devices"
         ${R} run --shape 4 --dtype u8 --mesh x=2,y=128 --from "[Partial(\"avg\"), Partial(\"avg\")]" --to "[Partial(\"avg\"), Shard(0)]" --repeat 1)
# Partial targets: each source part routed into one target part, the others the identity; checked exactly.
# From partial sums into another op, or other axes, the plan may reduce first, then route (checked the same).
cli_test(run_partial_target "^verified: 4096 B .*\\(2048 B .* as messages\\) on 8 devices, 1 step \\(exchange, over p2p\\)"
         ${R} run --shape 16,16 --mesh x=4,y=2 --from "[Partial(), Shard(0)]" --to "[Partial(), Replicate()]" --dtype bf16 --strategy exchange --repeat 1)
# The same pair by default: the parts moved alike, an all-gather over y within each part (as priced: a tie with the
# exchange in time and bytes, and no ragged exchange); with no ragged exchange at all (--for jax-cpu), an all-to-all.
cli_test(run_partial_target_alike "^verified: 4096 B .*\\(2048 B .* as messages\\) on 8 devices, 1 step \\(all-gather, over alltoallv over groups\\)"
         ${R} run --shape 16,16 --mesh x=4,y=2 --from "[Partial(), Shard(0)]" --to "[Partial(), Replicate()]" --dtype bf16 --repeat 1)
cli_test(run_partial_target_alike_jax_cpu "^verified: .* 1 step \\(all-to-all, over alltoallv over groups\\)"
         ${R} run --shape 16,16 --mesh x=4,y=2 --from "P('y', None, unreduced={'x'})" --to "P(None, 'y', unreduced={'x'})" --for jax-cpu --transport ranks --repeat 1)
cli_test(run_partial_target_other_op "^verified: .* 2 steps \\(exchange, exchange, over p2p, p2p\\)"
         ${R} run --shape 13,5 --mesh x=4,y=2 --from "[Partial(\"sum\"), Shard(1)]" --to "[Shard(0), Partial(\"max\")]" --dtype s8 --transport ranks --repeat 1)
cli_exit_test(run_too_large 1 ${R} run --shape 1024,1024,1024 --from ${CANON_FROM} --to ${CANON_TO} --max-memory 1G)
# From partial sums of 32 parts the memcpy measurement copies every part's bytes that arrive (about 32 MiB here), not
# the target's 1 MiB: the estimate counts them (138 MB; it said 70 MB, and a run accepted under the limit went over it).
cli_error_test(run_too_large_partial_memcpy 1 "running this needs about 138216672 B"
               ${R} run --shape 512,512 --mesh x=32 --from "P(None,None,unreduced={'x'})" --to "P('x',None)" --threads 2 --repeat 1 --max-memory 100M --transport direct)
cli_exit_test(run_bad_max_memory 2 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --max-memory 12Q)
# Issue 15: run's flags. --max-memory is read by the one byte-count parser; --threads is 1 to 1024.
set(RUN4 run --shape 16 --mesh x=2 --from "P('x')" --to "P()" --repeat 1)
cli_error_test(run_max_memory_nan 2 "^reshard: error: --max-memory: unexpected 'n' at column 1 of 'nan'" ${R} ${RUN4} --max-memory nan)
cli_error_test(run_max_memory_fraction 2 "^reshard: error: --max-memory: '0.4' is not a whole number of bytes" ${R} ${RUN4} --max-memory 0.4)
cli_error_test(run_max_memory_empty 2 "^reshard: error: --max-memory: empty value" sh -c "exec '${R}' run --shape 16 --mesh x=2 --from \"P('x')\" --to 'P()' --max-memory ''")
cli_error_test(run_threads_zero 2 "^reshard: error: --threads: 0 is out of range. expected an integer from 1 to 1024" ${R} ${RUN4} --threads 0)
cli_error_test(run_threads_negative 2 "^reshard: error: --threads: unexpected '-' at column 1 of '-1'" ${R} ${RUN4} --threads -1)
cli_error_test(run_threads_over_bound 2 "^reshard: error: --threads: 1025 is out of range. expected an integer from 1 to 1024" ${R} ${RUN4} --threads 1025)
cli_error_test(run_threads_empty 2 "^reshard: error: --threads: empty value" sh -c "exec '${R}' run --shape 16 --mesh x=2 --from \"P('x')\" --to 'P()' --threads ''")
cli_test(run_threads_bound "\"verified\":true" ${R} ${RUN4} --threads 1024 --json)
cli_test(run_ranks_priced_chunks "^verified: .*\\(14336 B .* as messages\\) on 8 devices, 1 step \\(all-to-all, over alltoall over groups\\)"
         ${R} run --shape 15,16,16 --from ${CANON_FROM} --to ${CANON_TO} --strategy collectives --transport ranks --priced-chunks --repeat 1)
# Priced chunks: a planned reduce-scatter runs as the backend's (Comm::StartReduceScatter), then an all-to-all.
cli_test(run_ranks_priced_reduce_scatter "^verified: .* 2 steps \\(reduce-scatter, all-to-all, over reduce_scatter over groups, alltoall over groups\\)"
         ${R} run --shape 16,16 --mesh x=4,y=2 --from "P('y', None, unreduced={'x'})" --to "P(None, ('x','y'))" --transport ranks --priced-chunks --repeat 1)
# The estimate counts the padded equal-chunk staging (3 rows over x=4: 408 B beyond the shards here).
cli_error_test(run_priced_chunks_counts_padding 1 "^reshard: error: running this needs about [0-9]+ B .*copy programs, priced chunks' padded staging(, box messages)?\\), more than"
               ${R} run --shape 3,6 --mesh x=4,y=2 --from "P('x','y')" --to "P(None,'y')" --strategy collectives --transport ranks --priced-chunks --max-memory 68000 --repeat 1)
cli_error_test(run_priced_chunks_in_process 2 "^reshard: error: --priced-chunks applies to --backend mpi and --transport ranks only"
               ${R} ${RUN4} --priced-chunks --transport direct)
# Issue 16: in process, the step runner by default (auto: ranks up to 16384 devices and 2^21 messages),
# --priced-chunks with it; above, auto is direct, where priced chunks do not apply.
cli_test(run_auto_is_ranks "\"transport\":\"ranks\",\"transports\":\\[\"allgather over groups\"\\]"
         ${R} ${RUN4} --priced-chunks --json)
cli_error_test(run_auto_priced_chunks_above_ranks 2
               "^reshard: error: --priced-chunks applies to the per-rank step runner's collectives \\(--transport ranks\\), which runs at most [0-9]+ devices and within --max-memory; these layouts have 16400"
               ${R} run --shape 16400 --mesh x=16400 --from "P('x')" --to "P()" --repeat 1 --priced-chunks)
cli_test(run_auto_above_1024_is_ranks "\"devices\":2048.*\"transport\":\"ranks\""
         ${R} run --shape 64,64 --mesh x=64,y=32 --from "P('x','y')" --to "P('y','x')" --repeat 1 --json)
# 2048 devices gathering all: 4.2 M messages, more than the ranks are given.
cli_test(run_auto_many_messages_is_direct "\"transport\":\"direct\""
         ${R} run --shape 2048 --mesh x=2048 --from "P('x')" --to "P(None)" --repeat 1 --json)
# (Refused before planning: 16,384 where each stack's guard is a mapping, else 2^20.)
cli_error_test(run_ranks_above_bound 1 "^reshard: error: threads as ranks run at most (16384|1048576) devices here .*; these layouts have 1048577"
               ${R} run --shape 1048577 --mesh x=1048577 --from "P('x')" --to "P('x')" --repeat 1 --transport ranks)
# auto where only the direct transport's memory fits (threads as ranks stage both ways): direct.
cli_test(run_auto_memory_is_direct "\"transport\":\"direct\""
         ${R} run --shape 1024,1024 --mesh x=8 --from "P('x')" --to "P()" --repeat 1 --max-memory 120M --json)
cli_error_test(run_ranks_memory 1 "^reshard: error: running this needs about"
               ${R} run --shape 1024,1024 --mesh x=8 --from "P('x')" --to "P()" --repeat 1 --max-memory 120M --transport ranks)
if(NOT RESHARD_SANITIZE)
  # 512 threads in 1 GB of address space: an error (exit 1), not a hang: refused up front, their stacks
  # counted against the address space (issue 15), or a thread that fails to start.
  add_test(NAME cli.run_threads_fail_to_start COMMAND sh -c "ulimit -v 1000000 && exec '${R}' run --shape 16,16,16 --from '${CANON_FROM}' --to '${CANON_TO}' --threads 512 --repeat 1 --transport direct")
  set_tests_properties(cli.run_threads_fail_to_start PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "^reshard: error: (executing \\(fewer --threads may fit\\): could not start 512 threads: thread [0-9]+ failed to start|running this needs about .* more than the limit of .*ulimit -v, less 8589934592 B .8.0 GiB. of stacks)")
  # Threads as ranks map a fiber's stack per device whatever --threads says: the stacks are counted up front (it
  # said "fewer --threads may fit" with --threads 1, after starting 121 of 1024 threads, before fibers).
  add_test(NAME cli.run_ranks_threads_counted_up_front COMMAND sh -c "ulimit -v 1000000 && exec '${R}' run --shape 4096 --mesh x=1024 --from \"P('x')\" --to 'P()' --transport ranks --threads 1 --repeat 1")
  set_tests_properties(cli.run_ranks_threads_counted_up_front PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "^reshard: error: (running this needs about .* more than the limit of .*ulimit -v, less [0-9]+ B .[0-9.]+ GiB. of stacks|executing \\(threads as ranks map a stack per device, and start --threads threads\\))")
endif()
# Issue 15: --max-memory counts everything run allocates, and a std::bad_alloc anywhere is exit 1, never an abort.
# RESHARD_TEST_FAIL=RANK:POINT (test only, tools/cli/common.h) makes that process throw std::bad_alloc at POINT.
cli_error_test(run_bad_alloc_is_an_error 1 "^reshard: error: out of memory \\(the system refused an allocation\\)\n$"
               env RESHARD_TEST_FAIL=0:fill ${R} ${RUN4})
# The one-step exchange is a program per message (16.8 M here); the all-gather one pattern per group, in either form.
cli_error_test(run_counts_the_programs 1 "^reshard: error: running this needs about [0-9]+ B .4.2 GiB. \\(.*copy programs\\), more than the limit of 2147483648 B"
               ${R} run --shape 16384 --dtype s8 --mesh x=4096 --from "P('x')" --to "P()" --max-memory 2G --strategy exchange --transport staged)
foreach(transport direct staged)
  add_test(NAME cli.run_group_pattern_fits_${transport} COMMAND ${R} run --shape 16384 --dtype s8 --mesh x=4096 --from "P('x')"
           --to "P()" --max-memory 256M --repeat 1 --transport ${transport})
  set_tests_properties(cli.run_group_pattern_fits_${transport} PROPERTIES PASS_REGULAR_EXPRESSION
                       "^verified: 67108864 B .* on 4096 devices, 1 step .all-gather.")
endforeach()
find_program(PRLIMIT prlimit)
if(PRLIMIT AND NOT RESHARD_SANITIZE)
  # Under prlimit --as just below, at and above its estimate: a run or a refusal, never bad_alloc.
  add_test(NAME memory.run_under_address_limit
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/exec/run_under_address_limit.sh
                   ${R} run --shape 60000000 --dtype s8 --from "{maximal device=0}" --to "{maximal device=1}" --repeat 1 --threads 2)
  set_tests_properties(memory.run_under_address_limit PROPERTIES RUN_SERIAL TRUE TIMEOUT 120)
endif()
if(RESHARD_HAVE_MPI)
  # Under mpirun: device d is rank d; rank 0 prints, every rank verifies.
  set(MPIRUN ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
  cli_test(run_mpi_canonical_json "^{\"backend\":\"mpi\",\"bytes_moved\":16384,\"seconds\":[0-9.e-]+,.*\"verified\":true,\"ranks\":8,"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --shape 16,16,16 --from ${CANON_FROM} --to ${CANON_TO} --repeat 2 --json)
  # The planned all-to-all as the equal-chunk MPI_Ialltoall (15 rows over y: chunks padded as priced,
  # 14336 B as the plan prices them, where exact counts move 13440).
  cli_test(run_mpi_priced_chunks "^verified: .*\\(14336 B .* as messages\\) on 8 ranks, 1 step \\(all-to-all, over alltoall over groups\\)"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --shape 15,16,16 --from ${CANON_FROM} --to ${CANON_TO} --strategy collectives --priced-chunks --repeat 1)
  cli_test(run_mpi_multi_step "^verified: .* on 6 ranks, 3 steps"
           ${MPIRUN} 6 --oversubscribe ${R} run --backend mpi --shape 10,12 --mesh x=2,y=3 --from "P('x', 'y')" --to "P('y', 'x')" --for jax-cpu --repeat 1)
  cli_test(run_mpi_partial "^verified: .* on 8 ranks, 2 steps \\(reduce-scatter, all-to-all"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --shape 16,16 --mesh x=4,y=2 --from "P('y', None, unreduced={'x'})" --to "P(None, ('x','y'))" --dtype bf16 --repeat 1)
  # bf16 reduced by MPI_Ireduce_scatter_block with the reduce kernel's user op.
  cli_test(run_mpi_partial_priced "^verified: .* on 8 ranks, 2 steps \\(reduce-scatter, all-to-all, over reduce_scatter over groups, alltoall over groups\\)"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --priced-chunks --shape 16,16 --mesh x=4,y=2 --from "P('y', None, unreduced={'x'})" --to "P(None, ('x','y'))" --dtype bf16 --repeat 1)
  # An uneven all-reduce (45 bf16 elements a rank over 4) as one MPI_Iallreduce on the ring's padded buffer: 2 x 3 chunks of 24 B a rank.
  cli_test(run_mpi_allreduce_priced "^verified: 720 B into target buffers \\(1152 B .* as messages\\) on 8 ranks, 1 step \\(all-reduce, over allreduce over groups, in the allreduce\\)"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --priced-chunks --shape 15,6 --mesh x=4,y=2 --from "P(None, 'y', unreduced={'x'})" --to "P(None, 'y')" --dtype bf16 --repeat 1)
  cli_test(run_mpi_partial_target "^verified: 10240 B .* on 8 ranks, 2 steps \\(exchange, exchange, "
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --shape 16,16 --mesh x=4,y=2 --from "P(None, None, unreduced={'x'})" --to "P(None, None, unreduced={'y'})" --dtype f16 --repeat 1)
  # Issue 17's DTensor row priced by bytes with memory for a relayed exchange: 448 B into every rank, 3584 B in all
  # (the bound), in two rounds (a relay's piece to its helper, then the exchange).
  cli_test(run_mpi_relayed "^verified: 8192 B .* into target buffers \\(3584 B .* as messages\\) on 8 ranks, 1 step \\(exchange, over p2p, p2p\\)"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --shape 16,16 --mesh x=4,y=2 --from "[Partial(), Shard(0)]" --to "[Shard(0), Shard(0)]" --bandwidth-only --memory-cap 4K --repeat 1)
  cli_test(run_mpi_block_cyclic "\"verified\":true"
           ${MPIRUN} 4 --oversubscribe ${R} run --backend mpi --shape 13,7 --from "blockcyclic(grid=[2,2], block=[3,2])" --to "{devices=[1,4]<=[4]}" --repeat 1 --json)
  # Issue 15: --max-memory counts the datatypes listing a block-cyclic message's runs.
  cli_error_test(run_mpi_block_cyclic_run_lists 1 "(^|\n)reshard: error: one rank needs about [0-9]+ B .*MPI datatypes' run lists"
                 ${MPIRUN} 2 --oversubscribe ${R} run --backend mpi --shape 64,64 --dtype f64 --from "blockcyclic(grid=[1,2], block=[8,8])" --to "blockcyclic(grid=[2,1], block=[4,4])" --max-memory 1)
  # Two devices on one rank: refused on every rank, before anything moves.
  cli_test(run_mpi_too_few_ranks "^reshard: error: the layouts name device 1, but the communicator has 1 rank \\(device d runs on rank d\\)\n"
           ${MPIRUN} 1 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --backend mpi)
  # Issue 15. Outside mpirun: a hint. A plan without steps: a local copy.
  cli_error_test(run_mpi_outside_mpirun 2 "(^|\n)reshard: error: the layouts name device 1, but the communicator has 1 rank .*run it as mpirun -np 2 reshard run --backend mpi"
                 env -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK -u SLURM_PROCID ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --backend mpi)
  cli_test(run_mpi_no_steps "on 1 rank, 0 steps \\(a local copy\\)"
           ${MPIRUN} 1 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --devices 0 --backend mpi --repeat 1)
  # Flags the MPI backend does not use.
  cli_error_test(run_mpi_with_transport 2 "(^|\n)reshard: error: --transport applies to --backend in-process only"
                 ${MPIRUN} 1 ${R} run --shape 16 --devices 0 --from "P('devices')" --to "P()" --backend mpi --transport staged)
  cli_error_test(run_mpi_with_threads 2 "(^|\n)reshard: error: --threads applies to --backend in-process only"
                 ${MPIRUN} 1 ${R} run --shape 16 --devices 0 --from "P('devices')" --to "P()" --backend mpi --threads 2)
  # Under mpirun -np 2 and 3, each error printed once, by rank 0, naming the rank at fault; an error every
  # rank shares (a command-line error, a plan that cannot be made) names none. (mpirun's own notice may
  # come first.)
  cli_error_test(run_mpi_flag_error_once 2 "(^|\n)reshard: error: --max-memory: unexpected 'n' at column 1 of 'nan'"
                 ${MPIRUN} 2 --oversubscribe ${R} run --shape 16 --mesh x=2 --from "P('x')" --to "P()" --backend mpi --max-memory nan)
  cli_error_test(run_mpi_bad_flag_once 2 "(^|\n)reshard: error: --backend: bogus not in"
                 ${MPIRUN} 2 --oversubscribe ${R} run --shape 16 --mesh x=2 --from "P('x')" --to "P()" --backend bogus)
  cli_error_test(run_mpi_plan_error_once 2 "(^|\n)reshard: error: no plan fits the memory cap of 1000 bytes per device"
                 ${MPIRUN} 2 --oversubscribe ${R} run --shape 64,64 --mesh x=2 --from "P('x')" --to "P(None, 'x')" --backend mpi --memory-cap 1000)
  cli_error_test(run_mpi_one_rank_fails_once 1 "(^|\n)reshard: error: rank 1: one rank needs about [0-9]+ B .* more than the limit of 16 B per rank \\(--max-memory\\)"
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 --oversubscribe ${R} run --shape 16,16 --mesh x=2 --from "P('x')" --to "P(None, 'x')" --backend mpi
                 : ${MPIEXEC_NUMPROC_FLAG} 1 ${R} run --shape 16,16 --mesh x=2 --from "P('x')" --to "P(None, 'x')" --backend mpi --max-memory 16)
  cli_error_test(run_mpi_rank0_differs_once 2 "(^|\n)reshard: error: rank 0 was given other layouts or options than the other 2 ranks"
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 --oversubscribe ${R} run --shape 12 --mesh x=3 --from "P('x')" --to "P()" --backend mpi
                 : ${MPIEXEC_NUMPROC_FLAG} 2 ${R} run --shape 12 --mesh x=3 --from "P()" --to "P('x')" --backend mpi)
  cli_error_test(run_mpi_two_ranks_differ_once 2 "(^|\n)reshard: error: rank 0 and rank 1 were given different layouts or options"
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 --oversubscribe ${R} run --shape 12 --mesh x=2 --from "P('x')" --to "P()" --backend mpi
                 : ${MPIEXEC_NUMPROC_FLAG} 1 ${R} run --shape 12 --mesh x=2 --from "P()" --to "P('x')" --backend mpi)
  # A command line that does not parse on one rank alone (an unknown option): that rank joins the others'
  # first agreement, and rank 0 prints its error once, naming it.
  cli_error_test(run_mpi_one_rank_does_not_parse_once 2 "(^|\n)reshard: error: rank 1: The following argument was not expected: --bogus"
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 --oversubscribe ${R} run --shape 16,16 --mesh x=2 --from "P('x')" --to "P(None, 'x')" --backend mpi
                 : ${MPIEXEC_NUMPROC_FLAG} 1 ${R} run --shape 16,16 --mesh x=2 --from "P('x')" --to "P(None, 'x')" --backend mpi --bogus)
  # Issue 15: a rank that fails after MPI started (injected: RESHARD_TEST_FAIL) ends every rank within 10 s:
  # allocating and filling, or checking, is an error agreed by every rank (printed once, by rank 0); in the
  # runs, where the others wait in a collective, that rank prints its error and calls MPI_Abort.
  foreach(point 1:fill 1:execute 0:execute 1:check)
    string(REPLACE ":" "_" name "${point}")
    add_test(NAME cli.run_mpi_rank_${name}_fails
             COMMAND ${CMAKE_COMMAND} -DEXPECT=1 "-DSTDERR=(^|\n)reshard: error: rank [01]: out of memory" -DERRORS=1
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake --
                     timeout -k 5 10 ${MPIRUN} 2 --oversubscribe env RESHARD_TEST_FAIL=${point}
                     ${R} run --backend mpi --shape 64,64 --mesh x=2 --from "P('x')" --to "P(None, 'x')" --repeat 1)
    set_tests_properties(cli.run_mpi_rank_${name}_fails PROPERTIES ENVIRONMENT "${RESHARD_MPI_TEST_ENV}" PROCESSORS 2 TIMEOUT 30)
  endforeach()
  if(PRLIMIT AND NOT RESHARD_SANITIZE)
    add_test(NAME memory.run_mpi_under_address_limit
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/exec/run_under_address_limit.sh ${MPIRUN} 2 --oversubscribe @PRLIMIT@
                     ${R} run --backend mpi --shape 60000000 --dtype s8 --from "{maximal device=0}" --to "{maximal device=1}" --repeat 1)
    set_tests_properties(memory.run_mpi_under_address_limit PROPERTIES ENVIRONMENT "${RESHARD_MPI_TEST_ENV}"
                         RUN_SERIAL TRUE TIMEOUT 300)
  endif()
  set_tests_properties(cli.run_mpi_canonical_json cli.run_mpi_priced_chunks cli.run_mpi_multi_step cli.run_mpi_partial cli.run_mpi_partial_priced cli.run_mpi_allreduce_priced cli.run_mpi_relayed cli.run_mpi_partial_target cli.run_mpi_block_cyclic cli.run_mpi_block_cyclic_run_lists cli.run_mpi_too_few_ranks
                       cli.run_mpi_outside_mpirun cli.run_mpi_no_steps cli.run_mpi_with_transport cli.run_mpi_with_threads
                       cli.run_mpi_flag_error_once cli.run_mpi_bad_flag_once cli.run_mpi_plan_error_once
                       cli.run_mpi_one_rank_fails_once cli.run_mpi_rank0_differs_once cli.run_mpi_two_ranks_differ_once
                       cli.run_mpi_one_rank_does_not_parse_once PROPERTIES ENVIRONMENT "${RESHARD_MPI_TEST_ENV}" PROCESSORS 2)
else()
  cli_exit_test(run_mpi_not_built 1 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --backend mpi)
endif()
