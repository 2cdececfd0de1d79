/*
 * console.js — the Weir web console, part of the `api` module: the web console served by
 * `weir serve` at / (this file at /console/console.js). Plain ES2020, no dependencies, no
 * build step.
 *
 * - Every change lives in the one `state` object; a page's data lives in `state.view`, which
 *   is replaced on every navigation (its AbortController cancels the page's requests, its
 *   cleanups stop its timers).
 * - `api()` is the only place that talks to the server: it adds the bearer token, throws an
 *   ApiError carrying the server's message on a non-2xx answer, and signs out on a 401.
 * - Every string from the server goes through `esc()` before it reaches innerHTML (or is set
 *   with textContent): pipeline names, reasons and raw dead letters come from hostile callers.
 *
 * Views (hash routing): #/ pipelines, #/pipelines/<name> one pipeline, #/operators.
 */
"use strict";

// ---- Constants ---------------------------------------------------------------------------

const TOKEN_KEY = "weir-token";
const POLL_MS = 1000;
const DEAD_LETTERS_MS = 2000;
const OPERATORS_MS = 5000;
const RECONNECT_MS = 2000;
const CHART_POINTS = 120;
const TAIL_SIZE = 50;
const RAW_MAX = 200;
const ROLLBACK_REASON = "rolled back from the console";
const STATES = ["running", "stopped", "stopping", "failed", "damaged"];
const READ_ONLY_TEXT = "read-only: this token cannot change anything";

const SPEC_TEMPLATE = JSON.stringify(
  {
    name: "clicks",
    source: { type: "http" },
    event: { key: "user", timestamp: "ts" },
    watermark: { bound: 0 },
    window: { type: "tumbling", size: 1000 },
    operators: [{ name: "count-sum", version: "1.0.0", kind: "aggregate" }],
    checkpoint_interval: "1s",
  },
  null,
  2,
);

/** The live charts of a pipeline page: `kind` names the svg (`chart-<kind>`). */
const CHARTS = [
  { kind: "input-rate", title: "Input rate", unit: "events/s", format: (v) => `${fmtNum(v)} /s` },
  { kind: "watermark-lag", title: "Watermark lag", unit: "seconds", format: (v) => fmtDuration(v * 1000) },
  { kind: "late-ratio", title: "Late events", unit: "% of events in", format: (v) => `${v.toFixed(2)} %` },
  { kind: "checkpoint-duration", title: "Checkpoint duration", unit: "ms, per checkpoint", format: fmtMs },
  { kind: "call-latency", title: "Operator call latency", unit: "µs, mean per second", format: (v) => `${fmtNum(v)} µs` },
];

/** The chart drawing area, in SVG user units (the svg scales to its card). */
const CHART_BOX = { width: 360, height: 150, left: 58, right: 10, top: 10, bottom: 22 };

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

// ---- State -------------------------------------------------------------------------------

const state = {
  token: null, // the bearer token (also in sessionStorage)
  who: null, // {name, scopes, pipelines} from /v1/whoami
  view: null, // the current page's data; replaced on every navigation
  error: null, // {message, source} shown in #error
  dismissed: null, // a polling error the user dismissed: not shown again until it changes
};

// ---- Small helpers -----------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

/** Escapes a value for HTML text and double- or single-quoted attributes. */
function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
// A token narrowed to pipelines reaches no registry and makes no pipeline: the console is
// read-only for it (its API still starts, stops and rolls out its own pipelines).
const narrowed = () => Boolean(state.who && state.who.pipelines);
const isAdmin = () => Boolean(state.who && state.who.scopes.includes("admin")) && !narrowed();
// Making and changing pipelines and operators: an admin or a deploy token (deleting is admin's).
const canDeploy = () =>
  isAdmin() || (Boolean(state.who && state.who.scopes.includes("deploy")) && !narrowed());
const isAbort = (e) => Boolean(e && e.name === "AbortError");
const current = (view) => state.view === view;
const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
const compareVersions = (a, b) => String(a).localeCompare(String(b), "en", { numeric: true });
const pipelinePath = (name) => `/v1/pipelines/${encodeURIComponent(name)}`;
const pipelineHref = (name) => `#/pipelines/${encodeURIComponent(name)}`;
const sumOf = (items, field) => (Array.isArray(items) ? items.reduce((a, v) => a + num(v && v[field]), 0) : 0);

function fmtInt(n) {
  return Math.round(num(n)).toLocaleString("en-US");
}

