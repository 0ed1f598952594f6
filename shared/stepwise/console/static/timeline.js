// One run's events as a timeline: steps, the model's text as it streams, tool calls with their arguments
// and results, waits and their answers, delegations (linking the child run), compaction and errors.

import { add, dollars, duration, h, json, link, mono, tokens } from "./dom.js";
import { agentRef } from "./names.js";
import { Spans } from "./waterfall.js";

export const TERMINAL = new Set(["run_completed", "run_failed", "run_cancelled"]);

function call(data) {
  return [mono(data.tool_name), data.arguments !== undefined ? json(data.arguments) : null];
}

function errorText(error) {
  if (!error || typeof error !== "object") return String(error ?? "unknown error");
  return `${error.code ?? "error"}: ${error.message ?? ""}`;
}

const RENDER = {
  run_started: (d) => ["Run started on agent ", agentRef(d.agent_id), `, up to ${d.max_steps ?? "?"} steps`],
  tool_call: (d) => ["Tool call ", call(d)],
  tool_result: (d) =>
    d.error
      ? ["Tool failed ", mono(d.tool_name), h("p", { class: "error-text" }, errorText(d.error))]
      : [
          "Tool result ",
          mono(d.tool_name),
          d.deduplicated ? " (the effect had already happened)" : null,
          json(d.output),
        ],
  approval_requested: (d) => ["Approval requested for ", call(d)],
  approval_decided: (d) => [
    `${d.approved ? "Approved" : "Denied"}: `,
    mono(d.tool_name),
    d.decided_by ? ` by ${d.decided_by}` : null,
    d.reason ? h("p", {}, d.reason) : null,
  ],
  client_tool_requested: (d) => ["Waiting for the app to run ", call(d)],
  client_tool_answered: (d) => ["The app answered ", mono(d.tool_name), `: ${d.outcome ?? ""}`],
  hook_blocked: (d) => [
    `Blocked by hook ${d.hook_id ?? ""} (${d.event ?? ""}${d.tool_name ? ` on ${d.tool_name}` : ""}): `,
    d.message ?? "no reason given",
  ],
  delegation_started: (d) => [
    "Delegated ",
    mono(d.tool_name),
    " to agent ",
    agentRef(d.agent_id),
    ": child run ",
    d.child_run_id ? link(d.child_run_id, "runs", d.child_run_id) : "?",
  ],
  delegation_completed: (d) => [
    "Child run ",
    d.child_run_id ? link(d.child_run_id, "runs", d.child_run_id) : "?",
    ` ended: ${d.status ?? "?"}`,
  ],
  compaction: (d) => [
    `History compacted: ${d.tokens_before ?? "?"} → ${d.tokens_after ?? "?"} tokens, ` +
      `${d.shortened_tool_results ?? 0} tool results shortened, ${d.summarized_messages ?? 0} messages summarized`,
  ],
  step_completed: (d) => [
    `Model answered (${d.action ?? ""}): ${tokens(d.usage)}`,
    d.usage?.cost_usd !== undefined ? `, ${dollars(d.usage.cost_usd)}` : null,
  ],
  run_completed: (d) => [
    `Run succeeded in ${d.steps ?? "?"} steps`,
    h("p", { class: "answer" }, d.output ?? ""),
  ],
  run_failed: (d) => ["Run failed: ", h("p", { class: "error-text" }, errorText(d.error))],
  run_cancelled: (d) => [`Run cancelled: ${d.reason ?? "no reason given"}`],
};

const ERRORS = new Set(["run_failed", "hook_blocked"]);

// What the span an event ends says: how long it took (and the model's time to its first token).
function took(span) {
  if (!span) return null;
  const first = span.first ? `, first token after ${duration(span.first - span.start)}` : "";
  return h("span", { class: "took" }, ` · ${duration(span.end - span.start)}${first}`);
}

// The duration goes on the event's first line, before any block (its JSON, its answer).
function placed(parts, extra) {
  const flat = [parts].flat(Infinity);
  if (!extra) return flat;
  const block = flat.findIndex((p) => p instanceof Element && (p.tagName === "PRE" || p.tagName === "P"));
  flat.splice(block < 0 ? flat.length : block, 0, extra);
  return flat;
}

export class Timeline {
  constructor(runId) {
    this.runId = runId;
    this.el = h("ol", { class: "timeline" });
    this.steps = new Map(); // step -> {list, text, streamed, head}
    this.current = this.el;
    this.spans = new Spans(runId);
  }

  add(event) {
    const data = event.data ?? {};
    const closed = this.spans.add(event);
    if (event.type === "step_started") {
      this.current = this.step(data.step).list;
      this.heads();
      return;
    }
    if (event.type === "chunk") {
      this.chunk(data);
      return;
    }
    const render = RENDER[event.type] ?? ((d) => [`${event.type} `, json(d)]);
    const failed = ERRORS.has(event.type) || (event.type === "tool_result" && data.error);
    const item = h(
      "li",
      { class: `event event-${event.type}${failed ? " failed" : ""}`, "data-seq": event.seq },
      h("span", { class: "seq" }, `#${event.seq}`),
      // A descendant's wait is written to the root's stream too, naming the run it belongs to.
      data.run_id && data.run_id !== this.runId
        ? h("span", { class: "from" }, "in run ", link(data.run_id, "runs", data.run_id), ": ")
        : null,
      placed(render(data), took(closed)),
    );
    add(this.current, item);
    this.heads();
  }

  // The current step's header: how long it has taken so far and what its model call cost.
  heads() {
    const span = this.spans.step;
    const step = span && this.steps.get(span.step);
    if (!step) return;
    const cost = span.cost !== null && span.cost !== undefined ? ` · ${dollars(span.cost)}` : "";
    step.head.textContent = `${duration(span.end - span.start)}${cost}`;
  }

  step(number) {
    let step = this.steps.get(number);
    if (!step) {
      const list = h("ol", { class: "step-events" });
      const text = h("p", { class: "text", hidden: true });
      const head = h("span", { class: "step-took" });
      add(this.el, h("li", { class: "step", "data-step": number }, h("h3", {}, `Step ${number} `, head), text, list));
      step = { list, text, streamed: "", head };
      this.steps.set(number, step);
    }
    return step;
  }

  // The model's text as it arrives. A retried model step sends its text again from offset 0: only what
  // goes past what is on screen is added, so nothing shows twice.
  chunk(data) {
    const step = this.step(data.step ?? 0);
    const text = String(data.text ?? "");
    const offset = Number.isInteger(data.offset) ? data.offset : step.streamed.length;
    const fresh = text.slice(Math.max(step.streamed.length - offset, 0));
    if (!fresh) return;
    step.streamed += fresh;
    step.text.hidden = false;
    add(step.text, fresh);
  }
}
