# Runs PROGRAM (with the list ARGS, if given) and fails unless it exits 0
# with stdout equal to the file EXPECTED.
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ ${EXPECTED} want)
if(NOT rc EQUAL 0 OR NOT out STREQUAL want)
  message(FATAL_ERROR "exit ${rc}\n--- expected\n${want}--- got\n${out}--- stderr\n${err}")
endif()