/** A number in at most four significant characters: 12.3, 456, 7.8k, 1.2M. */
function fmtNum(v) {
  if (!Number.isFinite(v)) return "—";
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(1)}k`;
  if (a >= 100 || Number.isInteger(v)) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

/** A duration for people: "120 ms", "1.2 s", "3 min", "5.0 h", "276 d"; "—" when unknown. */
function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  const sign = ms < 0 ? "-" : "";
  const a = Math.abs(ms);
  if (a < 1000) return `${sign}${Math.round(a)} ms`;
  if (a < 60e3) return `${sign}${(a / 1e3).toFixed(1)} s`;
  if (a < 3600e3) return `${sign}${Math.round(a / 60e3)} min`;
  if (a < 48 * 3600e3) return `${sign}${(a / 3600e3).toFixed(1)} h`;
  return `${sign}${Math.round(a / 86400e3)} d`;
}

function fmtMs(ms) {
  if (!Number.isFinite(ms)) return "—";
  return Math.abs(ms) < 1000 ? `${ms.toFixed(ms < 10 ? 2 : 1)} ms` : fmtDuration(ms);
}

function fmtBytes(n) {
  if (!Number.isFinite(n)) return "—";
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

/** `part` of `whole` as a percentage, or "—" when `whole` is 0. */
function percentOf(part, whole, decimals) {
  return whole > 0 ? `${((part / whole) * 100).toFixed(decimals)} %` : "—";
}

/** A rate such as 0.05 as "5 %". */
function fmtRate(rate) {
  return Number.isFinite(rate) ? `${Number((rate * 100).toFixed(2))} %` : "—";
}

/** Milliseconds since the epoch as ISO 8601 (UTC); "—" for none or before the epoch. */
function isoTime(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0 || ms > 8.64e15) return "—";
  return new Date(ms).toISOString();
}

/** The time of day (UTC) of `ms`: "10:00:01", with milliseconds when there are any. */
function clockTime(ms) {
  const iso = isoTime(ms);
  if (iso === "—") return iso;
  const time = iso.slice(11, 23);
  return time.endsWith(".000") ? time.slice(0, 8) : time;
}

function truncate(text, max) {
  const s = String(text ?? "");
  if (s.length <= max) return s;
  return `${Array.from(s.slice(0, max * 2)).slice(0, max).join("")}…`;
}

/** A duration from a spec: a number of ms or a string such as "5m". */
function specDuration(v) {
  return typeof v === "number" ? fmtDuration(v) : String(v ?? "?");
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/** Sets an element's text and, when given, its `data-value` (the raw number for tests). */
function setText(id, text, value) {
  const el = $(id);
  if (!el) return;
  el.textContent = text;
  if (value !== undefined) el.dataset.value = String(value);
}

/**
 * Replaces an element's content unless it is unchanged; keeps the keyboard focus on the
 * element with the same `data-focus-key` so that a poll does not steal it.
 */
function replaceHTML(view, el, html) {
  if (!el || view.html.get(el) === html) return;
  const focused = document.activeElement;
  const key = focused && el.contains(focused) ? focused.getAttribute("data-focus-key") : null;
  view.html.set(el, html);
  el.innerHTML = html;
  if (!key) return;
  for (const candidate of el.querySelectorAll("[data-focus-key]")) {
    if (candidate.getAttribute("data-focus-key") === key) {
      candidate.focus();
      break;
    }
  }
}

// ---- The API -----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

/**
 * The one way to call the server. `body`: an object (sent as JSON), a string (sent as JSON
 * text), a Blob (sent as `options.type`) or undefined. `options`: `signal`, `headers`, `type`,
 * `raw` (answer the Response instead of its JSON). Throws ApiError on a non-2xx answer; a
 * 401 also signs out.
 */
async function api(method, path, body, options = {}) {
  const headers = { Authorization: `Bearer ${state.token}`, ...options.headers };
  let payload;
  if (body instanceof Blob) {
    payload = body;
    headers["Content-Type"] = options.type || "application/octet-stream";
  } else if (typeof body === "string") {
    payload = body;
    headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body: payload, signal: options.signal, cache: "no-store" });
  } catch (e) {
    if (isAbort(e)) throw e;
    throw new ApiError(0, `${method} ${path}: the server did not answer (${e.message})`);
  }
  if (!response.ok) {
    const message = await errorMessage(response);
    if (response.status === 401) signOut(message);
    throw new ApiError(response.status, message);
  }
  if (options.raw) return response;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** The server's `{"error": "..."}`, or the status line when the body says nothing. */
async function errorMessage(response) {
  let detail = "";
  try {
    const text = await response.text();
    try {
      detail = JSON.parse(text).error || text;
    } catch {
      detail = text;
    }
  } catch {
    detail = "";
  }
  detail = String(detail || response.statusText || "request failed").trim();
  return `${truncate(detail, 600)} (HTTP ${response.status})`;
}

// ---- Errors ------------------------------------------------------------------------------

/** Shows `message` in #error. `source` says where it came from ("action", "poll:..."). */
function showError(message, source) {
  const d = state.dismissed;
  if (source.startsWith("poll") && d && d.source === source && d.message === message) return;
  state.error = { message, source };
  $("error-text").textContent = message;
  $("error").hidden = false;
}

/** Hides the error if it came from `source` (a later success there means it is over). */
function clearError(source) {
  if (state.dismissed && state.dismissed.source === source) state.dismissed = null;
  if (state.error && state.error.source === source) hideError();
}

function clearPollErrors() {
  state.dismissed = null;
  if (state.error && state.error.source.startsWith("poll")) hideError();
}

function hideError() {
  state.error = null;
  $("error").hidden = true;
  $("error-text").textContent = "";
}

function dismissError() {
  if (state.error && state.error.source.startsWith("poll")) state.dismissed = state.error;
  hideError();
}

/** Runs a user action: disables its button meanwhile, shows what went wrong in #error. */
async function act(button, fn) {
  if (button) button.disabled = true;
  clearError("action");
  try {
    await fn();
  } catch (e) {
    if (!isAbort(e) && e.status !== 401) showError(e.message, "action");
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}

// ---- Sign in and out ---------------------------------------------------------------------

function renderSignIn(message) {
  document.title = "Sign in · Weir";
  $("main").innerHTML = `
    <section class="card sign-in" aria-labelledby="sign-in-heading">
      <h1 id="sign-in-heading">Weir console</h1>
      <p class="muted">Sign in with an API token of this server.</p>
      <form id="sign-in-form" novalidate>
        <label for="token">API token</label>
        <input id="token" name="token" type="password" autocomplete="current-password"
               spellcheck="false" autocapitalize="off" required aria-describedby="sign-in-error">
        <p id="sign-in-error" class="form-error" role="alert" hidden></p>
        <button type="submit" id="sign-in" class="primary">Sign in</button>
      </form>
      <p class="hint">The token stays in this browser tab (session storage) and is sent as
        <code>Authorization: Bearer</code> with every request.</p>
    </section>`;
  $("sign-in-form").addEventListener("submit", onSignIn);
  if (message) showSignInError(message);
  $("token").focus();
}

function showSignInError(message) {
  const el = $("sign-in-error");
  if (!el) return;
  el.textContent = message;
  el.hidden = false;
}

async function onSignIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) return showSignInError("Enter a token.");
  const button = $("sign-in");
  button.disabled = true;
  try {
    await signIn(token);
  } catch (e) {
    if (e.status === 401) return; // signOut() already showed the form with the reason
    showSignInError(e.message);
    if (button.isConnected) button.disabled = false;
  }
}

/** Asks the server who `token` is; on success keeps it and shows the console. */
async function signIn(token) {
  state.token = token;
  let who;
  try {
    who = await api("GET", "/v1/whoami");
  } catch (e) {
    state.token = null;
    throw e;
  }
  state.who = {
    name: who && typeof who.name === "string" ? who.name : null,
    scopes: who && Array.isArray(who.scopes) ? who.scopes.map(String) : [],
    // The pipelines a narrowed token reaches; null: not narrowed.
    pipelines: who && Array.isArray(who.pipelines) ? who.pipelines.map(String) : null,
  };
  sessionStorage.setItem(TOKEN_KEY, token);
  renderChrome();
  route();
}

/** Forgets the token and shows the sign-in form (with `reason`, after a 401). */
function signOut(reason) {
  const wasSignedIn = state.who !== null;
  leaveView();
  state.token = null;
  state.who = null;
  sessionStorage.removeItem(TOKEN_KEY);
  hideError();
  renderChrome();
  if (!reason) renderSignIn("");
  else renderSignIn(wasSignedIn ? `Signed out: ${reason}` : `The server refused this token: ${reason}`);
}

/** The header: navigation, who is signed in, sign out, and the read-only banner. */
function renderChrome() {
  const top = $("top");
  if (!state.who) {
    top.hidden = true;
    top.innerHTML = "";
    return;
  }
  const { name, scopes } = state.who;
  top.innerHTML = `
    <div class="bar">
      <a class="brand" href="#/">Weir <span>console</span></a>
      <nav aria-label="Main">
        <a id="nav-pipelines" href="#/">Pipelines</a>
        <a id="nav-operators" href="#/operators">Operators</a>
      </nav>
      <div class="session">
        <span id="who" title="the token's name and scopes"><strong>${esc(name ?? "unnamed token")}</strong> · ${
          scopes.length ? scopes.map(esc).join(", ") : "no scopes"}</span>
        <button type="button" id="sign-out" class="small">Sign out</button>
      </div>
    </div>
    ${canDeploy() ? "" : `<div id="read-only" class="read-only" role="note">${esc(READ_ONLY_TEXT)}</div>`}`;
  top.hidden = false;
  $("sign-out").addEventListener("click", () => signOut());
}

// ---- Views and routing -------------------------------------------------------------------

function route() {
  if (!state.token || !state.who) return;
  leaveView();
  const hash = location.hash.replace(/^#/, "");
  const match = /^\/pipelines\/(.+)$/.exec(hash);
  if (hash === "" || hash === "/") enterList();
  else if (hash === "/operators") enterOperators();
  else if (match && decodeName(match[1]) !== null) enterPipeline(decodeName(match[1]));
  else enterNotFound();
  markNav(hash === "/operators" ? "nav-operators" : "nav-pipelines");
  const heading = document.querySelector("main h1");
  if (heading) heading.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

function decodeName(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

function markNav(id) {
  for (const link of document.querySelectorAll(".bar nav a")) {
    if (link.id === id) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

/** Starts a page: its data, an AbortController for its requests, cleanups for its timers. */
function newView(kind, data) {
  const view = { kind, abort: new AbortController(), cleanups: [], html: new Map(), ...data };
  state.view = view;
  return view;
}

function leaveView() {
  const view = state.view;
  if (!view) return;
  state.view = null;
  view.abort.abort();
  for (const cleanup of view.cleanups) cleanup();
  clearPollErrors();
}

/**
 * Runs `fn` now and again `ms` after each run ends, while `view` is current; its errors go
 * to #error under `source`, and its next success clears them. Answers a function that runs
 * it again at once (after an action), never two runs at a time.
 */
function every(view, ms, source, fn) {
  let timer = null;
  let running = false;
  let again = false;
  const tick = async () => {
    timer = null;
    if (!current(view)) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await fn();
      if (current(view)) clearError(source);
    } catch (e) {
      if (current(view) && !isAbort(e) && e.status !== 401) showError(e.message, source);
    }
    running = false;
    if (!current(view)) return;
    if (again) {
      again = false;
      tick();
    } else {
      timer = setTimeout(tick, ms);
    }
  };
  view.cleanups.push(() => clearTimeout(timer));
  tick();
  return () => {
    clearTimeout(timer);
    tick();
  };
}

function enterNotFound() {
  newView("not-found", {});
  document.title = "Not found · Weir";
  $("main").innerHTML = `
    <div class="page-head"><h1 tabindex="-1">Nothing here</h1></div>
    <p>This address is not a page of the console. <a href="#/">Go to the pipelines</a>.</p>`;
}

// ---- Pipelines list (#/) -----------------------------------------------------------------

function enterList() {
  const view = newView("list", { previous: null });
  document.title = "Pipelines · Weir";
  const admin = canDeploy();
  $("main").innerHTML = `
    <div class="page-head">
      <h1 tabindex="-1">Pipelines</h1>
      ${admin ? `<button type="button" id="new-pipeline" class="primary" aria-expanded="false"
        aria-controls="new-pipeline-form">New pipeline</button>` : ""}
    </div>
    ${admin ? newPipelineFormHTML() : ""}
    <div class="card flush section"><div class="scroll">
      <table id="pipelines" class="data">
        <caption class="sr-only">Pipelines, sorted by name, updated every second</caption>
        <thead><tr>
          <th scope="col">Name</th>
          <th scope="col">State</th>
          <th scope="col" class="num">Rate (events/s)</th>
          <th scope="col" class="num">Watermark lag</th>
          <th scope="col" class="num">Late</th>
          <th scope="col">Last checkpoint</th>
          <th scope="col">Dead letters · traps</th>
        </tr></thead>
        <tbody id="pipelines-body"><tr><td colspan="7" class="empty">Loading…</td></tr></tbody>
      </table>
    </div></div>`;
  if (admin) wireNewPipeline();
  every(view, POLL_MS, "poll:pipelines", () => pollList(view));
}

async function pollList(view) {
  const list = await api("GET", "/v1/pipelines", undefined, { signal: view.abort.signal });
  if (!current(view)) return;
  const pipelines = Array.isArray(list) ? list : [];
  const at = performance.now();
  const previous = view.previous;
  view.previous = { at, events: new Map(pipelines.map((p) => [p.name, num(p.events_in)])) };
  const rows = [...pipelines].sort(byName).map((p) => pipelineRowHTML(p, listRate(previous, p, at)));
  const empty = `<tr><td colspan="7" class="empty">No pipelines yet.${
    canDeploy() ? " Create one with “New pipeline”." : ""}</td></tr>`;
  replaceHTML(view, $("pipelines-body"), rows.length ? rows.join("") : empty);
}

/** Events per second of `p` since the previous poll; null on the first. */
function listRate(previous, p, at) {
  if (!previous || !previous.events.has(p.name)) return null;
  const seconds = (at - previous.at) / 1000;
  const delta = num(p.events_in) - previous.events.get(p.name);
  return seconds > 0 && delta >= 0 ? delta / seconds : null;
}

function pipelineRowHTML(p, rate) {
  const name = esc(p.name);
  return `<tr data-pipeline="${name}">
    <td data-field="name"><a href="${esc(pipelineHref(p.name))}" data-focus-key="${esc(`p:${p.name}`)}">${name}</a></td>
    <td data-field="state">${stateBadgeHTML(p)}</td>
    <td data-field="rate" class="num">${rate === null ? "—" : esc(Math.round(rate))}</td>
    <td data-field="lag" class="num">${esc(fmtDuration(p.lag_ms))}</td>
    <td data-field="late_ratio" class="num">${esc(percentOf(num(p.late), num(p.events_in), 2))}</td>
    <td data-field="checkpoint">${esc(checkpointText(p.last_checkpoint))}</td>
    <td data-field="errors">${errorsHTML(p)}</td>
  </tr>`;
}

function stateBadgeHTML(p) {
  const kind = STATES.includes(p.state) ? p.state : "unknown";
  const title = p.error ? ` title="${esc(p.error)}"` : "";
  return `<span class="badge badge-${kind}"${title}>${esc(p.state)}</span>`;
}

function checkpointText(c) {
  return c ? `#${c.id} · ${fmtMs(num(c.duration_ms))}` : "—";
}

