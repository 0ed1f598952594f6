// The API as the console calls it: the key from the tab's session storage in the contract's
// Authorization header, errors in the contract's shape raised as ApiError.

const KEY_NAME = "stepwise.api_key";
// The page is served at <base>/v1/console: every route is relative to <base>/v1/, so the console works
// behind a custom domain's base path as well as at the API's own address.
const BASE = new URL(".", window.location.href);

// sessionStorage, never localStorage: the key lives as long as the tab, and is never put in a URL.
export const key = {
  get: () => window.sessionStorage.getItem(KEY_NAME),
  set: (value) => window.sessionStorage.setItem(KEY_NAME, value),
  clear: () => window.sessionStorage.removeItem(KEY_NAME),
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function call(method, path, { query = {}, body, headers = {}, signal } = {}) {
  const url = new URL(path, BASE);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  const init = {
    method,
    signal,
    cache: "no-store",
    credentials: "omit",
    headers: { Accept: "application/json", Authorization: `Bearer ${key.get() ?? ""}`, ...headers },
  };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network_error", "the API could not be reached");
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = data && typeof data === "object" ? data.error : null;
    throw new ApiError(
      response.status,
      error?.code ?? `http_${response.status}`,
      error?.message ?? `the API answered ${response.status}`,
    );
  }
  return data;
}

const part = encodeURIComponent;

export const api = {
  agents: (signal) => call("GET", "agents", { signal }),
  agent: (agentId, signal) => call("GET", `agents/${part(agentId)}`, { signal }),
  runs: (query, signal) => call("GET", "runs", { query, signal }),
  run: (runId, signal) => call("GET", `runs/${part(runId)}`, { signal }),
  compare: (a, b, signal) => call("GET", `runs/${part(a)}/compare/${part(b)}`, { signal }),
  usage: (query, signal) => call("GET", "usage", { query, signal }),
  events: (runId, after, wait, signal) =>
    call("GET", `runs/${part(runId)}/events`, { query: { after, wait }, signal }),
  evals: (signal) => call("GET", "evals", { signal }),
  evalSuite: (evalId, signal) => call("GET", `evals/${part(evalId)}`, { signal }),
  evalRuns: (evalId, signal) => call("GET", `evals/${part(evalId)}/runs`, { signal }),
  evalRun: (evalId, evalRunId, signal) => call("GET", `evals/${part(evalId)}/runs/${part(evalRunId)}`, { signal }),
  session: (sessionId, signal) => call("GET", `sessions/${part(sessionId)}`, { signal }),
  workflows: (signal) => call("GET", "workflows", { signal }),
  workflow: (workflowId, signal) => call("GET", `workflows/${part(workflowId)}`, { signal }),
  interactions: (sessionId, status, signal) =>
    call("GET", `sessions/${part(sessionId)}/interactions`, { query: { status }, signal }),
  respond: (interactionId, answer, idempotencyKey) =>
    call("POST", `sessions/interactions/${part(interactionId)}/respond`, {
      body: { answer },
      headers: { "Idempotency-Key": idempotencyKey },
    }),
  effects: (query, signal) => call("GET", "effects", { query, signal }),
  resolveEffect: (effectKey, body) => call("POST", `effects/${part(effectKey)}/resolve`, { body }),
};
