// Workflows: #/workflows lists them, #/workflows/<workflow_id> draws the latest version as a graph, and
// #/workflows/<workflow_id>/<run_id> colours each node by what the run's events say of it, live. The
// graph is SVG built node by node (createElementNS, attributes only): the CSP allows no inline style.

import { api } from "./api.js";
import { add, h, link, mono, replace, status, when } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const BOX = { width: 150, height: 34, gap: 14 };
const LONG_POLL_SECONDS = 20;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

function inner(node) {
  if (node.type === "sequential") return node.nodes;
  if (node.type === "parallel") return node.branches;
  if (node.type === "map" || node.type === "loop") return [node.node];
  if (node.type === "branch") return [...Object.values(node.cases ?? {}), ...(node.default ? [node.default] : [])];
  return [];
}

// Each node is a box; a sequential's children stack downwards, any other composite's sit side by side
// under its box. Returns the size and a function that draws it at (x, y).
function layout(node, states) {
  const kids = inner(node).map((child) => layout(child, states));
  const across = node.type !== "sequential";
  const kidsW = across ? kids.reduce((w, k) => w + k.width, 0) + BOX.gap * Math.max(kids.length - 1, 0) : Math.max(0, ...kids.map((k) => k.width));
  const kidsH = across ? Math.max(0, ...kids.map((k) => k.height)) : kids.reduce((s, k) => s + k.height, 0) + BOX.gap * Math.max(kids.length - 1, 0);
  const width = Math.max(BOX.width, kidsW);
  const height = BOX.height + (kids.length ? BOX.gap + kidsH : 0);
  const draw = (group, x, y) => {
    const top = x + (width - BOX.width) / 2;
    const state = states.get(node.id) ?? "idle";
    add(
      group,
      svg(
        "g",
        { class: `node ${state}` },
        svg("rect", { x: top, y, width: BOX.width, height: BOX.height, rx: 6 }),
        svg("text", { x: top + 8, y: y + 21 }, `${node.id} · ${node.type}`),
        svg("title", {}, `${node.id} (${node.type}): ${state}`),
      ),
    );
    let cx = x + (width - kidsW) / 2;
    let cy = y + BOX.height + BOX.gap;
    for (const kid of kids) {
      const kx = across ? cx : x + (width - kid.width) / 2;
      add(group, svg("line", { x1: top + BOX.width / 2, y1: y + BOX.height, x2: kx + kid.width / 2, y2: cy, class: "edge" }));
      kid.draw(group, kx, cy);
      if (across) cx += kid.width + BOX.gap;
      else cy += kid.height + BOX.gap;
    }
  };
  return { width, height, draw };
}

export function graph(root, states = new Map()) {
  const shape = layout(root, states);
  const pad = 8;
  const figure = svg("svg", {
    class: "workflow-graph",
    viewBox: `0 0 ${shape.width + 2 * pad} ${shape.height + 2 * pad}`,
    role: "img",
    "aria-label": "the workflow's nodes",
  });
  shape.draw(figure, pad, pad);
  return figure;
}

// A node's state from one event: running on node_started, done or failed at its end.
export function apply(states, event) {
  const id = event.data?.node_id;
  if (!id) return;
  const next = { node_started: "running", node_completed: "done", node_failed: "failed" }[event.type];
  if (next) states.set(id, next);
}

export async function workflowsView(main, signal) {
  replace(main, h("h1", {}, "Workflows"), h("p", { class: "note" }, "Loading…"));
  const { workflows } = await api.workflows(signal);
  const list = h("ul", { class: "cards" });
  for (const wf of workflows) {
    add(
      list,
      h(
        "li",
        { class: "card" },
        h("h2", {}, link(wf.name, "workflows", wf.workflow_id)),
        h("p", {}, mono(wf.workflow_id), ` · version ${wf.version} · `, when(wf.updated_at)),
      ),
    );
  }
  replace(main, h("h1", {}, "Workflows"), workflows.length ? list : h("p", { class: "note" }, "No workflows yet."));
}

export async function workflowView(main, workflowId, runId, signal) {
  const wf = await api.workflow(workflowId, signal);
  const states = new Map();
  const head = [h("p", { class: "crumbs" }, link("Workflows", "workflows")), h("h1", {}, wf.name)];
  const facts = h("p", {}, mono(wf.workflow_id), ` · version ${wf.version}`);
  if (!runId) {
    replace(main, ...head, facts, graph(wf.root));
    return;
  }
  let after = 0;
  for (;;) {
    const [run, page] = await Promise.all([api.run(runId, signal), api.events(runId, after, after ? LONG_POLL_SECONDS : 0, signal)]);
    for (const event of page.events) apply(states, event);
    after = page.next;
    replace(main, ...head, facts, h("p", {}, "run ", link(runId, "runs", runId), " ", status(run.status)), graph(wf.root, states));
    if (page.done || signal.aborted) return;
  }
}
