// Agents by name wherever an id appears: the name links to the agent, the id is its tooltip and a
// button copies it. Names come from GET /v1/agents once per page load; an id the list does not know
// (an agent made since) asks again, at most once per ten seconds, then every reference on the page is
// named in place. A deleted agent keeps its id as its name.

import { api } from "./api.js";
import { h } from "./dom.js";

const names = new Map();
let loading = null;
let loadedAt = 0;

export function rememberAgents(agents) {
  for (const agent of agents) names.set(agent.agent_id, agent.name);
  loadedAt = Date.now();
}

// Before the first view: its references are named as they are built. A failure leaves them as ids.
export function ready() {
  if (!loadedAt) refresh(true);
  return loading ?? Promise.resolve();
}

function refresh(first = false) {
  if (loading || (!first && Date.now() - loadedAt < 10000)) return;
  loading = api
    .agents()
    .then(({ agents }) => {
      rememberAgents(agents);
      for (const el of document.querySelectorAll("[data-agent-id]")) {
        el.textContent = names.get(el.dataset.agentId) ?? el.dataset.agentId;
      }
    })
    .catch(() => {}) // the ids stay shown: nothing is lost but the names
    .finally(() => {
      loading = null;
      loadedAt = Date.now();
    });
}

export function agentName(agentId) {
  if (!names.has(agentId)) refresh();
  return names.get(agentId) ?? agentId;
}

export function agentRef(agentId) {
  if (!agentId) return "—";
  return h(
    "span",
    { class: "ref" },
    h(
      "a",
      { href: `#/agents/${encodeURIComponent(agentId)}`, title: agentId, "data-agent-id": agentId },
      agentName(agentId),
    ),
    copyButton(agentId),
  );
}

export function copyButton(text) {
  const button = h("button", { type: "button", class: "copy", title: `Copy ${text}`, "aria-label": `Copy ${text}` }, "copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "copied";
    } catch {
      // No clipboard (an insecure origin, a refused permission): select the id for a manual copy.
      window.getSelection()?.selectAllChildren(button.previousSibling ?? button);
    }
  });
  return button;
}

// [[id, name]] of every agent known, by name (the runs filter's choices).
export function knownAgents() {
  return [...names].sort((a, b) => a[1].localeCompare(b[1]));
}