function errorsHTML(p) {
  const deadLetters = num(p.dead_letters);
  const traps = sumOf(p.versions, "traps");
  const count = `<span${deadLetters > 0 ? ' class="warn-text"' : ""}>${esc(deadLetters)}</span>`;
  return traps > 0 ? `${count} · <span class="bad-text">${esc(traps)} traps</span>` : count;
}

function newPipelineFormHTML() {
  return `
    <form id="new-pipeline-form" class="card section" hidden aria-labelledby="new-pipeline-heading">
      <h2 id="new-pipeline-heading">New pipeline</h2>
      <label for="new-pipeline-spec">Spec (JSON)</label>
      <p class="hint" id="new-pipeline-hint">The fields of <code>weir run</code>'s TOML, as JSON;
        operators by registry name and version; source <code>{"type": "http"}</code>. The
        pipeline is started once it is created.</p>
      <textarea id="new-pipeline-spec" rows="14" spellcheck="false" autocapitalize="off"
        aria-describedby="new-pipeline-hint">${esc(SPEC_TEMPLATE)}</textarea>
      <div class="form-actions">
        <button type="submit" id="create-pipeline" class="primary">Create and start</button>
        <button type="button" id="new-pipeline-cancel">Cancel</button>
      </div>
    </form>`;
}

function wireNewPipeline() {
  const toggle = $("new-pipeline");
  const form = $("new-pipeline-form");
  const open = (yes) => {
    form.hidden = !yes;
    toggle.setAttribute("aria-expanded", String(yes));
    if (yes) $("new-pipeline-spec").focus();
    else toggle.focus();
  };
  toggle.addEventListener("click", () => open(form.hidden));
  $("new-pipeline-cancel").addEventListener("click", () => open(false));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    act($("create-pipeline"), createPipeline);
  });
}

/** Creates the pipeline of the spec in the form, starts it, and opens its page. */
async function createPipeline() {
  const text = $("new-pipeline-spec").value;
  let spec;
  try {
    spec = JSON.parse(text);
  } catch (e) {
    throw new Error(`The spec is not valid JSON: ${e.message}`);
  }
  if (!spec || typeof spec !== "object" || typeof spec.name !== "string" || !spec.name) {
    throw new Error('The spec needs a "name".');
  }
  await api("POST", "/v1/pipelines", text);
  try {
    await api("POST", `${pipelinePath(spec.name)}/start`);
  } catch (e) {
    if (e.status === 401) throw e;
    showError(`Created ${spec.name}, but it did not start: ${e.message}`, "action");
  }
  location.hash = pipelineHref(spec.name);
}

// ---- One pipeline (#/pipelines/<name>) ---------------------------------------------------

function enterPipeline(name) {
  const view = newView("pipeline", {
    name,
    status: null, // the latest status
    spec: undefined, // the spec (undefined: loading; null: could not be read)
    specError: "",
    operators: [], // the registry, for the rollout version choice
    versionsKey: "", // what the version choice was drawn from
    series: Object.fromEntries(CHARTS.map((c) => [c.kind, []])),
    previous: null, // the previous poll's counters, for rates
    lastCheckpoint: null, // the id of the last checkpoint charted
    tail: [], // the newest results first
    lastEventId: null, // the results stream's last id
    refresh: () => {},
  });
  document.title = `${name} · Weir`;
  $("main").innerHTML = pipelinePageHTML(name);
  if (canDeploy()) wirePipelineActions(view);
  renderCharts(view);
  view.refresh = every(view, POLL_MS, "poll:status", () => pollStatus(view));
  every(view, DEAD_LETTERS_MS, "poll:dead-letters", () => pollDeadLetters(view));
  if (canDeploy()) view.refreshOperators = every(view, OPERATORS_MS, "poll:operators", () => pollRegistry(view));
  view.refreshSavepoints = every(view, OPERATORS_MS, "poll:savepoints", () => pollSavepoints(view));
  loadSpec(view);
  tailResults(view);
}

function pipelinePageHTML(name) {
  const admin = canDeploy();
  return `
    <nav class="crumbs" aria-label="Breadcrumb"><a href="#/">← Pipelines</a></nav>
    <div class="page-head">
      <div class="title-line">
        <h1 id="pipeline-name" tabindex="-1">${esc(name)}</h1>
        <span id="pipeline-state" class="badge">…</span>
      </div>
      ${admin ? `<div class="row">
        <button type="button" id="start" class="primary">Start</button>
        <button type="button" id="stop">Stop</button>
        ${isAdmin() ? `<button type="button" id="delete-pipeline" class="danger">Delete</button>` : ""}
      </div>` : ""}
    </div>
    <p id="pipeline-failure" class="callout bad" role="status" hidden></p>

    <section class="figures" aria-label="Figures">
      ${figureHTML("events-in", "Events in", "over the pipeline's life")}
      ${figureHTML("results-out", "Results out", "since the server started it")}
      ${figureHTML("watermark", "Watermark", "", "wide smaller")}
      ${figureHTML("dead-letters", "Dead letters", "")}
      ${figureHTML("late-events", "Late events", "")}
      ${figureHTML("last-checkpoint", "Last checkpoint", "")}
      ${figureHTML("state-keys", "State keys", "")}
    </section>

    <section class="charts" aria-label="Live charts, the last two minutes">
      ${CHARTS.map(chartFigureHTML).join("")}
    </section>

    <section class="card section" aria-labelledby="stages-heading">
      <h2 id="stages-heading">Stages</h2>
      <div id="stage-graph" class="stage-graph" role="list"><p class="muted">Loading…</p></div>
      <p id="stage-note" class="note" hidden></p>
    </section>

    <section class="card section" id="workers-panel" aria-labelledby="workers-heading" hidden>
      <h2 id="workers-heading">Workers</h2>
      <div id="workers-info"></div>
    </section>

    <section class="card section" id="rollout-panel" aria-labelledby="rollout-heading">
      <h2 id="rollout-heading">Rollout</h2>
      <div id="rollout-info"><p class="muted">Loading…</p></div>
      ${admin ? rolloutFormHTML() : ""}
    </section>

    <div class="two-col">
      <section class="card" id="savepoints-panel" aria-labelledby="savepoints-heading">
        <h2 id="savepoints-heading">Savepoints</h2>
        ${admin ? savepointFormHTML() : ""}
        <div id="savepoints-info"><p class="muted">Loading…</p></div>
      </section>
      ${admin ? replayCardHTML() : ""}
    </div>

    <div class="two-col">
      <section class="card" aria-labelledby="results-heading">
        <div class="section-head">
          <h2 id="results-heading">Latest results</h2>
          <p id="results-state" class="note" role="status">connecting…</p>
        </div>
        <p class="note">Newest first, the last ${TAIL_SIZE}; window times in UTC.</p>
        <ol id="results-tail" class="tail" aria-live="off"></ol>
      </section>
      <section class="card" aria-labelledby="dead-letters-heading">
        <h2 id="dead-letters-heading">Recent dead letters</h2>
        <div class="scroll dead-letters-scroll">
          <table id="dead-letters-table" class="data">
            <caption class="sr-only">The last 20 dead letters, newest first</caption>
            <thead><tr><th scope="col">Reason</th><th scope="col" class="num">Line</th><th scope="col">Raw</th></tr></thead>
            <tbody id="dead-letters-body"><tr><td colspan="3" class="empty">Loading…</td></tr></tbody>
          </table>
        </div>
      </section>
    </div>
    <p><a href="#/">← Back to the pipelines</a></p>`;
}

function figureHTML(id, label, note, extraClass = "") {
  return `<div class="card figure ${extraClass.includes("wide") ? "wide" : ""}">
      <span class="figure-label" id="${id}-label">${esc(label)}</span>
      <span class="figure-value ${extraClass.includes("smaller") ? "smaller" : ""}" id="${id}"
        aria-labelledby="${id}-label ${id}" data-value="">—</span>
      <span class="figure-note" id="${id}-note">${esc(note)}</span>
    </div>`;
}

function chartFigureHTML(chart) {
  return `<figure class="card chart">
      <figcaption>
        <span class="chart-title">${esc(chart.title)}</span>
        <span class="chart-unit">${esc(chart.unit)}</span>
        <span class="chart-now" id="chart-${chart.kind}-now">—</span>
      </figcaption>
      <svg id="chart-${chart.kind}" viewBox="0 0 ${CHART_BOX.width} ${CHART_BOX.height}" role="img"
        xmlns="http://www.w3.org/2000/svg"></svg>
    </figure>`;
}

function rolloutFormHTML() {
  return `
    <form id="rollout-form" class="rollout-form" novalidate>
      <div class="field">
        <label for="rollout-version">Version</label>
        <select id="rollout-version"><option value="">loading…</option></select>
      </div>
      <div class="field">
        <label for="rollout-percent-input">Percent of keys</label>
        <input id="rollout-percent-input" type="number" min="0" max="100" step="1" value="10" inputmode="numeric">
      </div>
      <button type="submit" id="rollout-step" class="primary">Roll out</button>
      <button type="button" id="rollout-shadow">Run in shadow</button>
      <span class="spacer"></span>
      <span id="rollout-current-actions" class="row"></span>
    </form>`;
}

