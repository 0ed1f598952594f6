// Where a run's time went. `Spans` reads the run's events in order and pairs them into spans, each from
// one event's `at` to another's: the run (run_started to its end), a step (step_started to its last event), its model call (step_started
// to step_completed, with the time to the first chunk), a tool call (tool_call to tool_result) and a
// wait (asked to answered: an approval, a client tool, a child run, a provider pause). The log appends
// a step's events in a few batches, so a time is when its batch was written: durations are as fine as
// those batches (calls that ran in parallel end together). `waterfall` draws the spans as inline SVG,
// one bar per span on a shared time axis, built node by node under the CSP (classes, no style).

import { duration, dollars } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const ROW = 22;
const AXIS = 20;

const WAITS = {
  approval_requested: ["approval_decided", "approval"],
  client_tool_requested: ["client_tool_answered", "client tool"],
  provider_paused: ["run_resumed", "provider paused"],
};
const ANSWERS = new Set(Object.values(WAITS).map(([answer]) => answer));

export class Spans {
  constructor(runId) {
    this.runId = runId;
    this.all = [];
    this.open = new Map(); // key -> span not yet ended
    this.step = null;
    this.first = null; // the earliest time seen, the axis's zero
    this.last = null;
  }

  begin(key, span) {
    span.end = null;
    this.all.push(span);
    this.open.set(key, span);
    return span;
  }

  close(key, at) {
    const span = this.open.get(key);
    if (!span) return null;
    this.open.delete(key);
    span.end = at;
    return span;
  }

  // The span this event ends, if it ends one.
  add(event) {
    const at = Date.parse(event.at);
    if (Number.isNaN(at)) return null;
    const d = event.data ?? {};
    this.first ??= at;
    this.last = Math.max(this.last ?? at, at);
    if (this.step && event.type !== "step_started") this.step.end = Math.max(this.step.end, at);
    // A descendant's wait, copied to this stream: its answer goes to the child's stream, not this one.
    if (d.run_id && d.run_id !== this.runId) return null;
    const type = event.type;
    // The run's own bar: the gaps between its steps are the orchestration (a transition, an invocation).
    if (type === "run_started") this.begin("run", { kind: "run", label: "Run", start: at });
    if (type === "run_completed" || type === "run_failed" || type === "run_cancelled") return this.close("run", at);
    if (type === "step_started") {
      this.step = { kind: "step", label: `Step ${d.step}`, step: d.step, start: at, end: at, cost: null };
      this.all.push(this.step);
      this.begin(`model ${d.step}`, { kind: "model", label: "model", step: d.step, start: at, first: null });
      return null;
    }
    if (type === "chunk") {
      const model = this.open.get(`model ${d.step}`);
      if (model && model.first === null) model.first = at;
      return null;
    }
    if (type === "step_completed") {
      const model = this.close(`model ${d.step}`, at);
      if (model) model.cost = d.usage?.cost_usd ?? null;
      if (this.step?.step === d.step) this.step.cost = d.usage?.cost_usd ?? null;
      return model;
    }
    if (type === "tool_call") {
      this.begin(`tool ${d.tool_call_id}`, { kind: "tool", label: d.tool_name, step: this.step?.step, start: at });
      return null;
    }
    if (type === "tool_result") {
      const span = this.close(`tool ${d.tool_call_id}`, at);
      if (span && d.error) span.failed = true;
      return span;
    }
    if (WAITS[type]) {
      const label = `${WAITS[type][1]}${d.tool_name ? ` ${d.tool_name}` : ""}`;
      this.begin(`wait ${d.interaction_id}`, { kind: "wait", label, step: this.step?.step, start: at });
      return null;
    }
    if (ANSWERS.has(type)) return this.close(`wait ${d.interaction_id}`, at);
    if (type === "delegation_started") {
      this.begin(`wait ${d.child_run_id}`, { kind: "wait", label: `child run ${d.tool_name ?? ""}`, step: this.step?.step, start: at });
      return null;
    }
    if (type === "delegation_completed") return this.close(`wait ${d.child_run_id}`, at);
    return null;
  }
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

// A round step for the axis: about five ticks across `total` milliseconds.
function tick(total) {
  const rough = Math.max(total / 5, 1);
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((m) => m * power).find((v) => v >= rough);
}

// `now`: where a span that has not ended stops (the run's end, or the present while it is active).
export function waterfall(spans, width, now) {
  const rows = spans.all;
  const zero = spans.first ?? now;
  const total = Math.max(now - zero, 1);
  const label = Math.min(170, Math.round(width * 0.34));
  const plot = Math.max(width - label - 8, 40);
  const x = (t) => label + ((t - zero) / total) * plot;
  const height = AXIS + rows.length * ROW + 4;
  const root = svg("svg", {
    class: "waterfall",
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: "img",
    "aria-label": `Waterfall: ${rows.length} spans over ${duration(total)}`,
  });
  const step = tick(total);
  for (let t = 0; t <= total; t += step) {
    const at = x(zero + t);
    root.append(
      svg("line", { class: "grid", x1: at, x2: at, y1: AXIS - 4, y2: height }),
      svg("text", { class: "tick", x: at, y: AXIS - 8, "text-anchor": !t ? "start" : at > width - 30 ? "end" : "middle" }, duration(t)),
    );
  }
  rows.forEach((span, i) => {
    const y = AXIS + i * ROW;
    const ended = span.end !== null && span.end !== undefined;
    const end = ended ? span.end : now;
    const ms = end - span.start;
    const left = x(span.start);
    const bar = Math.max(x(end) - left, 2);
    const shown = `${duration(ms)}${ended ? "" : " so far"}`;
    const cost = span.kind === "step" && span.cost !== null && span.cost !== undefined ? ` · ${dollars(span.cost)}` : "";
    const classes = `span span-${span.kind}${span.failed ? " failed" : ""}${ended ? "" : " open"}`;
    const row = svg(
      "g",
      { class: classes, "data-kind": span.kind, "data-ms": ended ? ms : null, "data-step": span.step ?? null },
      svg("title", {}, `${span.label}: ${shown}${cost}, from +${duration(span.start - zero)}`),
      svg("text", { class: "name", x: span.kind === "step" || span.kind === "run" ? 2 : 12, y: y + 15 }, clip(span.label, label)),
      svg("rect", { x: left, y: y + 4, width: bar, height: ROW - 8, rx: 2 }),
      durText(`${shown}${cost}`, left, bar, y, label, width),
    );
    root.append(row);
  });
  return root;
}

// A bar's duration goes after it, else before it, else inside its end: never over the labels.
function durText(text, left, bar, y, label, width) {
  const need = text.length * 6.2 + 6; // about 6 px a character at 11 px
  const after = left + bar + need <= width;
  const before = !after && left - need >= label;
  const x = after ? left + bar + 4 : before ? left - 4 : left + bar - 4;
  const anchor = after ? "start" : "end";
  return svg("text", { class: after || before ? "dur" : "dur in", x, y: y + 15, "text-anchor": anchor }, text);
}

// Labels are cut to their column (about 7 px a character at 12 px).
function clip(text, px) {
  const fits = Math.floor((px - 14) / 7);
  const s = String(text ?? "");
  return s.length > fits ? `${s.slice(0, Math.max(fits - 1, 1))}…` : s;
}
