// The runs list's filters, kept in the hash (#/runs?status=failed&agent=agt_…&user=…&trigger=…&from=
// 2026-12-01&to=2026-12-04), so a filtered list is a link to share and survives a reload. Each maps to a
// query parameter of GET /v1/runs; the dates are whole local days, `to` included.

import { h } from "./dom.js";

const STATUSES = ["queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out"];
const TRIGGERS = ["api", "schedule", "event", "delegation", "what_if"];
const KEYS = ["status", "agent", "user", "trigger", "from", "to"];

export function readFilters(search) {
  const params = new URLSearchParams(search ?? "");
  return Object.fromEntries(KEYS.map((k) => [k, params.get(k) ?? ""]));
}

function day(value, next) {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(value)) return undefined;
  const at = new Date(`${value}T00:00:00`); // local midnight: the day the user picked, in their zone
  if (next) at.setDate(at.getDate() + 1);
  return Number.isNaN(at.getTime()) ? undefined : at.toISOString();
}

export function toQuery(f) {
  return {
    status: f.status || undefined,
    agent_id: f.agent || undefined,
    user_id: f.user || undefined,
    trigger: f.trigger || undefined,
    created_after: day(f.from, false),
    created_before: day(f.to, true),
  };
}

export function filtering(f) {
  return KEYS.some((k) => f[k]);
}

function choice(name, label, value, options) {
  return h(
    "label",
    {},
    label,
    h(
      "select",
      { name },
      h("option", { value: "" }, "any"),
      options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
    ),
  );
}

// `agents`: [[id, name]]. Applying writes the hash; the route draws the list again from it.
export function filterForm(f, agents) {
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter runs" },
    choice("status", "Status", f.status, STATUSES.map((s) => [s, s])),
    choice("agent", "Agent", f.agent, agents),
    h("label", {}, "User", h("input", { name: "user", value: f.user, maxlength: 128, placeholder: "any" })),
    choice("trigger", "Trigger", f.trigger, TRIGGERS.map((t) => [t, t])),
    h("label", {}, "From", h("input", { name: "from", type: "date", value: f.from })),
    h("label", {}, "To", h("input", { name: "to", type: "date", value: f.to })),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit" }, "Filter"),
      filtering(f) ? h("a", { href: "#/runs", class: "clear" }, "Clear") : null,
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (String(v).trim()) params.set(k, String(v).trim());
    const query = params.toString();
    window.location.hash = query ? `#/runs?${query}` : "#/runs";
  });
  // Folded on a phone unless a filter is on; open on a wide screen.
  const open = filtering(f) || window.matchMedia("(min-width: 48rem)").matches;
  return h("details", { class: "filters-box", open }, h("summary", {}, filtering(f) ? "Filters (on)" : "Filters"), form);
}