function savepointFormHTML() {
  return `
    <form id="savepoint-form" class="row" novalidate>
      <div class="field">
        <label for="savepoint-name">Name</label>
        <input id="savepoint-name" type="text" maxlength="64" placeholder="before-v2" autocomplete="off">
      </div>
      <button type="submit" id="savepoint-take" class="primary">Take a savepoint</button>
    </form>`;
}

function replayCardHTML() {
  return `
    <section class="card" id="replay-panel" aria-labelledby="replay-heading">
      <h2 id="replay-heading">Replay</h2>
      <p class="note">The pipeline's recorded input through two versions of its aggregate, side by
        side, in a sandbox; the live pipeline is not touched.</p>
      <form id="replay-form" class="rollout-form" novalidate>
        <div class="field">
          <label for="replay-a">Version A</label>
          <select id="replay-a"><option value="">loading…</option></select>
        </div>
        <div class="field">
          <label for="replay-b">Version B</label>
          <select id="replay-b"><option value="">loading…</option></select>
        </div>
        <div class="field">
          <label for="replay-keys">Keys (comma-separated)</label>
          <input id="replay-keys" type="text" autocomplete="off" placeholder="ann, bob">
        </div>
        <div class="field">
          <label for="replay-savepoint">From</label>
          <select id="replay-savepoint"><option value="">the start</option></select>
        </div>
        <button type="submit" id="replay-run" class="primary">Replay</button>
      </form>
      <div id="replay-result" aria-live="polite"></div>
    </section>`;
}

function wirePipelineActions(view) {
  $("savepoint-form").addEventListener("submit", (event) => {
    event.preventDefault();
    act($("savepoint-take"), () => takeSavepoint(view));
  });
  $("savepoints-info").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-delete-savepoint]");
    if (button) act(button, () => deleteSavepoint(view, button.getAttribute("data-delete-savepoint")));
  });
  $("replay-form").addEventListener("submit", (event) => {
    event.preventDefault();
    act($("replay-run"), () => runReplay(view));
  });
  $("start").addEventListener("click", (e) => act(e.currentTarget, () => pipelineAction(view, "start")));
  $("stop").addEventListener("click", (e) => act(e.currentTarget, () => pipelineAction(view, "stop")));
  $("delete-pipeline")?.addEventListener("click", (e) => act(e.currentTarget, () => deletePipeline(view)));
  const form = $("rollout-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    act($("rollout-step"), () => rolloutStep(view, false));
  });
  form.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (!button) return;
    if (button.id === "rollout-shadow") act(button, () => rolloutStep(view, true));
    else if (button.id === "rollout-promote") act(button, () => promote(view));
    else if (button.id === "rollout-back") act(button, () => rollBack(view));
  });
}

async function pipelineAction(view, what) {
  await api("POST", `${pipelinePath(view.name)}/${what}`);
  view.refresh();
}

async function deletePipeline(view) {
  const question = `Delete the pipeline ${view.name} with its state, ingest log and output? This cannot be undone.`;
  if (!window.confirm(question)) return;
  await api("DELETE", pipelinePath(view.name));
  location.hash = "#/";
}

// -- Status, figures and charts --

async function pollStatus(view) {
  const status = await api("GET", pipelinePath(view.name), undefined, { signal: view.abort.signal });
  if (!current(view)) return;
  view.status = status;
  sample(view, status, performance.now());
  renderStatus(view, status);
}

/** Adds this poll's points to the charts' series. */
function sample(view, s, at) {
  const previous = view.previous;
  const events = num(s.events_in);
  const timed = new Map((s.versions || []).map((v) => [v.version, { calls: num(v.timed_calls), ns: num(v.timed_call_ns) }]));
  if (previous) {
    const seconds = (at - previous.at) / 1000;
    if (seconds > 0 && events >= previous.events) addPoint(view, "input-rate", (events - previous.events) / seconds);
    let calls = 0;
    let ns = 0;
    for (const [version, now] of timed) {
      const before = previous.timed.get(version) || { calls: 0, ns: 0 };
      if (now.calls >= before.calls && now.ns >= before.ns) {
        calls += now.calls - before.calls;
        ns += now.ns - before.ns;
      }
    }
    if (calls > 0) addPoint(view, "call-latency", ns / calls / 1000);
  }
  if (typeof s.lag_ms === "number" && Number.isFinite(s.lag_ms)) addPoint(view, "watermark-lag", s.lag_ms / 1000);
  if (events > 0) addPoint(view, "late-ratio", (num(s.late) / events) * 100);
  const checkpoint = s.last_checkpoint;
  if (checkpoint && checkpoint.id !== view.lastCheckpoint) {
    view.lastCheckpoint = checkpoint.id;
    addPoint(view, "checkpoint-duration", num(checkpoint.duration_ms));
  }
  view.previous = { at, events, timed };
}

function addPoint(view, kind, value) {
  const series = view.series[kind];
  series.push(value);
  if (series.length > CHART_POINTS) series.splice(0, series.length - CHART_POINTS);
}

function renderStatus(view, s) {
  const badge = $("pipeline-state");
  badge.textContent = s.state;
  badge.className = `badge badge-${STATES.includes(s.state) ? s.state : "unknown"}`;
  const failure = $("pipeline-failure");
  failure.hidden = !s.error;
  failure.textContent = s.error ? `${s.state}: ${s.error}` : "";
  if (canDeploy()) {
    $("start").disabled = s.state === "running" || s.state === "stopping";
    $("stop").disabled = s.state !== "running";
  }
  renderFigures(s);
  renderCharts(view);
  renderStages(view);
  replaceHTML(view, $("rollout-info"), rolloutInfoHTML(s));
  $("workers-panel").hidden = !s.workers;
  if (s.workers) replaceHTML(view, $("workers-info"), workersHTML(s.workers));
  if (canDeploy()) {
    replaceHTML(view, $("rollout-current-actions"), rolloutActionsHTML(s));
    renderVersionChoice(view);
  }
}

function renderFigures(s) {
  const events = num(s.events_in);
  const deadLetters = num(s.dead_letters);
  const late = num(s.late);
  const traps = sumOf(s.versions, "traps");
  const c = s.last_checkpoint;
  setText("events-in", fmtInt(events), events);
  setText("results-out", fmtInt(s.results_out), num(s.results_out));
  setText("watermark", isoTime(s.watermark), isoTime(s.watermark) === "—" ? "" : s.watermark);
  setText("watermark-note", `lag ${fmtDuration(s.lag_ms)}`);
  setText("dead-letters", fmtInt(deadLetters), deadLetters);
  setText("dead-letters-note", traps > 0 ? `${fmtInt(traps)} operator traps` : "no operator traps");
  setText("late-events", fmtInt(late), late);
  setText("late-events-note", `${percentOf(late, events, 2)} of events in`);
  setText("last-checkpoint", c ? `#${c.id}` : "—", c ? c.id : "");
  setText("last-checkpoint-note", c ? `${fmtMs(num(c.duration_ms))} · ${fmtBytes(num(c.bytes))}` : "none yet");
  setText("state-keys", fmtInt(s.state_keys), num(s.state_keys));
}

function renderCharts(view) {
  for (const chart of CHARTS) {
    const points = view.series[chart.kind];
    replaceHTML(view, $(`chart-${chart.kind}`), chartSVG(chart, points));
    setText(`chart-${chart.kind}-now`, points.length ? chart.format(points[points.length - 1]) : "—");
  }
}

/** The inside of a chart's svg: title, grid, min and max labels, the polyline. */
function chartSVG(chart, points) {
  const { width, height, left, right, top, bottom } = CHART_BOX;
  const x0 = left;
  const x1 = width - right;
  const y0 = top;
  const y1 = height - bottom;
  const n = points.length;
  const latest = n ? `, latest ${chart.format(points[n - 1])}` : ", no data yet";
  const title = `<title>${esc(`${chart.title} (${chart.unit}): ${n} point${n === 1 ? "" : "s"}${latest}`)}</title>`;
  const grid = [y0, (y0 + y1) / 2, y1]
    .map((y) => `<line class="grid-line" x1="${x0}" x2="${x1}" y1="${y}" y2="${y}"/>`)
    .join("");
  const time = `<text class="axis-label" x="${x0}" y="${height - 6}">−2 min</text>`
    + `<text class="axis-label" x="${x1}" y="${height - 6}" text-anchor="end">now</text>`;
  if (!n) {
    return `${title}${grid}${time}<polyline data-points="0" points=""/>`
      + `<text class="waiting" x="${(x0 + x1) / 2}" y="${(y0 + y1) / 2 - 6}" text-anchor="middle">waiting for data…</text>`;
  }
  let lo = Math.min(...points);
  let hi = Math.max(...points);
  if (lo === hi) {
    const pad = Math.abs(hi) * 0.1 || 1;
    hi += pad;
    lo = lo >= 0 ? Math.max(0, lo - pad) : lo - pad;
  }
  const step = (x1 - x0) / (CHART_POINTS - 1);
  const offset = CHART_POINTS - n;
  const xy = points.map((v, i) => [x0 + (offset + i) * step, y1 - ((v - lo) / (hi - lo)) * (y1 - y0)]);
  const coords = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const [lastX, lastY] = xy[n - 1];
  const labels = `<text class="axis-label" x="${x0 - 6}" y="${y0 + 4}" text-anchor="end">${esc(chart.format(hi))}</text>`
    + `<text class="axis-label" x="${x0 - 6}" y="${y1 + 4}" text-anchor="end">${esc(chart.format(lo))}</text>`;
  return `${title}${grid}${labels}${time}<polyline data-points="${n}" points="${coords}"/>`
    + `<circle class="last-point" cx="${lastX.toFixed(1)}" cy="${lastY.toFixed(1)}" r="3"/>`;
}

