// Eval suites: #/evals lists them, #/evals/<eval_id> shows one with its eval runs and a bar chart of
// pass rate and cost per eval run, #/evals/<eval_id>/<eval_run_id> one eval run's cases. The chart is
// SVG built node by node (createElementNS, attributes only): the CSP allows no inline style or script.

import { api } from "./api.js";
import { add, dollars, facts, h, link, mono, replace, status, when } from "./dom.js";
import { agentRef } from "./names.js";

const SVG = "http://www.w3.org/2000/svg";
const CHART = { width: 640, height: 180, pad: 28, max: 20 }; // the latest `max` eval runs

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

function percent(rate) {
  return rate === null || rate === undefined ? "—" : `${Math.round(rate * 100)}%`;
}

// Two bars per eval run, oldest on the left: its pass rate (of 100%) and its mean cost per case (of the
// most expensive run shown). Each bar's <title> says its value.
export function chart(runs) {
  const shown = runs.filter((r) => r.status === "succeeded").slice(0, CHART.max).reverse();
  const { width, height, pad } = CHART;
  const inner = height - 2 * pad;
  const slot = shown.length ? (width - 2 * pad) / shown.length : 0;
  const bar = Math.max(2, Math.min(18, slot / 2 - 2));
  const most = Math.max(0, ...shown.map((r) => r.cost_usd?.mean ?? 0));
  const figure = svg(
    "svg",
    { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "pass rate and cost per eval run" },
    svg("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, class: "axis" }),
    svg("text", { x: pad, y: pad - 10, class: "legend pass" }, "pass rate"),
    svg("text", { x: pad + 90, y: pad - 10, class: "legend cost" }, "mean cost per case"),
  );
  shown.forEach((run, i) => {
    const x = pad + i * slot + slot / 2;
    const passH = inner * (run.pass_rate ?? 0);
    const costH = most > 0 ? inner * ((run.cost_usd?.mean ?? 0) / most) : 0;
    add(
      figure,
      svg(
        "rect",
        { x: x - bar - 1, y: height - pad - passH, width: bar, height: passH, class: "pass" },
        svg("title", {}, `${run.eval_run_id}: ${percent(run.pass_rate)} passed`),
      ),
      svg(
        "rect",
        { x: x + 1, y: height - pad - costH, width: bar, height: costH, class: "cost" },
        svg("title", {}, `${run.eval_run_id}: ${dollars(run.cost_usd?.mean ?? null)} per case`),
      ),
    );
  });
  if (!shown.length) add(figure, svg("text", { x: width / 2, y: height / 2, class: "legend" }, "no scored eval run yet"));
  return figure;
}

export async function evalsView(main, signal) {
  replace(main, h("h1", {}, "Evals"), h("p", { class: "note" }, "Loading…"));
  const { evals } = await api.evals(signal);
  const list = h("ul", { class: "cards" });
  for (const suite of evals) {
    add(
      list,
      h(
        "li",
        { class: "card" },
        h("h2", {}, link(suite.name, "evals", suite.eval_id)),
        facts([
          ["id", mono(suite.eval_id)],
          ["agent", agentRef(suite.agent_id)],
          ["cases", suite.cases],
          ["created", when(suite.created_at)],
        ]),
      ),
    );
  }
  replace(main, h("h1", {}, "Evals"), evals.length ? list : h("p", { class: "note" }, "No eval suites yet."));
}

export async function evalView(main, evalId, signal) {
  const [suite, { runs }] = await Promise.all([api.evalSuite(evalId, signal), api.evalRuns(evalId, signal)]);
  const rows = h("ul", { class: "runs" });
  for (const run of runs) {
    add(
      rows,
      h(
        "li",
        { class: "card run-row" },
        h("div", { class: "line" }, link(run.eval_run_id, "evals", evalId, run.eval_run_id), status(run.status)),
        h(
          "div",
          { class: "line meta" },
          h("span", {}, `${percent(run.pass_rate)} passed`),
          h("span", {}, `${run.done}/${run.total} cases`),
          h("span", { class: "cost" }, `${dollars(run.cost_usd?.mean ?? null)} per case`),
          run.flipped?.length ? h("span", { class: "flipped" }, `flipped: ${run.flipped.join(", ")}`) : null,
          h("span", {}, when(run.created_at)),
        ),
      ),
    );
  }
  replace(
    main,
    h("p", { class: "crumbs" }, link("Evals", "evals")),
    h("h1", {}, suite.name),
    h(
      "div",
      { class: "card" },
      facts([
        ["id", mono(suite.eval_id)],
        ["agent", agentRef(suite.agent_id)],
        ["cases", suite.cases.length],
        ["assertions", suite.assertions.map((a) => a.type).join(", ") || "per case only"],
      ]),
    ),
    h("h2", {}, "Eval runs"),
    chart(runs),
    runs.length ? rows : h("p", { class: "note" }, "Not run yet: stepwise eval run " + suite.eval_id),
  );
}

export async function evalRunView(main, evalId, evalRunId, signal) {
  const run = await api.evalRun(evalId, evalRunId, signal);
  const flipped = new Set(run.flipped ?? []);
  const cases = h("ul", { class: "runs" });
  for (const c of run.cases) {
    add(
      cases,
      h(
        "li",
        { class: `card run-row ${c.passed ? "" : "failed"}` },
        h(
          "div",
          { class: "line" },
          h("strong", {}, `#${c.index}${c.name ? ` ${c.name}` : ""}`),
          status(c.passed ? "passed" : flipped.has(c.index) ? "flipped" : "failed"),
          c.run_id ? link(c.run_id, "runs", c.run_id) : null,
        ),
        h(
          "ul",
          { class: "assertions" },
          c.assertions.map((a) => h("li", { class: a.passed ? "ok" : "bad" }, `${a.type}: ${a.reason}`)),
        ),
      ),
    );
  }
  replace(
    main,
    h("p", { class: "crumbs" }, link("Evals", "evals"), " / ", link(evalId, "evals", evalId)),
    h("h1", {}, run.eval_run_id),
    h(
      "div",
      { class: "card" },
      facts([
        ["status", status(run.status)],
        ["cases", `${run.done}/${run.total} done`],
        ["pass rate", percent(run.pass_rate)],
        ["cost per case", `${dollars(run.cost_usd?.mean ?? null)} (p95 ${dollars(run.cost_usd?.p95 ?? null)})`],
        ["deltas", `cost ${run.cost_delta_usd ?? "—"} · input tokens ${run.input_tokens_delta ?? "—"} · steps ${run.steps_delta ?? "—"}`],
        ["flipped", run.flipped?.length ? run.flipped.join(", ") : "none"],
      ]),
    ),
    cases,
  );
}
