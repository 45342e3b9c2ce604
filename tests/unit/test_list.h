/* test_list: every supervisor unit test, by name. A test is a function
 * `int unit_NAME(void)` in one of the test files linked into sup_unit
 * (tests/unit/unit_runner.c); it returns its failed checks (0: passed).
 * Add a line here and the runner runs it, each in a child process of its
 * own, and CMake registers it as ctest unit_NAME. One name per line. */
#define SUP_UNIT_TESTS(X)                                                                          \
    X(sup_run)                                                                                     \
    X(sup_run_breach_done_before_start)                                                            \
    X(sup_run_breach_wrong_run_id)                                                                 \
    X(sup_run_breach_stream_no_run)                                                                \
    X(sup_run_input)                                                                               \
    X(sup_run_queue_order)                                                                         \
    X(sup_run_interrupt_with_queue)                                                                \
    X(sup_run_client_gone)                                                                         \
    X(sup_run_max_output)                                                                          \
    X(sup_ctx_find_many)                                                                           \
    X(sup_ctx_delete_find)                                                                         \
    X(sup_ctx_sorted)                                                                              \
    X(sup_ctx_journal)                                                                             \
    X(sup_ctx_journal_overflow)                                                                    \
    X(sup_ctx_table_gen)