// -- Stage graph --

async function loadSpec(view) {
  try {
    const spec = await api("GET", `${pipelinePath(view.name)}/spec`, undefined, { signal: view.abort.signal });
    if (!current(view)) return;
    view.spec = spec && typeof spec === "object" ? spec : null;
  } catch (e) {
    if (isAbort(e) || !current(view)) return;
    view.spec = null;
    view.specError = e.message;
  }
  renderStages(view);
}

function renderStages(view) {
  const note = $("stage-note");
  if (view.spec === undefined && !view.status) return;
  const stages = view.spec ? stagesFromSpec(view.spec, view.status) : stagesFromStatus(view.status);
  replaceHTML(view, $("stage-graph"), stages.map(stageHTML).join('<span class="stage-arrow" aria-hidden="true">→</span>'));
  note.hidden = view.spec !== null;
  note.textContent = view.spec === null ? `Only the live operator is shown: the spec could not be read (${view.specError}).` : "";
}

/** The boxes: source → enrichers → aggregate → later stages → sinks. */
function stagesFromSpec(spec, status) {
  const live = status && status.operator;
  const rollout = status && status.rollout;
  const operator = (o, kind, detail) => {
    const name = String((o && o.name) || "?");
    const version = live && live.name === name ? live.version : o && o.version;
    const candidate = rollout && rollout.operator === name && !rollout.rolled_back
      ? `→ ${rollout.candidate}${rollout.shadow ? " (shadow)" : ` at ${num(rollout.percent)} %`}` : "";
    return { kind, label: version ? `${name}@${version}` : name, detail, candidate };
  };
  const source = spec.source || {};
  const stages = [{ kind: "source", label: "source", detail: sourceText(source) }];
  if (spec.join) {
    stages.push({ kind: "join", label: "join", detail: `by ${spec.join.field ?? "?"}` });
  }
  const operators = Array.isArray(spec.operators) ? spec.operators : [];
  for (const o of operators.filter((o) => o.kind === "enrich")) stages.push(operator(o, "enrich", ""));
  for (const o of operators.filter((o) => o.kind !== "enrich")) {
    stages.push(operator(o, "aggregate", windowText(spec.window)));
  }
  for (const stage of Array.isArray(spec.stages) ? spec.stages : []) {
    const by = stage.key ? ` by ${stage.key}` : ", one key";
    stages.push(operator(stage.operator, "stage", `${windowText(stage.window)}${by}`));
  }
  const sinks = spec.sinks || {};
  const sinkLines = [
    ["results", sinks.results, "out/results.jsonl"],
    ["late", sinks.late, "out/late.jsonl"],
    ["dead letters", sinks.dead_letters, "out/dead-letters.jsonl"],
  ].map(([what, sink, fallback]) => `${what}: ${sinkText(sink ?? fallback)}`);
  stages.push({ kind: "sinks", label: "sinks", detail: sinkLines.join("\n") });
  return stages;
}

/** Without the spec: the source, the operator the status names, the sinks. */
function stagesFromStatus(status) {
  const op = status && status.operator;
  const stages = [{ kind: "source", label: "source", detail: "" }];
  if (op) stages.push({ kind: "operator", label: `${op.name}@${op.version}`, detail: "" });
  stages.push({ kind: "sinks", label: "sinks", detail: "" });
  return stages;
}

function stageHTML(stage) {
  const detail = String(stage.detail || "")
    .split("\n")
    .filter(Boolean)
    .map((line) => `<span class="stage-detail">${esc(line)}</span>`)
    .join("");
  return `<div class="stage" role="listitem" data-stage="${esc(stage.label)}" data-kind="${esc(stage.kind)}">
      <span class="stage-kind">${esc(stage.kind)}</span>
      <span class="stage-label">${esc(stage.label)}</span>${detail}
      ${stage.candidate ? `<span class="stage-rollout">${esc(stage.candidate)}</span>` : ""}
    </div>`;
}

function sourceText(source) {
  const type = String(source.type || "?");
  if (source.path) return `${type} ${source.path}`;
  if (source.stream) return `${type} ${source.stream}`;
  return type;
}

function windowText(w) {
  if (!w || typeof w !== "object") return "";
  if (w.type === "sliding") return `sliding ${specDuration(w.size)} every ${specDuration(w.slide)}`;
  if (w.type === "session") return `session, gap ${specDuration(w.gap)}`;
  return `${w.type || "tumbling"} ${specDuration(w.size)}`;
}

function sinkText(sink) {
  if (typeof sink === "string") return sink;
  if (sink && typeof sink === "object") return sink.subject ? `nats ${sink.subject}` : JSON.stringify(sink);
  return "?";
}

// -- Rollout --

function rolloutInfoHTML(s) {
  const op = s.operator;
  const r = s.rollout;
  const percent = r ? num(r.percent) : 0;
  const applied = r ? num(r.applied_percent) : 0;
  const reason = (r && r.rolled_back) || s.rolled_back;
  const pending = r && applied !== percent ? ' <span class="muted">(until the next checkpoint)</span>' : "";
  const facts = [
    ["Operator", "rollout-operator", esc((r && r.operator) || (op && op.name) || "—")],
    ["Live version", "live-version", esc(op ? op.version : "—")],
    ["Candidate", "candidate-version", esc(r ? r.candidate : "—")],
    ["Keys to the candidate", "rollout-percent", r ? `${esc(percent)} %` : "—", percent],
    ["Applied", "rollout-applied", r ? `${esc(applied)} %${pending}` : "—", applied],
    ["Mode", "rollout-mode", r ? (r.shadow ? "shadow: a copy of every key's events, serves no traffic" : "split by key") : "—"],
    ["Schedule", "rollout-schedule", esc(scheduleText(r))],
    ["Automatic rollback", "rollout-policy", esc(policyText(r && r.policy))],
  ];
  const dl = facts
    .map(([label, id, html, value]) => `<div><dt>${esc(label)}</dt><dd id="${id}"${
      value === undefined ? "" : ` data-value="${esc(value)}"`}>${html}</dd></div>`)
    .join("");
  const rolledBack = reason ? `<p id="rolled-back" class="callout warn">Rolled back: ${esc(reason)}</p>` : "";
  const analysis = (r && r.analysis) || s.last_analysis;
  return `${rolledBack}<dl class="facts">${dl}</dl>${analysis ? timelineHTML(analysis, r) : ""}${versionsTableHTML(s)}`;
}

/** A gated rollout's steps: each judged one with its outcome and gates, the one in progress. */
function timelineHTML(a, r) {
  const gateText = (g) => `${g.gate} ${g.value === null || g.value === undefined ? "not judged yet" : fmtNum(g.value)}`
    + ` (limit ${fmtNum(g.limit)}, ${fmtInt(g.samples)} samples)`;
  const steps = (Array.isArray(a.timeline) ? a.timeline : []).map((s) => `
      <li data-percent="${esc(s.percent)}" data-outcome="${esc(s.outcome)}">
        <strong>${esc(s.percent)} %</strong> <span class="tag tag-${esc(s.outcome)}">${esc(s.outcome)}</span>
        ${esc((s.gates || []).map(gateText).join("; "))}
        ${s.example_keys && s.example_keys.length ? `<span class="muted">keys: ${esc(s.example_keys.join(", "))}</span>` : ""}
      </li>`);
  const current = a.current && r && !r.rolled_back ? `
      <li data-percent="${esc(r.percent)}" data-outcome="running">
        <strong>${esc(r.percent)} %</strong> <span class="tag">held ${esc(fmtDuration(a.current.held_ms))} of ${esc(fmtDuration(a.hold_ms))}</span>
        ${esc((a.current.gates || []).map(gateText).join("; "))}
      </li>` : "";
  return `<h3>Steps and gates</h3><ol id="rollout-timeline" class="timeline">${steps.join("")}${current}</ol>`;
}

/** A pipeline on the cluster's workers: who holds each slice, how far it read, its lag. */
function workersHTML(w) {
  if (w.error) return `<p class="callout bad">${esc(w.error)}</p>`;
  if (w.shared === false) return '<p class="muted">Not shared with the workers yet: start it.</p>';
  const members = Array.isArray(w.members) ? w.members : [];
  const owners = w.owners || {};
  const progress = w.progress || {};
  const watermarks = w.watermarks || {};
  const slices = num(w.slices);
  const facts = [
    ["Slices", "workers-slices", esc(fmtInt(slices)), slices],
    ["Workers", "workers-members", esc(members.join(", ") || "none"), members.length],
    ["State", "workers-state", w.stopped ? "stopped: no worker runs a slice" : "running"],
  ];
  const dl = facts
    .map(([label, id, html, value]) => `<div><dt>${esc(label)}</dt><dd id="${id}"${
      value === undefined ? "" : ` data-value="${esc(value)}"`}>${html}</dd></div>`)
    .join("");
  const rows = Array.from({ length: slices }, (_, i) => {
    const p = progress[String(i)] || {};
    const mark = watermarks[String(i)];
    return `<tr data-slice="${i}">
        <th scope="row">${i}</th>
        <td data-field="owner">${esc(owners[String(i)] || "—")}</td>
        <td class="num" data-field="read">${esc(p.read === undefined ? "—" : fmtInt(p.read))}</td>
        <td class="num" data-field="lag">${esc(p.lag === undefined || p.lag === null ? "—" : fmtInt(p.lag))}</td>
        <td class="num" data-field="rate">${esc(p.events_per_second === undefined ? "—" : fmtInt(p.events_per_second))}</td>
        <td data-field="watermark">${esc(mark === undefined ? "—" : mark === "idle" ? "idle" : isoTime(mark))}</td>
      </tr>`;
  });
  return `<dl class="facts">${dl}</dl><div class="scroll"><table id="workers-table" class="data">
      <caption class="sr-only">Each slice of the pipeline's key groups, by the worker that runs it</caption>
      <thead><tr><th scope="col">Slice</th><th scope="col">Worker</th><th scope="col" class="num">Read to</th>
        <th scope="col" class="num">Behind</th><th scope="col" class="num">Events/s</th><th scope="col">Watermark</th></tr></thead>
      <tbody>${rows.join("")}</tbody></table></div>`;
}

