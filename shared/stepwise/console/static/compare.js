// Two runs side by side (#/compare/<a>/<b>): their counters with deltas, then the two timelines of tool
// calls, row by row, each call marked with what became of it (matched, served, live, diverged, executed)
// and the first divergence highlighted. The data is GET /v1/runs/{a}/compare/{b}.

import { api } from "./api.js";
import { dollars, h, link, mono, replace, status } from "./dom.js";

const COUNTERS = [
  ["steps", "steps", (v) => v],
  ["input tokens", "input_tokens", (v) => v],
  ["cached tokens", "cached_tokens", (v) => v],
  ["output tokens", "output_tokens", (v) => v],
  ["cost", "cost_usd", dollars],
  ["wall time", "wall_seconds", (v) => (v === null || v === undefined ? "—" : `${Number(v).toFixed(1)} s`)],
];

function signed(value, shown) {
  if (value === null || value === undefined) return "—";
  return value > 0 ? `+${shown(value)}` : value < 0 ? `−${shown(-value)}` : "0";
}

function counters(compared) {
  const { a, b, deltas } = compared;
  const head = h("tr", {}, h("th", {}, ""), h("th", {}, "A"), h("th", {}, "B"), h("th", {}, "B − A"));
  const rows = COUNTERS.map(([label, key, shown]) =>
    h(
      "tr",
      {},
      h("th", { scope: "row" }, label),
      h("td", {}, shown(a[key])),
      h("td", {}, shown(b[key])),
      h("td", {}, signed(deltas[key], shown)),
    ),
  );
  return h("table", { class: "runs compare-counters" }, h("thead", {}, head), h("tbody", {}, rows));
}

function callCell(found) {
  if (!found) return h("td", { class: "compare-call empty" }, "");
  const args = typeof found.arguments === "string" ? found.arguments : JSON.stringify(found.arguments);
  return h(
    "td",
    { class: "compare-call" },
    h("span", { class: `call-status call-${found.status}` }, found.status),
    " ",
    mono(found.tool),
    h("div", { class: "call-args" }, args),
    found.served_from ? h("div", { class: "note" }, "served from ", mono(found.served_from)) : null,
    found.error ? h("div", { class: "error-text" }, found.error) : null,
  );
}

function timelines(compared) {
  const left = compared.a.trajectory;
  const right = compared.b.trajectory;
  const first = compared.first_divergence?.index;
  const rows = [];
  for (let i = 0; i < Math.max(left.length, right.length); i++) {
    rows.push(
      h(
        "tr",
        { class: i === first ? "first-divergence" : null },
        h("th", { scope: "row" }, String(i)),
        callCell(left[i]),
        callCell(right[i]),
      ),
    );
  }
  const head = h("tr", {}, h("th", {}, "#"), h("th", {}, "A"), h("th", {}, "B"));
  return h("table", { class: "runs compare-timelines" }, h("thead", {}, head), h("tbody", {}, rows));
}

function side(label, run) {
  return h(
    "div",
    { class: "card compare-side" },
    h("h3", {}, label, " ", link(run.run_id, "runs", run.run_id), " ", status(run.status)),
    h("p", { class: "answer output" }, run.output ?? "—"),
  );
}

export async function compareView(main, a, b, signal) {
  const compared = await api.compare(a, b, signal);
  const divergence = compared.first_divergence;
  replace(
    main,
    h("p", { class: "crumbs" }, link("Runs", "runs"), " / ", link(a, "runs", a), " / compare"),
    h("h1", {}, "Compare ", mono(a), " and ", mono(b)),
    h("div", { class: "compare-sides" }, side("A", compared.a), side("B", compared.b)),
    h(
      "p",
      { class: divergence ? "error-text" : "note" },
      divergence
        ? `First divergence at call ${divergence.index}: ${divergence.reason.replaceAll("_", " ")}.`
        : "No divergence: the same calls in the same order.",
    ),
    counters(compared),
    h("h2", {}, "Timelines"),
    timelines(compared),
  );
}
