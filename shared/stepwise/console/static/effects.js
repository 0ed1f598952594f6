// Unknown effects on a run's page: calls the effects ledger could not settle (the endpoint failed in a
// way that may have acted). A replay refuses them until a person says which: done (a replay answers
// from the ledger) or undone (a replay performs it again). Its own module, so the run view only mounts it.

import { api } from "./api.js";
import { h, json, mono, replace, when } from "./dom.js";

const MAX_PAGES = 10; // the filters apply after the read: a few pages, then a pointer to the CLI

export async function unknownEffectsView(container, runId, signal) {
  const found = [];
  let token = null;
  for (let page = 0; page < MAX_PAGES; page += 1) {
    const listed = await api.effects({ status: "unknown", run_id: runId, limit: 100, next_token: token }, signal);
    found.push(...listed.effects);
    token = listed.next_token;
    if (!token) break;
  }
  if (!found.length) {
    container.replaceChildren();
    return;
  }
  const refresh = () => unknownEffectsView(container, runId, signal);
  replace(
    container,
    h("h2", {}, "Effects with an unknown outcome"),
    h("p", { class: "note" }, "These calls may or may not have acted. Check the target, then say which."),
    found.map((effect) => effectCard(effect, refresh)),
    token ? h("p", { class: "note" }, "More may exist: stepwise effects list --run ", mono(runId)) : null,
  );
}

function effectCard(effect, refresh) {
  const note = h("input", { type: "text", placeholder: "note (optional)", "aria-label": "note" });
  const message = h("p", { class: "note", role: "status" });
  const done = h("button", { type: "button", class: "approve" }, "It happened");
  const undone = h("button", { type: "button", class: "deny" }, "It did not happen");
  const buttons = [done, undone];
  const resolve = async (outcome) => {
    for (const button of buttons) button.disabled = true;
    message.textContent = "Sending…";
    try {
      await api.resolveEffect(effect.key, { outcome, note: note.value || null });
      await refresh();
    } catch (err) {
      message.textContent = `${err.code}: ${err.message}`;
      for (const button of buttons) button.disabled = false;
    }
  };
  done.addEventListener("click", () => resolve("done"));
  undone.addEventListener("click", () => resolve("undone"));
  return h(
    "article",
    { class: "card wait", "data-effect-key": effect.key },
    h("h3", {}, mono(effect.tool), " ", mono(effect.key)),
    h("p", { class: "note" }, `attempted ${when(effect.claimed_at)}`, effect.error ? ` · ${effect.error.code}` : ""),
    json(effect.arguments),
    note,
    h("p", {}, done, " ", undone),
    message,
  );
}
