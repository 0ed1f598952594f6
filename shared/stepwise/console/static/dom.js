// Building the page from data without ever parsing it as HTML: every string becomes a text node or an
// attribute value, never markup (no innerHTML anywhere in the console).

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  add(el, children);
  return el;
}

export function add(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

// Links stay inside the console: a hash route built from ids, each part encoded.
export function link(text, ...parts) {
  return h("a", { href: `#/${parts.map(encodeURIComponent).join("/")}` }, text);
}

export function mono(text) {
  return h("code", {}, text ?? "—");
}

export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2) ?? "null");
}

export function status(value) {
  return h("span", { class: `status status-${String(value).replace(/[^a-z_]/g, "")}` }, value);
}

export function when(value) {
  if (!value) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

// A run's cost: its own and its descendants' (total_usage) when the API gives it.
export function cost(run) {
  const usage = run.total_usage ?? run.usage ?? {};
  return dollars(usage.cost_usd);
}

export function dollars(value) {
  if (value === null || value === undefined) return "—";
  return `$${Number(value).toFixed(value !== 0 && Math.abs(value) < 0.01 ? 6 : 4)}`;
}

export function tokens(usage) {
  const u = usage ?? {};
  return `${u.input_tokens ?? 0} in · ${u.output_tokens ?? 0} out · ${u.cached_tokens ?? 0} cached`;
}

export function facts(pairs) {
  const list = h("dl", { class: "facts" });
  for (const [term, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    add(list, h("dt", {}, term), h("dd", {}, value));
  }
  return list;
}

// How long something took, in the unit that reads best: 850 ms, 12.3 s, 4 m 05 s, 2 h 03 m.
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  if (ms < 1000) return `${Math.max(Math.round(ms), 0)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const pad = (n) => String(Math.floor(n)).padStart(2, "0");
  if (s < 3600) return `${Math.floor(s / 60)} m ${pad(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${pad((s % 3600) / 60)} m`;
}

// A run's wall time: created to finished, or to now while it is active.
export function runTime(run) {
  const end = run.finished_at ? Date.parse(run.finished_at) : Date.now();
  return duration(end - Date.parse(run.created_at));
}
