// The console's views, one per hash route: #/agents, #/agents/<id>, #/runs, #/runs/<id>,
// #/sessions/<id>, #/compare/<a>/<b>, #/evals, #/evals/<id>, #/evals/<id>/<eval_run_id> (evals.js), #/usage.
// Ids and the runs list's filters (#/runs?status=…, filters.js) live in the hash; the API key never does
// (it stays in session storage).

import { ApiError, api, key } from "./api.js";
import { compareView } from "./compare.js";
import { add, cost, facts, h, json, link, mono, replace, runTime, status, tokens, when } from "./dom.js";
import { unknownEffectsView } from "./effects.js";
import { evalRunView, evalView, evalsView } from "./evals.js";
import { filterForm, filtering, readFilters, toQuery } from "./filters.js";
import { agentName, agentRef, copyButton, knownAgents, ready, rememberAgents } from "./names.js";
import { TERMINAL, Timeline } from "./timeline.js";
import { usageView } from "./usage.js";
import { waterfall } from "./waterfall.js";
import { workflowView, workflowsView } from "./workflows.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const LONG_POLL_SECONDS = 20; // under the API's 25 s cap, itself under API Gateway's 30 s timeout
const RETRY_MS = 2000;
let view = null; // the AbortController of the view on screen: leaving a view stops its requests

document.getElementById("sign-out").addEventListener("click", () => {
  key.clear();
  route();
});
window.addEventListener("hashchange", route);
document.getElementById("find").addEventListener("submit", find);
route();

// The search box: a run or session id (pasted with spaces or as a console link) opens its page.
function find(event) {
  event.preventDefault();
  const input = document.getElementById("find-id");
  const id = input.value.trim().split("/").pop();
  const kind = { run: "runs", ses: "sessions", agt: "agents" }[id.split("_")[0]];
  if (!kind || !/^[a-z]+_[0-9A-Za-z]+$/.test(id)) {
    input.setCustomValidity("A run id (run_…) or a session id (ses_…)");
    input.reportValidity();
    return;
  }
  input.setCustomValidity("");
  input.value = "";
  window.location.hash = `#/${kind}/${encodeURIComponent(id)}`;
}

async function route() {
  view?.abort();
  view = new AbortController();
  const signal = view.signal;
  if (!key.get()) {
    signIn();
    return;
  }
  nav.hidden = false;
  let name, id, other;
  const [path, search] = window.location.hash.replace(/^#\/?/, "").split("?");
  try {
    [name, id, other] = path.split("/").map(decodeURIComponent);
  } catch (err) {
    failed(err, signal); // a hand-edited hash that is not valid percent-encoding (URIError)
    return;
  }
  await ready(); // agents' names, once per page load, before the first view names any
  if (signal.aborted) return;
  const show = {
    agents: () => (id ? agentView(id, signal) : agentsView(signal)),
    runs: () => (id ? runView(id, signal) : runsView(readFilters(search), signal)),
    sessions: () => sessionView(id, signal),
    compare: () => compareView(main, id, other, signal),
    evals: () =>
      other ? evalRunView(main, id, other, signal) : id ? evalView(main, id, signal) : evalsView(main, signal),
    usage: () => usageView(main, signal),
    workflows: () => (id ? workflowView(main, id, other, signal) : workflowsView(main, signal)),
  }[name || "runs"];
  (show ?? (() => runsView(readFilters(""), signal)))().catch((err) => failed(err, signal));
}

function failed(err, signal) {
  if (signal.aborted || err?.name === "AbortError") return;
  if (err instanceof ApiError && err.status === 401) {
    key.clear();
    signIn("The API refused that key. Enter a valid one.");
    return;
  }
  replace(main, problem(err));
}

function problem(err) {
  const code = err instanceof ApiError ? err.code : "error";
  return h("div", { class: "card problem", role: "alert" }, h("strong", {}, code), " ", err.message);
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms); // and forget the listener: a long reconnect loop sleeps often
    signal.addEventListener("abort", done, { once: true });
  });
}

// --- sign in ------------------------------------------------------------------------------------

