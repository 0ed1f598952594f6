// The usage page: the last 30 days' cost per day, stacked by agent, drawn as inline SVG built node by
// node (no markup parsed, no inline style: colours are SVG presentation attributes, which the CSP's
// style-src does not govern), and the same rows as a table beneath it.

import { api } from "./api.js";
import { add, dollars, h } from "./dom.js";
import { agentName, agentRef } from "./names.js";

const SVG = "http://www.w3.org/2000/svg";
const DAYS = 30;
const WIDTH = 720;
const HEIGHT = 220;
const LEFT = 56; // room for the axis labels
const BOTTOM = 24;
const PALETTE = ["#2f6fdf", "#e07b39", "#3a9d5d", "#b4449b", "#8a6d3b", "#2aa3b3", "#c0392b", "#6c5ce7"];

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

function days(now) {
  const out = [];
  for (let i = DAYS - 1; i >= 0; i -= 1) {
    out.push(new Date(now.getTime() - i * 86400000).toISOString().slice(0, 10));
  }
  return out;
}

// rows of group_by=day,agent → the chart: one column per day, one stacked segment per agent.
export function chart(rows, now = new Date()) {
  const dates = days(now);
  const agents = [...new Set(rows.map((r) => r.agent_id))].sort();
  const cost = new Map(rows.map((r) => [`${r.day}|${r.agent_id}`, r.cost_usd ?? 0]));
  const totals = dates.map((d) => agents.reduce((sum, a) => sum + (cost.get(`${d}|${a}`) ?? 0), 0));
  const top = Math.max(...totals, 0) || 1;
  const plot = HEIGHT - BOTTOM;
  const step = (WIDTH - LEFT) / dates.length;
  const figure = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "usage-chart",
    role: "img",
    "aria-label": `Cost per day by agent, last ${DAYS} days`,
  });
  add(
    figure,
    svg("line", { x1: LEFT, y1: plot, x2: WIDTH, y2: plot, stroke: "#999" }),
    svg("text", { x: LEFT - 6, y: 12, "text-anchor": "end", "font-size": 11 }, dollars(top)),
    svg("text", { x: LEFT - 6, y: plot, "text-anchor": "end", "font-size": 11 }, "$0"),
  );
  dates.forEach((date, i) => {
    let y = plot;
    agents.forEach((agent, k) => {
      const value = cost.get(`${date}|${agent}`) ?? 0;
      if (!value) return;
      const height = (value / top) * (plot - 8);
      y -= height;
      add(
        figure,
        svg(
          "rect",
          { x: LEFT + i * step + 1, y, width: Math.max(step - 2, 1), height, fill: PALETTE[k % PALETTE.length] },
          svg("title", {}, `${date} · ${agentName(agent)} · ${dollars(value)}`),
        ),
      );
    });
    if (i % 5 === 0) {
      add(figure, svg("text", { x: LEFT + i * step, y: HEIGHT - 6, "font-size": 10 }, date.slice(5)));
    }
  });
  const legend = h("ul", { class: "legend" });
  agents.forEach((agent, k) => {
    add(legend, h("li", {}, svg("svg", { width: 10, height: 10 }, svg("rect", { width: 10, height: 10, fill: PALETTE[k % PALETTE.length] })), " ", agentRef(agent)));
  });
  return [figure, legend];
}

function table(rows) {
  const body = h("tbody", {});
  for (const r of rows) {
    add(
      body,
      h(
        "tr",
        {},
        h("td", {}, r.day),
        h("td", {}, agentRef(r.agent_id)),
        h("td", {}, r.input_tokens),
        h("td", {}, r.cached_tokens),
        h("td", {}, r.output_tokens),
        h("td", {}, r.billable_tokens),
        h("td", {}, dollars(r.cost_usd)),
        h("td", {}, r.runs),
        h("td", {}, r.model_calls),
      ),
    );
  }
  const head = ["day", "agent", "input", "cached", "output", "billable", "cost", "runs", "model calls"];
  return h("table", { class: "usage" }, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), body);
}

export async function usageView(main, signal) {
  const from = new Date(Date.now() - (DAYS - 1) * 86400000).toISOString().slice(0, 10);
  const { rows } = await api.usage({ from, group_by: "day,agent" }, signal);
  const shown = [h("h1", {}, "Usage"), h("p", { class: "note" }, `Cost per day by agent, the last ${DAYS} days (UTC).`)];
  if (!rows.length) {
    main.replaceChildren(...shown, h("p", { class: "note" }, "No usage yet."));
    return;
  }
  main.replaceChildren(...shown, ...chart(rows), table(rows));
}
