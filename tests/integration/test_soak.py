"""The short soak (issue 30): 40 runs of every kind at once through the local stack, over HTTP, with
faults at every seam (bench/soak.py says which), then the seven invariants after the reconciler's
sweep. `python -m bench soak` runs 300 and writes the figures; this one only asserts the invariants."""

from bench.soak import soak
from stepwise_local.stack import LocalStack

RUNS = 40


def test_forty_runs_under_faults_keep_every_invariant(stack: LocalStack) -> None:
    report = soak(stack, RUNS, concurrency=RUNS)

    assert report.client_errors == []
    assert sum(report.faults.values()) > 0 and set(report.kinds) >= {"approval", "delegation", "cancel"}
    assert report.violations == {}, "\n".join(
        f"{name}: {example}" for name, found in report.violations.items() for example in found[:5]
    )