function signIn(note) {
  nav.hidden = true;
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    placeholder: "sk-...",
  });
  const message = h("p", { class: "error-text", role: "alert" }, note ?? "");
  const form = h(
    "form",
    {
      class: "card sign-in",
      onsubmit: async (event) => {
        event.preventDefault(); // handled here: the page never submits the key anywhere as a form
        const value = input.value.trim();
        if (!value) return;
        key.set(value);
        try {
          rememberAgents((await api.agents()).agents); // the key's tenant's agents, named from here on
        } catch (err) {
          key.clear();
          message.textContent =
            err instanceof ApiError && err.status === 401 ? "The API refused that key." : err.message;
          return;
        }
        input.value = "";
        route();
      },
    },
    h("h1", {}, "Stepwise console"),
    h("label", { for: "api-key" }, "API key"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    message,
    h("p", { class: "note" }, "The key stays in this tab's session storage and is sent only to this API."),
  );
  replace(main, form);
  input.focus();
}

// --- agents -------------------------------------------------------------------------------------

async function agentsView(signal) {
  replace(main, h("h1", {}, "Agents"), h("p", { class: "note" }, "Loading…"));
  const { agents } = await api.agents(signal);
  rememberAgents(agents);
  const list = h("ul", { class: "cards" });
  for (const agent of agents) {
    add(
      list,
      h(
        "li",
        { class: "card agent" },
        h("h2", {}, link(agent.name, "agents", agent.agent_id)),
        facts([
          ["id", [mono(agent.agent_id), copyButton(agent.agent_id)]],
          ["model", agent.model ?? "default"],
          ["tools", (agent.tools ?? []).map((t) => t.name).join(", ") || "none"],
          ["created", when(agent.created_at)],
        ]),
      ),
    );
  }
  replace(main, h("h1", {}, "Agents"), agents.length ? list : h("p", { class: "note" }, "No agents yet."));
}

async function agentView(agentId, signal) {
  const agent = await api.agent(agentId, signal);
  const runs = h("section", {});
  replace(
    main,
    h("p", { class: "crumbs" }, link("Agents", "agents")),
    h("h1", {}, agent.name),
    h(
      "div",
      { class: "card" },
      facts([
        ["id", [mono(agent.agent_id), copyButton(agent.agent_id)]],
        ["model", agent.model ?? "default"],
        ["max steps", agent.max_steps],
        ["tools", (agent.tools ?? []).map((t) => `${t.name} (${t.type ?? "builtin"})`).join(", ") || "none"],
      ]),
      agent.system_prompt ? h("p", { class: "prompt" }, agent.system_prompt) : null,
    ),
    h("h2", {}, "Runs"),
    runs,
  );
  await runTable(runs, { agent_id: agentId }, signal);
}

// --- runs ---------------------------------------------------------------------------------------

async function runsView(filters, signal) {
  const runs = h("section", {});
  const agents = knownAgents();
  if (filters.agent && !agents.some(([agentId]) => agentId === filters.agent)) {
    agents.push([filters.agent, agentName(filters.agent)]); // a deleted agent's runs stay listable
  }
  replace(main, h("h1", {}, "Runs"), filterForm(filters, agents), runs);
  await runTable(runs, toQuery(filters), signal, filtering(filters));
}

// Runs newest first (the API's order), a page at a time. A filter the API applies after reading may
// leave a page empty with a token: up to five such pages are read on before the button is offered.
async function runTable(container, query, signal, filtered = false) {
  const list = h("ul", { class: "runs" });
  const more = h("button", { type: "button", class: "quiet", hidden: true }, "Older runs");
  const refresh = h("button", { type: "button", class: "quiet" }, "Refresh");
  replace(container, h("div", { class: "tools" }, refresh), list, more);
  let token = null;
  const load = async () => {
    for (let read = 0; read < 5; read++) {
      const page = await api.runs({ ...query, next_token: token ?? undefined }, signal);
      for (const run of page.runs) add(list, runRow(run));
      token = page.next_token;
      if (page.runs.length || !token) break;
    }
    more.hidden = !token;
    if (!list.children.length) {
      add(list, h("li", { class: "note" }, filtered ? "No runs match these filters." : "No runs yet."));
    }
  };
  more.addEventListener("click", () => load().catch((err) => failed(err, signal)));
  refresh.addEventListener("click", () => {
    list.replaceChildren();
    token = null;
    load().catch((err) => failed(err, signal));
  });
  await load();
}