function scheduleText(r) {
  if (!r) return "—";
  const steps = Array.isArray(r.steps) ? r.steps : [];
  if (!steps.length) return "manual, one step at a time";
  return `${steps.join(" → ")} %, every ${fmtDuration(r.every_ms)}`;
}

function policyText(p) {
  if (!p) return "—";
  return `traps per call over ${fmtRate(p.max_trap_rate)} or errors per call over ${fmtRate(p.max_error_rate)}`
    + ` within ${fmtDuration(p.window_ms)}, after ${num(p.min_calls)} calls`;
}

function versionsTableHTML(s) {
  const versions = Array.isArray(s.versions) ? s.versions : [];
  const total = sumOf(versions, "events");
  const live = s.operator && s.operator.version;
  const candidate = s.rollout && s.rollout.candidate;
  const rows = versions.map((v) => {
    const role = v.version === live ? "live" : v.version === candidate ? "candidate" : "";
    const calls = num(v.calls);
    const compared = num(v.shadow_compared);
    const timedCalls = num(v.timed_calls);
    const diff = compared > 0
      ? `${percentOf(num(v.shadow_differed), compared, 1)} (${fmtInt(v.shadow_differed)}/${fmtInt(compared)})` : "—";
    const latency = timedCalls > 0 ? `${fmtNum(num(v.timed_call_ns) / timedCalls / 1000)} µs` : "—";
    return `<tr data-version="${esc(v.version)}">
        <th scope="row">${esc(v.version)}${role ? ` <span class="tag tag-${role}">${role}</span>` : ""}</th>
        <td class="num" data-field="share">${esc(percentOf(num(v.events), total, 1))}</td>
        <td class="num" data-field="events">${esc(fmtInt(v.events))}</td>
        <td class="num" data-field="calls">${esc(fmtInt(calls))}</td>
        <td class="num" data-field="carried" data-value="${esc(String(num(v.carried_windows)))}">${esc(fmtInt(v.carried_windows))}</td>
        <td class="num" data-field="errors">${esc(fmtInt(v.errors))}</td>
        <td class="num" data-field="traps">${esc(fmtInt(v.traps))}</td>
        <td class="num" data-field="error_rate">${esc(percentOf(num(v.errors), calls, 2))}</td>
        <td class="num" data-field="trap_rate">${esc(percentOf(num(v.traps), calls, 2))}</td>
        <td class="num" data-field="shadow_diff">${esc(diff)}</td>
        <td class="num" data-field="latency">${esc(latency)}</td>
      </tr>`;
  });
  return `<div class="scroll"><table id="versions-table" class="data">
      <caption class="sr-only">Operator versions, counted since the server started the pipeline</caption>
      <thead><tr>
        <th scope="col">Version</th><th scope="col" class="num">Traffic</th><th scope="col" class="num">Events</th>
        <th scope="col" class="num">Calls</th>
        <th scope="col" class="num" title="Windows added or finished in calls carrying many windows (contract 0.3, or the native count-sum): the fast path">Windows carried</th>
        <th scope="col" class="num">Errors</th><th scope="col" class="num">Traps</th>
        <th scope="col" class="num">Error rate</th><th scope="col" class="num">Trap rate</th>
        <th scope="col" class="num">Shadow differs</th><th scope="col" class="num">Mean call</th>
      </tr></thead>
      <tbody>${rows.join("") || '<tr><td colspan="11" class="empty">No operator calls counted yet.</td></tr>'}</tbody>
    </table></div>`;
}

function rolloutActionsHTML(s) {
  const r = s.rollout;
  if (!r) return "";
  const promote = r.rolled_back
    ? ' disabled title="The rollout was rolled back: start a new rollout to promote."' : "";
  return `<button type="button" id="rollout-promote" class="primary"${promote}>Promote ${esc(r.candidate)}</button>
    <button type="button" id="rollout-back" class="danger">Roll back</button>`;
}

async function pollRegistry(view) {
  const operators = await api("GET", "/v1/operators", undefined, { signal: view.abort.signal });
  if (!current(view)) return;
  view.operators = Array.isArray(operators) ? operators : [];
  renderVersionChoice(view);
  renderReplayChoice(view);
}

/** The versions one may roll out: the live operator's other registry versions. */
function renderVersionChoice(view) {
  const select = $("rollout-version");
  const live = view.status && view.status.operator;
  if (!select || !live) return;
  const versions = view.operators
    .filter((o) => o.name === live.name && o.version !== live.version)
    .map((o) => String(o.version))
    .sort(compareVersions);
  const key = JSON.stringify([live.name, versions]);
  if (key === view.versionsKey) return;
  view.versionsKey = key;
  const chosen = select.value;
  select.innerHTML = versions.length
    ? versions.map((v) => `<option value="${esc(v)}">${esc(v)}</option>`).join("")
    : `<option value="">no other version of ${esc(live.name)}</option>`;
  const candidate = view.status.rollout && view.status.rollout.candidate;
  if (versions.includes(chosen)) select.value = chosen;
  else if (versions.includes(candidate)) select.value = candidate;
  select.disabled = versions.length === 0;
}

/** The `operator` field of a rollout: the live operator's name unless it is the aggregate. */
function rolloutOperatorField(view) {
  const live = view.status && view.status.operator;
  const spec = view.spec;
  if (!live || !spec || !Array.isArray(spec.operators)) return undefined;
  const declared = spec.operators.find((o) => o.name === live.name);
  return declared && declared.kind === "aggregate" ? undefined : live.name;
}

async function rolloutStep(view, shadow) {
  const live = view.status && view.status.operator;
  const version = $("rollout-version").value;
  if (!live || !version) {
    throw new Error(`There is no version to roll out: upload another version of ${live ? live.name : "the operator"} first.`);
  }
  let percent = 100;
  if (!shadow) {
    const text = $("rollout-percent-input").value.trim();
    percent = Number(text);
    if (text === "" || !Number.isInteger(percent) || percent < 0 || percent > 100) {
      throw new Error("The percent must be a whole number from 0 to 100.");
    }
  }
  const question = shadow
    ? `Run ${live.name}@${version} in shadow on ${view.name}? It gets a copy of every key's events and serves no traffic.`
    : `Send ${percent} % of the keys of ${view.name} to ${live.name}@${version}? It takes effect at the next checkpoint.`;
  if (!window.confirm(question)) return;
  const body = { version, percent };
  if (shadow) body.shadow = true;
  const operator = rolloutOperatorField(view);
  if (operator) body.operator = operator;
  await api("POST", `${pipelinePath(view.name)}/rollout`, body);
  view.refresh();
}

async function promote(view) {
  const r = view.status && view.status.rollout;
  if (!r) return;
  const question = `Promote ${r.operator || "the operator"}@${r.candidate} to the live version of ${view.name}? Every key goes to it at the next checkpoint.`;
  if (!window.confirm(question)) return;
  await api("POST", `${pipelinePath(view.name)}/promote`);
  view.refresh();
}

async function rollBack(view) {
  const live = view.status && view.status.operator;
  const question = `Roll back ${view.name}? Every key goes back to ${live ? `${live.name}@${live.version}` : "the live version"} at the next checkpoint.`;
  if (!window.confirm(question)) return;
  await api("POST", `${pipelinePath(view.name)}/rollback`, { reason: ROLLBACK_REASON });
  view.refresh();
}

// -- Savepoints and replays --

async function pollSavepoints(view) {
  const listed = await api("GET", `${pipelinePath(view.name)}/savepoints`, undefined, { signal: view.abort.signal });
  if (!current(view)) return;
  view.savepoints = Array.isArray(listed) ? listed : [];
  replaceHTML(view, $("savepoints-info"), savepointsHTML(view.savepoints));
  renderReplayChoice(view);
}

/** The savepoints, newest first: what each holds, and (for admins) a delete button. */
function savepointsHTML(saved) {
  if (!saved.length) return '<p class="muted">No savepoint yet.</p>';
  const rows = [...saved]
    .sort((a, b) => num(b.committed_at_ms) - num(a.committed_at_ms))
    .map((s) => {
      if (s.damaged) {
        return `<tr data-savepoint="${esc(s.name)}"><th scope="row">${esc(s.name)}</th>
          <td colspan="4" class="bad-text">damaged: ${esc(s.damaged)}</td>${deleteCellHTML(s)}</tr>`;
      }
      const slices = Array.isArray(s.slices) ? s.slices.length : 0;
      return `<tr data-savepoint="${esc(s.name)}">
          <th scope="row">${esc(s.name)}</th>
          <td class="num" data-field="events">${esc(fmtInt(num(s.events)))}</td>
          <td data-field="watermark">${esc(s.watermark === null || s.watermark === undefined ? "—" : isoTime(s.watermark))}</td>
          <td class="num" data-field="slices">${esc(slices ? fmtInt(slices) : "—")}</td>
          <td class="num" data-field="bytes">${esc(fmtBytes(num(s.bytes)))}</td>
          ${deleteCellHTML(s)}
        </tr>`;
    });
  return `<div class="scroll"><table id="savepoints-table" class="data">
      <caption class="sr-only">The pipeline's savepoints, newest first</caption>
      <thead><tr><th scope="col">Name</th><th scope="col" class="num">Events</th><th scope="col">Watermark</th>
        <th scope="col" class="num">Slices</th><th scope="col" class="num">Size</th>${isAdmin() ? '<th scope="col"><span class="sr-only">Delete</span></th>' : ""}</tr></thead>
      <tbody>${rows.join("")}</tbody></table></div>`;
}

