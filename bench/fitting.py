"""An exact least-squares fit of per-run figures: y ≈ fixed + a·steps + b·tool_calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from bench.harness import Section


@dataclass
class Fit:
    """y ≈ Σ coef·x over named regressors, solved exactly (fractions) by least squares."""

    names: list[str]
    coefficients: list[float]
    residuals: list[float]

    def coefficient(self, name: str) -> float:
        return self.coefficients[self.names.index(name)]

    @property
    def exact(self) -> bool:
        return all(abs(r) < 1e-9 for r in self.residuals)

    def formula(self, unit: str, digits: int = 2) -> str:
        terms = [
            f"{c:.{digits}f}" + ("" if n == "1" else f"·{n}")
            for n, c in zip(self.names, self.coefficients, strict=True)
        ]
        worst = max((abs(r) for r in self.residuals), default=0.0)
        return f"{unit} ≈ " + " + ".join(terms) + f"   (max |residual| {worst:.{digits}f})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "coefficients": dict(zip(self.names, self.coefficients, strict=True)),
            "residuals": self.residuals,
        }


def fit(names: list[str], rows: list[tuple[Sequence[float], float]]) -> Fit:
    """Least squares through the normal equations, in fractions so integer data fits exactly."""
    k = len(names)
    xs = [[Fraction(v) for v in x] for x, _ in rows]
    ys = [Fraction(y) for _, y in rows]
    zero = Fraction(0)
    a: list[list[Fraction]] = [
        [sum((x[i] * x[j] for x in xs), zero) for j in range(k)]
        + [sum((x[i] * y for x, y in zip(xs, ys, strict=True)), zero)]
        for i in range(k)
    ]
    for col in range(k):
        pivot = next((r for r in range(col, k) if a[r][col] != 0), None)
        if pivot is None:
            raise ValueError(f"the runs do not separate {names[col]!r} from the other regressors")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(k):
            if r != col and a[r][col] != 0:
                factor = a[r][col] / a[col][col]
                a[r] = [v - factor * p for v, p in zip(a[r], a[col], strict=True)]
    coefs = [a[i][k] / a[i][i] for i in range(k)]
    residuals = [
        float(y - sum((c * v for c, v in zip(coefs, x, strict=True)), zero))
        for x, y in zip(xs, ys, strict=True)
    ]
    return Fit(names, [float(c) for c in coefs], residuals)


REGRESSORS = ["1", "steps", "tool_calls"]


def add_fit(
    section: Section,
    runs: list[dict[str, Any]],
    key: str,
    unit: str,
    *,
    label: str = "",
    notes: Sequence[str] = (),
) -> Fit | None:
    """Fit runs' `key` ≈ fixed + a·steps + b·tool_calls over the runs that succeeded, and add the three
    figures (n/a when the runs cannot be fitted, e.g. because none succeeded)."""
    good = [r for r in runs if r["status"] == "succeeded"]
    why = ""
    try:
        result: Fit | None = fit(REGRESSORS, [((1, r["steps"], r["tool_calls"]), r[key]) for r in good])
    except ValueError as exc:
        result, why = None, f"no fit over {len(good)} succeeded runs: {exc}"
    name = label or key.replace("_", " ")
    step_note, call_note = [*notes, "", ""][:2]
    section.add(f"{name} per model step", result and result.coefficient("steps"), unit, step_note, digits=2)
    section.add(
        f"{name} per tool call", result and result.coefficient("tool_calls"), unit, call_note, digits=2
    )
    fixed_note = (
        why if result is None else ("exact fit" if result.exact else "least-squares fit, see residuals")
    )
    section.add(f"{name} fixed per run", result and result.coefficient("1"), unit, fixed_note, digits=2)
    if result is not None:
        section.notes.append(f"fit over {len(good)} runs: {result.formula(name)}")
    return result