function runRow(run) {
  return h(
    "li",
    { class: "card run-row", "data-run-id": run.run_id },
    h("div", { class: "line" }, link(run.run_id, "runs", run.run_id), status(run.status)),
    h(
      "div",
      { class: "line meta" },
      agentRef(run.agent_id),
      run.user_id ? h("span", { class: "user" }, `user ${run.user_id}`) : null,
      run.trigger && run.trigger !== "api" ? h("span", { class: "trigger" }, run.trigger) : null,
      h("span", { class: "cost" }, cost(run)),
      h("span", {}, `${run.steps} steps`),
      h("span", { class: "duration", title: run.finished_at ? "created to finished" : "running so far" }, runTime(run)),
      h("span", {}, when(run.created_at)),
    ),
    h("p", { class: "input" }, run.input),
  );
}

async function runView(runId, signal) {
  let run = await api.run(runId, signal);
  const header = h("div", { class: "card" });
  const pending = h("section", { class: "pending", "aria-label": "Waiting on you" });
  const timeline = new Timeline(runId);
  const live = h("p", { class: "note live" }, "Following…");
  const waits = new Set(); // interactions the stream asked for (a descendant's included)
  const chart = h("div", { class: "chart-box" });
  replace(
    main,
    h("p", { class: "crumbs" }, link("Runs", "runs"), " / ", agentRef(run.agent_id)),
    h("h1", {}, "Run ", mono(runId), copyButton(runId)),
    header,
    pending,
    h("h2", {}, "Waterfall"),
    chart,
    h("h2", {}, "Timeline"),
    timeline.el,
    live,
  );
  const showHeader = () => replace(header, runFacts(run));
  // Drawn again after each page of events, at the column's width (text stays legible on a phone).
  const draw = () => {
    const now = run.finished_at ? Date.parse(run.finished_at) : Date.now();
    const end = Math.max(now, timeline.spans.last ?? now);
    replace(chart, timeline.spans.all.length ? waterfall(timeline.spans, chart.clientWidth || 360, end) : h("p", { class: "note" }, "No steps yet."));
  };
  const showPending = () => pendingView(pending, run, waits, signal, () => showPending());
  showHeader();

  let after = 0;
  let first = true;
  // While the run is active its open bars grow every second, between pages of the long poll.
  const ticking = setInterval(() => !run.finished_at && timeline.spans.open.size && draw(), 1000);
  signal.addEventListener("abort", () => clearInterval(ticking), { once: true });
  while (!signal.aborted) {
    let page;
    try {
      page = await api.events(runId, after, LONG_POLL_SECONDS, signal);
    } catch (err) {
      if (signal.aborted) return;
      // A dropped connection or a busy API: try again, from where the timeline is.
      if (err instanceof ApiError && (err.status === 0 || err.status === 429 || err.status >= 500)) {
        live.textContent = `Reconnecting (${err.code})…`;
        await sleep(RETRY_MS, signal);
        continue;
      }
      throw err;
    }
    let changed = false;
    let asked = false;
    for (const event of page.events) {
      timeline.add(event);
      if (event.type === "approval_requested" || event.type === "client_tool_requested") {
        waits.add(event.data?.interaction_id);
        asked = true;
      }
      if (event.type.endsWith("_decided") || event.type.endsWith("_answered")) asked = true;
      if (event.type === "step_completed" || TERMINAL.has(event.type) || event.type === "run_started") {
        changed = true;
      }
    }
    live.textContent = "Following…";
    after = page.next;
    if (asked || first) await showPending();
    first = false;
    if (changed || page.done) {
      run = await api.run(runId, signal);
      showHeader();
    }
    draw();
    if (page.done) {
      clearInterval(ticking);
      live.textContent = `The run ended: ${run.status}.`;
      await showPending();
      live.after(h("section", { class: "pending", "aria-label": "Unknown effects" })); // effects.js fills it
      await unknownEffectsView(live.nextElementSibling, runId, signal);
      return;
    }
  }
}