function deleteCellHTML(s) {
  if (!isAdmin()) return "";
  return `<td><button type="button" class="danger small" data-delete-savepoint="${esc(s.name)}">Delete</button></td>`;
}

async function takeSavepoint(view) {
  const name = $("savepoint-name").value.trim();
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(name) || name.includes("..")) {
    throw new Error("A savepoint's name is 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit.");
  }
  await api("POST", `${pipelinePath(view.name)}/savepoints`, { name });
  $("savepoint-name").value = "";
  view.refreshSavepoints();
}

async function deleteSavepoint(view, name) {
  if (!window.confirm(`Delete the savepoint ${name} of ${view.name}? This cannot be undone.`)) return;
  await api("DELETE", `${pipelinePath(view.name)}/savepoints/${encodeURIComponent(name)}`);
  view.refreshSavepoints();
}

/** The replay's choices: the aggregate's versions in the registry, and the savepoints. */
function renderReplayChoice(view) {
  const live = view.status && view.status.operator;
  const a = $("replay-a");
  if (!a || !live) return;
  const versions = (view.operators || [])
    .filter((o) => o.name === live.name)
    .map((o) => String(o.version))
    .sort(compareVersions);
  const saved = (view.savepoints || []).filter((s) => !s.damaged).map((s) => s.name);
  const key = JSON.stringify([live.name, versions, saved]);
  if (key === view.replayKey) return;
  view.replayKey = key;
  const options = versions.map((v) => `<option value="${esc(v)}">${esc(v)}</option>`).join("");
  for (const [id, preferred] of [["replay-a", live.version], ["replay-b", view.status.rollout && view.status.rollout.candidate]]) {
    const select = $(id);
    const chosen = select.value;
    select.innerHTML = options || '<option value="">no version</option>';
    if (versions.includes(chosen)) select.value = chosen;
    else if (versions.includes(preferred)) select.value = preferred;
  }
  const from = $("replay-savepoint");
  const chosen = from.value;
  from.innerHTML = '<option value="">the start</option>' +
    saved.map((s) => `<option value="${esc(s)}">savepoint ${esc(s)}</option>`).join("");
  if (saved.includes(chosen)) from.value = chosen;
}

async function runReplay(view) {
  const versions = [$("replay-a").value, $("replay-b").value];
  if (!versions[0] || !versions[1]) throw new Error("Choose two versions to compare.");
  const keys = $("replay-keys").value.split(",").map((k) => k.trim()).filter(Boolean);
  if (!keys.length) throw new Error("Name at least one key to replay.");
  const body = { versions, keys };
  const savepoint = $("replay-savepoint").value;
  if (savepoint) body.savepoint = savepoint;
  $("replay-result").innerHTML = '<p class="muted">Replaying…</p>';
  const answer = await api("POST", `${pipelinePath(view.name)}/replay`, body);
  if (!current(view)) return;
  $("replay-result").innerHTML = replayHTML(answer);
}

/** A replay's answer: each window of the keys, what A and B gave, the differences marked. */
function replayHTML(answer) {
  const rows = Array.isArray(answer && answer.rows) ? answer.rows : [];
  const [a, b] = answer.versions || ["A", "B"];
  const shown = (v) => (v === null || v === undefined ? "—" : JSON.stringify(v));
  const body = rows.map((r) => `<tr data-key="${esc(r.key)}" data-window="${esc(r.window_start)}" data-same="${r.same ? "yes" : "no"}">
      <th scope="row">${esc(r.key)}</th>
      <td data-field="window">${esc(isoTime(r.window_start))}</td>
      <td data-field="a"><code>${esc(truncate(shown(r.a), RAW_MAX))}</code></td>
      <td data-field="b"><code>${esc(truncate(shown(r.b), RAW_MAX))}</code></td>
      <td data-field="same">${r.same ? "same" : '<strong class="bad-text">differs</strong>'}</td>
    </tr>`);
  const summary = `${fmtInt(rows.length)} window(s), ${fmtInt(num(answer.differing))} differing${answer.truncated ? " (truncated)" : ""}`;
  return `<p id="replay-summary" class="note" data-differing="${esc(num(answer.differing))}">${esc(summary)}</p>
    <div class="scroll"><table id="replay-table" class="data">
      <caption class="sr-only">Each window of the keys replayed, through version ${esc(a)} and ${esc(b)}</caption>
      <thead><tr><th scope="col">Key</th><th scope="col">Window</th><th scope="col">${esc(a)}</th>
        <th scope="col">${esc(b)}</th><th scope="col">Same?</th></tr></thead>
      <tbody>${body.join("") || '<tr><td colspan="5" class="empty">No window of these keys.</td></tr>'}</tbody></table></div>`;
}

// -- Dead letters --

async function pollDeadLetters(view) {
  const body = $("dead-letters-body");
  let letters;
  try {
    letters = await api("GET", `${pipelinePath(view.name)}/dead-letters?limit=20`, undefined, { signal: view.abort.signal });
  } catch (e) {
    if (isAbort(e) || e.status === 401 || !current(view)) return;
    replaceHTML(view, body, `<tr><td colspan="3" class="empty">Could not read the dead letters: ${esc(e.message)}</td></tr>`);
    return;
  }
  if (!current(view)) return;
  const rows = (Array.isArray(letters) ? letters : []).slice().reverse().map(deadLetterHTML);
  replaceHTML(view, body, rows.join("") || '<tr><td colspan="3" class="empty">No dead letters.</td></tr>');
}

function deadLetterHTML(d) {
  const raw = String((d && d.raw) ?? "");
  const cause = d && d.cause ? ` <span class="tag">${esc(d.cause)}</span>` : "";
  return `<tr class="dead-letter">
      <td>${esc(d && d.reason)}${cause}</td>
      <td class="num">${esc(d && d.line !== null && d.line !== undefined ? d.line : "—")}</td>
      <td><code class="raw" title="${esc(raw)}">${esc(truncate(raw, RAW_MAX))}</code></td>
    </tr>`;
}

// -- Results tail (Server-Sent Events read with fetch, to send the token) --

async function tailResults(view) {
  const say = (text) => {
    if (current(view)) setText("results-state", text);
  };
  while (current(view)) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (view.lastEventId !== null) headers["Last-Event-ID"] = view.lastEventId;
      say(view.lastEventId === null ? "connecting…" : "reconnecting…");
      const response = await api("GET", `${pipelinePath(view.name)}/results`, undefined, {
        raw: true,
        signal: view.abort.signal,
        headers,
      });
      say("live");
      await readEvents(view, response.body);
      say(`the stream ended; reconnecting in ${RECONNECT_MS / 1000} s`);
    } catch (e) {
      if (isAbort(e) || !current(view) || e.status === 401) return;
      if (e.status === 409) {
        say(e.message); // the results do not go to a file: nothing to stream
        return;
      }
      say(`${e.message}; retrying in ${RECONNECT_MS / 1000} s`);
    }
    await sleep(RECONNECT_MS, view.abort.signal);
  }
}

async function readEvents(view, body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done || !current(view)) return;
    // Line ends may be CRLF, LF or CR; a CR at the very end may be half of a CRLF.
    buffer = (buffer + decoder.decode(value, { stream: true })).replace(/\r\n|\r(?!$)/g, "\n");
    const blocks = buffer.split("\n\n");
    buffer = blocks.pop();
    const data = blocks.map((block) => parseEvent(view, block)).filter((d) => d !== null);
    if (data.length) addResults(view, data);
  }
}

/** One SSE event: remembers its `id:`, answers its `data:` (null for none). */
function parseEvent(view, block) {
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "id" && !value.includes("\0")) view.lastEventId = value;
  }
  return data.length ? data.join("\n") : null;
}

function addResults(view, texts) {
  const fresh = texts.slice(-TAIL_SIZE).map(parseRecord).reverse();
  view.tail = fresh.concat(view.tail).slice(0, TAIL_SIZE);
  replaceHTML(view, $("results-tail"), view.tail.map(resultHTML).join(""));
}

function parseRecord(text) {
  try {
    return JSON.parse(text);
  } catch {
    return { unparsed: text };
  }
}

function resultHTML(r) {
  if (!r || typeof r !== "object") {
    return `<li class="result" data-key=""><code class="result-value">${esc(truncate(JSON.stringify(r), 500))}</code></li>`;
  }
  const key = r.key === null || r.key === undefined ? "" : String(r.key);
  const windowed = typeof r.window_start === "number";
  const range = windowed
    ? `<span class="result-window" title="${esc(`${isoTime(r.window_start)} – ${isoTime(r.window_end)}`)}">${
      esc(`${clockTime(r.window_start)}–${clockTime(r.window_end)}`)}</span>`
    : "";
  let value = r.value;
  if (!("value" in r)) {
    value = { ...r };
    delete value.id;
  }
  const text = "unparsed" in r ? r.unparsed : JSON.stringify(value);
  const version = r.operator_version ? ` <span class="tag">${esc(r.operator_version)}</span>` : "";
  return `<li class="result" data-key="${esc(key)}">
      <span class="result-key">${esc(key || "—")}</span>${range}
      <code class="result-value">${esc(truncate(text, 500))}</code>${version}
    </li>`;
}

