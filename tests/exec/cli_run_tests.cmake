# reshard run: outputs and exit codes (included by tests/CMakeLists.txt after cli_tests.cmake).
cli_test(run_canonical_json "^{\"backend\":\"in-process\",\"bytes_moved\":16384,\"seconds\":[0-9.e-]+,\"gbps\":[0-9.e+-]+,\"memcpy_gbps\":[0-9.e+-]+,\"fraction_of_memcpy\":[0-9.e+-]+,\"verified\":true,"
         ${R} run --shape 16,16,16 --from ${CANON_FROM} --to ${CANON_TO} --repeat 2 --threads 2 --json)
cli_test(run_staged_jax "^verified: 16384 B .*\\(14336 B .* as messages\\) on 8 devices, 1 step \\(all-to-all\\)"
         ${R} run --shape 16,16,16 --mesh x=4,y=2 --from "P('y', None, 'x')" --to "P(None, ('x','y'), None)" --transport staged --repeat 1)
cli_test(run_multi_step "\"verified\":true"
         ${R} run --shape 10,12 --mesh x=2,y=3 --from "P('x', 'y')" --to "P('y', 'x')" --for jax-cpu --repeat 1 --json)
cli_test(run_block_cyclic "\"verified\":true"
         ${R} run --shape 13,7 --from "blockcyclic(grid=[2,2], block=[3,2])" --to "{devices=[1,4]<=[4]}" --repeat 1 --json)
cli_exit_test(run_too_large 1 ${R} run --shape 1024,1024,1024 --from ${CANON_FROM} --to ${CANON_TO} --max-memory 1G)
cli_exit_test(run_bad_max_memory 2 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --max-memory 12Q)
if(RESHARD_HAVE_MPI)
  # Under mpirun: device d is rank d; rank 0 prints, every rank verifies.
  set(MPIRUN ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
  cli_test(run_mpi_canonical_json "^{\"backend\":\"mpi\",\"bytes_moved\":16384,\"seconds\":[0-9.e-]+,.*\"verified\":true,\"ranks\":8,"
           ${MPIRUN} 8 --oversubscribe ${R} run --backend mpi --shape 16,16,16 --from ${CANON_FROM} --to ${CANON_TO} --repeat 2 --json)
  cli_test(run_mpi_multi_step "^verified: .* on 6 ranks, 3 steps"
           ${MPIRUN} 6 --oversubscribe ${R} run --backend mpi --shape 10,12 --mesh x=2,y=3 --from "P('x', 'y')" --to "P('y', 'x')" --for jax-cpu --repeat 1)
  cli_test(run_mpi_block_cyclic "\"verified\":true"
           ${MPIRUN} 4 --oversubscribe ${R} run --backend mpi --shape 13,7 --from "blockcyclic(grid=[2,2], block=[3,2])" --to "{devices=[1,4]<=[4]}" --repeat 1 --json)
  # Two devices on one rank: refused on every rank, before anything moves.
  cli_test(run_mpi_too_few_ranks "the layouts name device 1, but the communicator has 1 ranks"
           ${MPIRUN} 1 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --backend mpi)
  set_tests_properties(cli.run_mpi_canonical_json cli.run_mpi_multi_step cli.run_mpi_block_cyclic cli.run_mpi_too_few_ranks
                       PROPERTIES ENVIRONMENT "${RESHARD_MPI_TEST_ENV}" PROCESSORS 2)
else()
  cli_exit_test(run_mpi_not_built 1 ${R} run --shape 16 --from "{replicated}" --to "{replicated}" --mesh x=2 --backend mpi)
endif()