function runFacts(run) {
  return [
    facts([
      ["status", status(run.status)],
      ["agent", agentRef(run.agent_id)],
      ["session", [link(run.session_id, "sessions", run.session_id), copyButton(run.session_id)]],
      ["user", run.user_id],
      ["trigger", run.trigger],
      ["parent", run.parent_run_id ? link(run.parent_run_id, "runs", run.parent_run_id) : null],
      [
        "children",
        run.children?.length ? run.children.flatMap((c, i) => [i ? ", " : "", link(c, "runs", c)]) : null,
      ],
      ["steps", `${run.steps} of ${run.max_steps}`],
      ["cost", h("span", { class: "cost" }, cost(run))],
      ["tokens", tokens(run.total_usage ?? run.usage)],
      ["tools run", run.tools_executed === null ? "unknown" : run.tools_executed.join(", ") || "none"],
      ["replay of", run.replay_of ? link(run.replay_of, "runs", run.replay_of) : null],
      [
        "what-if of",
        run.what_if_of
          ? [
              link(run.what_if_of, "runs", run.what_if_of),
              ` · served ${run.served}, live ${run.live_reads}, diverged ${run.divergences} · `,
              link("compare side by side", "compare", run.what_if_of, run.run_id),
            ]
          : null,
      ],
      ["started", when(run.created_at)],
      ["finished", run.finished_at ? when(run.finished_at) : null],
      ["duration", h("span", { class: "duration" }, run.finished_at ? runTime(run) : `${runTime(run)} so far`)],
    ]),
    h("h3", {}, "Input"),
    h("p", { class: "input" }, run.input),
    run.output !== null && run.output !== undefined
      ? [h("h3", {}, "Output"), h("p", { class: "answer output" }, run.output)]
      : null,
    run.error
      ? h("p", { class: "error-text", role: "alert" }, `${run.error.code}: ${run.error.message}`)
      : null,
  ];
}

// --- waits: approvals and client tools ------------------------------------------------------------

// One Idempotency-Key per answer given: a retry of the same answer (a lost response) changes nothing.
const answerKeys = new Map();

function idempotencyKey(interactionId, answer) {
  const id = `${interactionId} ${JSON.stringify(answer)}`;
  if (!answerKeys.has(id)) answerKeys.set(id, window.crypto.randomUUID());
  return answerKeys.get(id);
}

async function pendingView(container, run, waits, signal, refresh) {
  const { interactions } = await api.interactions(run.session_id, "pending", signal);
  const mine = interactions.filter((i) => i.run_id === run.run_id || waits.has(i.interaction_id));
  if (!mine.length) {
    container.replaceChildren();
    return;
  }
  replace(
    container,
    h("h2", {}, "Waiting on you"),
    mine.map((i) => (i.kind === "approval" ? approvalCard(i, refresh) : clientToolCard(i, refresh))),
  );
}

function waitCard(interaction, title, ...body) {
  return h(
    "article",
    { class: "card wait", "data-interaction-id": interaction.interaction_id },
    h("h3", {}, title, " ", mono(interaction.tool_name)),
    interaction.run_id ? h("p", { class: "note" }, "run ", link(interaction.run_id, "runs", interaction.run_id)) : null,
    h("p", { class: "note" }, `asked ${when(interaction.created_at)}`),
    json(interaction.arguments),
    body,
  );
}

async function send(interaction, answer, message, buttons, refresh) {
  for (const button of buttons) button.disabled = true;
  message.textContent = "Sending…";
  try {
    await api.respond(interaction.interaction_id, answer, idempotencyKey(interaction.interaction_id, answer));
    message.textContent = "Sent: the run goes on.";
    await refresh().catch((err) => {
      message.textContent = `Sent; the list could not be refreshed (${err.code ?? err.name}).`;
    });
  } catch (err) {
    message.textContent = `${err.code}: ${err.message}`;
    for (const button of buttons) button.disabled = false;
  }
}

