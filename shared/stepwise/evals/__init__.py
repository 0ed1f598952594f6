"""Changing an agent safely: what-if replay of recorded runs (whatif, compare) and eval suites that
run every case as one EvalRun execution (suites, assertions, judge, runner, store)."""