// ---- Operator registry (#/operators) -----------------------------------------------------

function enterOperators() {
  const view = newView("operators", { file: null, refresh: () => {} });
  document.title = "Operators · Weir";
  const admin = canDeploy();
  $("main").innerHTML = `
    <div class="page-head"><h1 tabindex="-1">Operators</h1></div>
    ${admin ? uploadFormHTML() : ""}
    <div class="card flush section"><div class="scroll">
      <table id="operators" class="data">
        <caption class="sr-only">Operator versions in the registry, by name and version</caption>
        <thead><tr>
          <th scope="col">Name</th><th scope="col">Version</th><th scope="col">Digest</th>
          <th scope="col">World</th><th scope="col" class="num">Size</th><th scope="col">Uploaded</th>
          <th scope="col">Used by</th>${isAdmin() ? '<th scope="col"><span class="sr-only">Actions</span></th>' : ""}
        </tr></thead>
        <tbody id="operators-body"><tr><td colspan="${isAdmin() ? 8 : 7}" class="empty">Loading…</td></tr></tbody>
      </table>
    </div></div>`;
  if (admin) wireOperatorActions(view);
  view.refresh = every(view, OPERATORS_MS, "poll:operators", () => pollOperators(view));
}

async function pollOperators(view) {
  const signal = view.abort.signal;
  const [operators, pipelines] = await Promise.all([
    api("GET", "/v1/operators", undefined, { signal }),
    // "Used by" is a convenience: the registry is shown even if the pipelines cannot be read.
    api("GET", "/v1/pipelines", undefined, { signal }).catch((e) => {
      if (isAbort(e) || e.status === 401) throw e;
      return null;
    }),
  ]);
  if (!current(view)) return;
  const users = pipelines ? usersByOperator(pipelines) : null;
  const sorted = (Array.isArray(operators) ? operators : [])
    .slice()
    .sort((a, b) => byName(a, b) || compareVersions(a.version, b.version));
  const columns = isAdmin() ? 8 : 7;
  const empty = `<tr><td colspan="${columns}" class="empty">The registry is empty.</td></tr>`;
  replaceHTML(view, $("operators-body"), sorted.map((o) => operatorRowHTML(o, users)).join("") || empty);
}

/** "name@version" → [{pipeline, role}] from every operator of the pipelines' chains
 *  (`uses`: enrichers, aggregate, stages) and the rollout candidate. */
function usersByOperator(pipelines) {
  const users = new Map();
  const add = (key, use) => {
    if (!users.has(key)) users.set(key, []);
    users.get(key).push(use);
  };
  for (const p of Array.isArray(pipelines) ? pipelines : []) {
    const chain = Array.isArray(p.uses) ? p.uses : p.operator ? [`${p.operator.name}@${p.operator.version}`] : [];
    for (const label of chain) add(String(label), { pipeline: p.name, role: "live" });
    const r = p.rollout;
    const name = (r && r.operator) || (p.operator && p.operator.name);
    if (r && r.candidate && name) add(`${name}@${r.candidate}`, { pipeline: p.name, role: "candidate" });
  }
  return users;
}

function operatorRowHTML(o, users) {
  const id = `${o.name}@${o.version}`;
  const digest = String(o.digest ?? "");
  const short = digest.startsWith("sha256:") ? digest.slice(7, 19) : digest.slice(0, 12);
  const uploaded = isoTime(o.uploaded_at_ms);
  const uses = users ? users.get(id) || [] : null;
  const usedBy = uses === null
    ? '<span class="muted">?</span>'
    : uses.length
      ? `<span class="used-by">${uses.map((u) => `<a href="${esc(pipelineHref(u.pipeline))}">${esc(u.pipeline)}</a>${
        u.role === "candidate" ? ' <span class="tag tag-candidate">candidate</span>' : ""}`).join(", ")}</span>`
      : '<span class="muted">—</span>';
  const remove = isAdmin()
    ? `<td class="actions"><button type="button" class="delete-operator danger small" data-name="${esc(o.name)}"
        data-version="${esc(o.version)}" data-focus-key="${esc(`delete:${id}`)}" aria-label="Delete ${esc(id)}">Delete</button></td>`
    : "";
  return `<tr data-operator="${esc(id)}">
      <td data-field="name">${esc(o.name)}</td>
      <td data-field="version">${esc(o.version)}</td>
      <td data-field="digest"><code title="${esc(digest)}">${esc(short)}</code></td>
      <td data-field="world">${esc(o.world ?? "—")}</td>
      <td data-field="size" class="num">${esc(fmtBytes(o.size))}</td>
      <td data-field="uploaded"><time datetime="${esc(uploaded)}">${esc(uploaded)}</time></td>
      <td data-field="used_by">${usedBy}</td>${remove}
    </tr>`;
}

function uploadFormHTML() {
  return `
    <form id="upload-form" class="card upload" novalidate aria-labelledby="upload-heading">
      <h2 id="upload-heading">Upload a component</h2>
      <div class="upload-grid">
        <div id="upload-drop" class="drop">
          <p id="upload-drop-text" class="drop-text">Drop a .wasm component here</p>
          <label for="upload-file">or choose a file</label>
          <input type="file" id="upload-file" accept=".wasm,application/wasm">
        </div>
        <div class="upload-fields">
          <div class="field">
            <label for="upload-name">Name</label>
            <input id="upload-name" autocomplete="off" spellcheck="false" autocapitalize="off" placeholder="count-sum">
          </div>
          <div class="field">
            <label for="upload-version">Version</label>
            <input id="upload-version" autocomplete="off" spellcheck="false" autocapitalize="off" placeholder="1.0.0">
          </div>
          <div><button type="submit" id="upload" class="primary">Upload</button></div>
        </div>
      </div>
      <p id="upload-status" class="upload-status" role="status" aria-live="polite"></p>
    </form>`;
}

function wireOperatorActions(view) {
  const drop = $("upload-drop");
  for (const type of ["dragenter", "dragover"]) {
    drop.addEventListener(type, (event) => {
      event.preventDefault();
      if (event.dataTransfer) event.dataTransfer.dropEffect = "copy";
      drop.classList.add("over");
    });
  }
  drop.addEventListener("dragleave", (event) => {
    if (!drop.contains(event.relatedTarget)) drop.classList.remove("over");
  });
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const files = event.dataTransfer && event.dataTransfer.files;
    if (!files || !files.length) return;
    try {
      $("upload-file").files = files; // keeps the file input in step where the browser allows it
    } catch {
      // the dropped file is kept in the view either way
    }
    chooseFile(view, files[0]);
  });
  $("upload-file").addEventListener("change", (event) => {
    const file = event.target.files && event.target.files[0];
    if (file) chooseFile(view, file);
  });
  $("upload-form").addEventListener("submit", (event) => {
    event.preventDefault();
    act($("upload"), () => upload(view));
  });
  $("operators").addEventListener("click", (event) => {
    const button = event.target.closest("button.delete-operator");
    if (button) act(button, () => deleteOperator(view, button.dataset.name, button.dataset.version));
  });
}

function chooseFile(view, file) {
  view.file = file;
  setText("upload-drop-text", `${file.name} (${fmtBytes(file.size)})`);
  const name = $("upload-name");
  if (!name.value.trim()) name.value = guessName(file.name);
  setText("upload-status", "");
}

/** An operator name from a file name: without .wasm, lower case, other characters as "-". */
function guessName(fileName) {
  return fileName.replace(/\.wasm$/i, "").toLowerCase().replace(/[^a-z0-9_-]/g, "-");
}

async function upload(view) {
  const file = view.file || ($("upload-file").files || [])[0];
  const name = $("upload-name").value.trim();
  const version = $("upload-version").value.trim();
  setText("upload-status", "");
  if (!file) throw new Error("Choose or drop a .wasm component to upload.");
  if (!name || !version) throw new Error("Give the operator a name and a version.");
  await api("POST", `/v1/operators/${encodeURIComponent(name)}/${encodeURIComponent(version)}`, file, {
    type: "application/wasm",
  });
  if (!current(view)) return;
  setText("upload-status", `uploaded ${name}@${version}`);
  view.file = null;
  $("upload-file").value = "";
  $("upload-version").value = "";
  setText("upload-drop-text", "Drop a .wasm component here");
  view.refresh();
}

async function deleteOperator(view, name, version) {
  if (!window.confirm(`Delete the operator ${name}@${version} from the registry? This cannot be undone.`)) return;
  await api("DELETE", `/v1/operators/${encodeURIComponent(name)}/${encodeURIComponent(version)}`);
  view.refresh();
}

// ---- Start -------------------------------------------------------------------------------

function start() {
  $("error-dismiss").addEventListener("click", dismissError);
  $("skip-link").addEventListener("click", (event) => {
    event.preventDefault(); // "#main" would be taken for a route
    $("main").focus();
  });
  window.addEventListener("hashchange", route);
  // A file dropped outside the drop zone must not make the browser leave the console.
  window.addEventListener("dragover", (event) => {
    if (!(event.target instanceof Element && event.target.closest("#upload-drop"))) {
      event.preventDefault();
      if (event.dataTransfer) event.dataTransfer.dropEffect = "none";
    }
  });
  window.addEventListener("drop", (event) => {
    if (!(event.target instanceof Element && event.target.closest("#upload-drop"))) event.preventDefault();
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (!saved) {
    renderSignIn("");
    return;
  }
  $("main").innerHTML = '<p class="muted">Signing in…</p>';
  signIn(saved).catch((e) => {
    if (e.status !== 401) renderSignIn(e.message);
  });
}

start();