function approvalCard(interaction, refresh) {
  const reason = h("input", { type: "text", name: "reason", maxlength: 2000, placeholder: "Reason (optional)" });
  const message = h("p", { class: "note", role: "status" });
  const approve = h("button", { type: "button", class: "approve" }, "Approve");
  const deny = h("button", { type: "button", class: "deny" }, "Deny");
  const decide = (approved) => {
    const answer = { approved };
    if (reason.value.trim()) answer.reason = reason.value.trim();
    send(interaction, answer, message, [approve, deny], refresh);
  };
  approve.addEventListener("click", () => decide(true));
  deny.addEventListener("click", () => decide(false));
  return waitCard(
    interaction,
    "Approve",
    h("label", {}, "Reason", reason),
    h("div", { class: "actions" }, approve, deny),
    message,
  );
}

function clientToolCard(interaction, refresh) {
  const output = h("textarea", { name: "output", rows: 4, spellcheck: "false", placeholder: '{"result": "..."}' });
  const outcome = h(
    "select",
    { name: "outcome" },
    h("option", { value: "completed" }, "completed"),
    h("option", { value: "error" }, "error"),
  );
  const message = h("p", { class: "note", role: "status" });
  const submit = h("button", { type: "button", class: "approve" }, "Send result");
  submit.addEventListener("click", () => {
    const text = output.value.trim();
    let value = text;
    try {
      value = text ? JSON.parse(text) : null;
    } catch {
      value = text; // not JSON: sent as the text it is
    }
    const answer = { tool_call_id: interaction.tool_call_id, outcome: outcome.value, output: value };
    send(interaction, answer, message, [submit], refresh);
  });
  return waitCard(
    interaction,
    "Run client tool",
    h("label", {}, "Output (JSON, or plain text)", output),
    h("label", {}, "Outcome", outcome),
    h("div", { class: "actions" }, submit),
    message,
  );
}

// --- sessions -----------------------------------------------------------------------------------

async function sessionView(sessionId, signal) {
  const session = await api.session(sessionId, signal);
  const runs = h("ul", { class: "runs" }, session.runs.map(runRow));
  const messages = h("ol", { class: "conversation" }, session.messages.map(message));
  replace(
    main,
    h("p", { class: "crumbs" }, link("Runs", "runs"), " / ", agentRef(session.agent_id)),
    h("h1", {}, "Session ", mono(session.session_id), copyButton(session.session_id)),
    h(
      "div",
      { class: "card" },
      facts([
        ["agent", agentRef(session.agent_id)],
        ["user", session.user_id],
        ["active run", session.active_run_id ? link(session.active_run_id, "runs", session.active_run_id) : null],
        ["cost", h("span", { class: "cost" }, cost(session))],
        ["tokens", tokens(session.usage)],
        ["created", when(session.created_at)],
      ]),
    ),
    h("h2", {}, "Conversation"),
    session.messages.length ? messages : h("p", { class: "note" }, "No messages yet."),
    h("h2", {}, "Runs"),
    runs,
  );
}

// A message as stored (OpenAI's chat shape): text, or content parts; tool calls and their results.
function message(m) {
  const role = String(m.role ?? "?");
  return h(
    "li",
    { class: `message message-${role.replace(/[^a-z]/g, "")}` },
    h("span", { class: "role" }, role, m.name ? ` (${m.name})` : "", m.tool_call_id ? ` ← ${m.tool_call_id}` : ""),
    content(m.content),
    (m.tool_calls ?? []).map((c) =>
      h("div", { class: "call" }, "calls ", mono(c.function?.name ?? c.name), json(parseArguments(c))),
    ),
  );
}

function content(value) {
  if (value === null || value === undefined || value === "") return null;
  if (typeof value === "string") return h("p", { class: "text" }, value);
  if (Array.isArray(value)) {
    return value.map((part) =>
      part?.type === "text" ? h("p", { class: "text" }, part.text ?? "") : h("p", { class: "note" }, `[${part?.type ?? "part"}]`),
    );
  }
  return json(value);
}

function parseArguments(toolCall) {
  const raw = toolCall.function?.arguments ?? toolCall.arguments;
  if (typeof raw !== "string") return raw ?? {};
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}
