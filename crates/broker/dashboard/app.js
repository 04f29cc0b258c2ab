// The Queen-rs dashboard: a hash-routed page over the broker's own JSON API. Every value from
// the broker is put into the page as text (never as HTML), since names are user input. With
// auth on, the token entered on the page is kept in this tab (sessionStorage) and sent as
// `Authorization: Bearer` on every call; a 401 asks for it again.
"use strict";

const REFRESH_MS = 2000;
const PAGE = 50;
const TOKEN_KEY = "queen.token";
const rates = { pushed: [], popped: [], last: null };
let timer = null;

// ---------------------------------------------------------------- helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick" || k === "onsubmit" || k === "onchange") node[k] = v;
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function text(v) {
  if (v === null || v === undefined) return "–";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

function table(headers, rows, numeric = []) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h, i) => el("th", numeric.includes(i) ? { class: "num" } : {}, h)))),
    el("tbody", {}, rows.map(r => el("tr", {}, r.map((c, i) =>
      el("td", numeric.includes(i) ? { class: "num" } : {}, c instanceof Node ? c : text(c)))))));
}

function link(href, label) { return el("a", { href }, label); }
function seg(s) { return encodeURIComponent(s); }

// ---------------------------------------------------------------- the broker's API

function token() { return sessionStorage.getItem(TOKEN_KEY); }

function withToken(headers) {
  const t = token();
  return t ? { ...headers, authorization: `Bearer ${t}` } : headers;
}

// One call; a refusal throws an Error carrying the HTTP status and the broker's `error` text.
async function api(path, options = {}) {
  const resp = await fetch(path, { ...options, headers: withToken(options.headers) });
  const body = resp.status === 204 ? null : await resp.json().catch(() => null);
  if (!resp.ok) {
    // The key-value, lock and timer routes add a `detail` sentence to their code.
    const why = body && (body.detail ? `${body.error}: ${body.detail}` : body.error);
    const e = new Error(why || `HTTP ${resp.status}`);
    e.status = resp.status;
    throw e;
  }
  return body;
}

// An action's outcome in the footer: its refusal (a 403 names the role needed), or a fresh
// token entry when the broker did not accept the token at all.
async function act(label, call, describeOk) {
  try {
    const r = await call();
    status(`${label}: ${describeOk(r)}`);
  } catch (e) {
    if (e.status === 401) return askToken(e.message);
    status(`${label} failed: ${e.message}`, true);
  }
  refresh();
}

function post(path, body) {
  return api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

function render(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

// The footer line: the outcome of the last action for a few seconds, else the refresh time.
let notice = { msg: "", bad: false, at: 0 };

function status(msg, bad = false) {
  notice = { msg, bad, at: Date.now() };
  showStatus();
}

function showStatus() {
  const s = document.getElementById("status");
  const fresh = Date.now() - notice.at < 5000;
  s.textContent = fresh ? notice.msg : `updated ${new Date().toLocaleTimeString()}`;
  s.className = fresh && notice.bad ? "error" : "";
}

// `more`: whether a next page exists (defaults to what the total implies).
function pager(total, page, go, more) {
  const pages = Math.max(1, Math.ceil(total / PAGE));
  const hasNext = more === undefined ? page + 1 < pages : more;
  return el("div", { class: "pager" },
    el("button", { "data-action": "prev", onclick: () => go(page - 1), ...(page <= 0 ? { disabled: "" } : {}) }, "‹ prev"),
    el("span", {}, `page ${page + 1} of ${pages} (${total})`),
    el("button", { "data-action": "next", onclick: () => go(page + 1), ...(hasNext ? {} : { disabled: "" }) }, "next ›"));
}

function chart(series, label) {
  const w = 360, h = 60, max = Math.max(1, ...series);
  const pts = series.map((v, i) => `${(i * w) / Math.max(1, series.length - 1)},${h - (v / max) * (h - 4) - 2}`);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart"); svg.setAttribute("width", w); svg.setAttribute("height", h);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#6d28d9"); line.setAttribute("stroke-width", "2");
  svg.append(line);
  const last = series.length ? series[series.length - 1] : 0;
  return el("div", { class: "card" }, el("span", { class: "muted" }, label), el("b", {}, `${last.toFixed(1)}/s`), svg);
}

// Samples the broker's counters so the overview can show in/out rates.
async function sampleRates() {
  const m = await api("/metrics");
  const now = performance.now();
  if (rates.last) {
    const dt = (now - rates.last.t) / 1000;
    for (const k of ["pushed", "popped"]) {
      rates[k].push(Math.max(0, (m.messages[k] - rates.last[k]) / dt));
      if (rates[k].length > 60) rates[k].shift();
    }
  }
  rates.last = { t: now, pushed: m.messages.pushed, popped: m.messages.popped };
  return m;
}

// ---------------------------------------------------------------- pages

async function overview() {
  const [ov, qs, groups] = await Promise.all([
    api("/api/v1/resources/overview"), api("/api/v1/resources/queues"), api("/api/v1/consumer-groups"), sampleRates()]);
  const lag = {};
  for (const g of groups) for (const q of g.queues) (lag[q.queue] ||= []).push(`${g.name}: ${q.pending}`);
  const m = ov.messages || {};
  render(
    el("h1", {}, "Overview"),
    el("div", { class: "cards" },
      [["queues", ov.queues], ["partitions", ov.partitions], ["groups", ov.consumerGroups],
       ["pending", m.pending], ["processing", m.processing], ["dead letters", m.deadLetter]]
        .map(([k, v]) => el("div", { class: "card", "data-stat": k }, el("span", { class: "muted" }, k), el("b", {}, text(v)))),
      chart(rates.pushed, "in (pushed)"), chart(rates.popped, "out (popped)")),
    el("h2", {}, "Queues"),
    table(["queue", "partitions", "total", "pending", "processing", "dead letters", "group lag"],
      qs.queues.map(q => [link(`#/queue/${seg(q.name)}`, q.name), q.partitions, q.messages.total,
        q.messages.pending, q.messages.processing, q.messages.deadLetter, (lag[q.name] || []).join(", ") || "–"]),
      [1, 2, 3, 4, 5]));
}

// The broker pages a queue's partitions by name (docs/wire.md §14): state.cursors[i] is the
// name page i starts after, so prev and next never skip or repeat a partition. Its pending
// timers are paged the same way, by key (docs/wire.md §22.2), in state.timerCursors.
async function queuePage(name, page = 0) {
  const params = new URLSearchParams({ partitionLimit: PAGE, partitionAfter: state.cursors[page] || "" });
  const [q, timers] = await Promise.all([api(`/api/v1/resources/queues/${seg(name)}?${params}`),
    api(`/api/v1/timers/${seg(name)}?${keysetParams(state.timerCursors, state.timerPage)}`)]);
  const { next, total } = q.partitionPage;
  if (next) state.cursors[page + 1] = next;
  if (timers.nextAfter) state.timerCursors[state.timerPage + 1] = timers.nextAfter;
  const groups = q.consumerGroups || [];
  const seekGroup = el("select", { name: "group" }, groups.map(g => el("option", { value: g.name }, g.name)));
  const seekTs = el("input", { name: "timestamp", placeholder: "ISO timestamp, or empty for end" });
  const optKey = el("input", { name: "key", placeholder: "option, e.g. leaseTime" });
  const optVal = el("input", { name: "value", placeholder: "value" });
  render(
    el("h1", {}, `Queue ${q.name}`),
    el("div", { class: "cards" }, [["partitions", total], ["total", q.messages.total],
      ["pending", q.messages.pending], ["processing", q.messages.processing], ["dead letters", q.messages.deadLetter]]
      .map(([k, v]) => el("div", { class: "card", "data-stat": k }, el("span", { class: "muted" }, k), el("b", {}, text(v))))),
    el("h2", {}, "Consumer groups"),
    table(["group", "pending", "active leases"], groups.map(g => [g.name, g.pending, g.activeLeases]), [1, 2]),
    groups.length ? el("form", { class: "inline", onsubmit: e => { e.preventDefault(); seek(name, seekGroup.value, seekTs.value); } },
      "Seek", seekGroup, seekTs, el("button", { type: "submit" }, "seek")) : null,
    el("h2", {}, "Partitions"),
    pager(total, page, p => { state.page = p; refresh(); }, !!next),
    table(["partition", "id", "pending", "processing", "last offset", "last activity"],
      q.partitions.map(p => [p.name, p.id, p.messages.pending, p.messages.processing, p.lastOffset, p.lastActivity]), [2, 3, 4]),
    timerSection(name, timers),
    el("h2", {}, "Options"),
    table(["option", "value"], Object.entries(q.config || {}).map(([k, v]) => [k, v])),
    el("form", { class: "inline", onsubmit: e => { e.preventDefault(); configure(name, optKey.value, optVal.value); } },
      "Set", optKey, "=", optVal, el("button", { type: "submit" }, "configure")),
    el("p", {}, link(`#/dlq/${seg(name)}`, "Dead letters of this queue")));
}

// `limit` and, past the first page, the key page `page` starts after.
function keysetParams(cursors, page) {
  const params = new URLSearchParams({ limit: PAGE });
  if (cursors[page]) params.set("after", cursors[page]);
  return params;
}

// A pager for a listing paged by key: its length is unknown, only whether a next page exists.
function keysetPager(name, page, more, go) {
  return el("div", { class: "pager" },
    el("button", { "data-action": `${name}-prev`, onclick: () => go(page - 1), ...(page <= 0 ? { disabled: "" } : {}) }, "‹ prev"),
    el("span", {}, `page ${page + 1}`),
    el("button", { "data-action": `${name}-next`, onclick: () => go(page + 1), ...(more ? {} : { disabled: "" }) }, "next ›"));
}

// The queue's pending timers: each becomes a message of the queue when due.
function timerSection(queue, timers) {
  return el("section", { id: "timers" },
    el("h2", {}, "Timers"),
    timers.rows.length || state.timerPage ? table(
      ["timer key", "partition", "deliver at", "transaction id", "attempts", "firing", ""],
      timers.rows.map(t => [t.timerKey, t.partition, t.deliverAt, t.txn, t.attempts, t.firing ? "yes" : "no",
        el("button", { class: "danger", "data-action": "cancel-timer", onclick: () => cancelTimer(queue, t.timerKey) }, "cancel")]),
      [4]) : el("p", { class: "muted" }, "No pending timers."),
    timers.truncated || state.timerPage ? keysetPager("timers", state.timerPage, timers.truncated, p => { state.timerPage = p; refresh(); }) : null);
}

function cancelTimer(queue, key) {
  if (!confirm(`Cancel timer ${key} of ${queue}? Its message will not be delivered.`)) return;
  return act(`cancel ${key}`, () => api(`/api/v1/timers/${seg(queue)}/${seg(key)}`, { method: "DELETE" }),
    r => r.status === "cancelled" ? "cancelled" : r.status === "absent" ? "already gone (fired or cancelled)" : r.status);
}

// The key-value store, browsed by namespace and key prefix (the store lists keys by prefix
// only: docs/wire.md §20.1), a page at a time; values shown as JSON.
async function kvPage(ns, prefix) {
  const nsIn = el("input", { id: "kv-ns", placeholder: "namespace", value: ns || "" });
  const prefixIn = el("input", { id: "kv-prefix", placeholder: "key prefix", value: prefix || "" });
  const form = el("form", { class: "inline", id: "kv-form", onsubmit: e => {
    e.preventDefault();
    location.hash = `#/kv/${seg(nsIn.value.trim())}/${seg(prefixIn.value)}`;
  } }, "Namespace", nsIn, "prefix", prefixIn, el("button", { type: "submit" }, "browse"));
  if (!ns || !prefix) {
    return render(el("h1", {}, "Key-value"), form,
      el("p", { class: "muted" }, "Name a namespace and a key prefix: the store lists the live keys that start with it."));
  }
  const op = { op: "getPrefix", ns, prefix, limit: PAGE };
  if (state.kvCursors[state.page]) op.after = state.kvCursors[state.page];
  let page;
  try {
    page = (await post("/api/v1/kv", { operations: [op] })).results[0];
  } catch (e) {
    // A token problem is the page's; a refusal (a bad namespace) keeps the form to fix it.
    if (e.status === 401 || e.status === 403) throw e;
    return render(el("h1", {}, "Key-value"), form, el("p", { class: "error", id: "kv-error" }, e.message));
  }
  if (page.nextAfter) state.kvCursors[state.page + 1] = page.nextAfter;
  render(el("h1", {}, `Key-value ${ns}`), form,
    keysetPager("kv", state.page, page.truncated, p => { state.page = p; refresh(); }),
    table(["key", "version", "expires", "updated", "value"],
      page.rows.map(r => [r.key, r.version, r.expiresAt || "never", r.updatedAt, JSON.stringify(r.value)]), [1]));
}

// Ephemeral queues (docs/wire.md §25): their gauges, in byte order of their names.
async function ephemeralPage() {
  const e = await api("/api/v1/ephemeral/queues");
  render(el("h1", {}, "Ephemeral queues"),
    el("p", { class: "muted" }, "Kept across broker restarts, lost on a PostgreSQL crash or failover."),
    e.queues.length ? table(["queue", "declared", "messages", "bytes", "pushed", "partitions", "groups",
      "dropped (bounds / ttl / retry)", "policy"],
      e.queues.map(q => [q.queue, q.declared ? "yes" : "no", q.length, q.bytes, q.pushed, q.partitions, q.groups,
        `${q.dropped.bounds} / ${q.dropped.ttl} / ${q.dropped.retry}`, (q.options || {}).policy]), [2, 3, 4, 5, 6])
      : el("p", { class: "muted" }, "No ephemeral queues."),
    e.truncated ? el("p", { class: "muted" }, "The broker lists the first 1000.") : null);
}

function seek(queue, group, ts) {
  const body = ts.trim() ? { timestamp: ts.trim() } : { toEnd: true };
  return act("seek", () => post(`/api/v1/consumer-groups/${seg(group)}/queues/${seg(queue)}/seek`, body),
    r => `${r.partitionsUpdated} partitions moved`);
}

function configure(queue, key, raw) {
  let value = raw;
  try { value = JSON.parse(raw); } catch (_) { /* text value */ }
  return act(`configure ${queue}`, () => post("/api/v1/configure", { queue, options: { [key]: value } }), () => key);
}

async function dlqPage(queue, page = 0) {
  const qs = await api("/api/v1/resources/queues");
  const pick = el("select", { id: "dlq-queue", onchange: e => { location.hash = `#/dlq/${seg(e.target.value)}`; } },
    el("option", { value: "" }, "choose a queue"),
    qs.queues.map(q => el("option", q.name === queue ? { value: q.name, selected: "" } : { value: q.name }, q.name)));
  const group = el("input", { id: "dlq-group", placeholder: "consumer group (any)", value: state.group || "" });
  const filter = el("form", { class: "inline", onsubmit: e => { e.preventDefault(); state.group = group.value; state.page = 0; refresh(); } },
    "Queue", pick, group, el("button", { type: "submit" }, "filter"));
  if (!queue) return render(el("h1", {}, "Dead letters"), filter);
  const params = new URLSearchParams({ queue, limit: PAGE, offset: page * PAGE });
  if (state.group) params.set("consumerGroup", state.group);
  const d = await api(`/api/v1/dlq?${params}`);
  const purgeLabel = state.group ? `purge ${state.group}'s dead letters` : "purge all dead letters";
  render(el("h1", {}, `Dead letters of ${queue}`), filter,
    el("p", {}, el("button", { class: "danger", "data-action": "purge", onclick: () => dlqPurge(queue, state.group) }, purgeLabel)),
    pager(d.total, page, p => { state.page = p; refresh(); }),
    table(["failed at", "partition", "transaction id", "group", "retries", "error", "payload", ""],
      d.messages.map(m => [m.failedAt, m.partition,
        link(`#/message/${seg(m.partitionId)}/${seg(m.transactionId)}`, m.transactionId),
        m.consumerGroup, m.retryCount, m.errorMessage,
        el("details", {}, el("summary", {}, "show"), el("pre", {}, JSON.stringify(m.data, null, 2))),
        el("span", {},
          el("button", { "data-action": "replay", onclick: () => dlqReplay(m.partitionId, m.transactionId) }, "replay"),
          el("button", { class: "danger", "data-action": "delete", onclick: () => dlqDelete(m.partitionId, m.transactionId) }, "delete"))]),
      [4]));
}

// The dead-letter actions act on an address (every group that filed it) or on the queue.
function dlqAct(label, path, method) {
  return act(label, () => api(path, { method }), describe);
}

function describe(r) {
  if (r.replayed !== undefined) return `pushed back at offset ${r.offset}, ${r.replayed} dead letters removed`;
  return `${r.deleted} dead letters removed`;
}

function dlqReplay(pid, txn) {
  return dlqAct(`replay ${txn}`, `/api/v1/messages/${seg(pid)}/${seg(txn)}/retry`, "POST");
}

function dlqDelete(pid, txn) {
  if (!confirm(`Delete the dead letters of ${txn} (every group)?`)) return;
  return dlqAct(`delete ${txn}`, `/api/v1/messages/${seg(pid)}/${seg(txn)}`, "DELETE");
}

function dlqPurge(queue, group) {
  const whose = group ? `of group ${group} ` : "";
  if (!confirm(`Delete every dead letter ${whose}of ${queue}?`)) return;
  const params = new URLSearchParams({ queue });
  if (group) params.set("consumerGroup", group);
  return dlqAct(`purge ${queue}`, `/api/v1/dlq?${params}`, "DELETE");
}

async function messagePage(pid, txn) {
  const m = await api(`/api/v1/messages/${seg(pid)}/${seg(txn)}`);
  render(el("h1", {}, `Message ${m.transactionId}`),
    table(["field", "value"], [["queue", link(`#/queue/${seg(m.queue)}`, m.queue)], ["partition", m.partition],
      ["partition id", m.partitionId], ["status", m.status], ["created", m.createdAt], ["retries", m.retryCount],
      ["error", m.errorMessage], ["lease expires", m.leaseExpiresAt]]),
    el("h2", {}, "Consumer groups"),
    table(["group", "consumed", "lease expires"], m.consumerGroups.map(g => [g.name, g.consumed, g.leaseExpiresAt])),
    el("h2", {}, "Payload"), el("pre", {}, JSON.stringify(m.data, null, 2)));
}

async function systemPage() {
  const [health, m, mode] = await Promise.all([fetch("/health").then(r => r.json()), api("/metrics"),
    api("/api/v1/system/maintenance")]);
  const db = m.database || {};
  const server = health.server || {};
  const yesNo = v => v === true ? "yes" : v === false ? "no" : "unknown";
  render(el("h1", {}, "System"),
    el("h2", {}, "Maintenance"),
    table(["mode", "state", ""], [
      ["push maintenance (pushes go to the disk spool)", mode.maintenanceMode ? "on" : "off",
        toggle("maintenance-push", "/api/v1/system/maintenance", mode.maintenanceMode)],
      ["pop maintenance (pops answer empty at once)", mode.popMaintenanceMode ? "on" : "off",
        toggle("maintenance-pop", "/api/v1/system/maintenance/pop", mode.popMaintenanceMode)],
      ["messages in this broker's spool", mode.bufferedMessages, ""]]),
    el("h2", {}, "PostgreSQL server"),
    table(["", ""], [
      ["writing to", `${server.address || "unix socket"} port ${server.port ?? "?"}`],
      ["system identifier", server.systemIdentifier ?? "unknown"],
      ["role", server.inRecovery === true ? "standby (in recovery)" : server.inRecovery === false ? "primary" : "unknown"],
      ["takes writes", yesNo(server.writable)],
      ["reached since", server.since || "never"],
      ["server switches", server.switches ?? 0], ["last switch", server.lastSwitchAt || "never"]]),
    el("h2", {}, "Broker"),
    table(["", ""], [["database", health.database], ["version", health.version], ["uptime (s)", m.uptime],
      ["pool size", db.poolSize], ["connections", db.connections], ["idle connections", db.idleConnections],
      ["waiting for a connection", db.waitingRequests], ["resident memory (MiB)", ((m.memory || {}).rssBytes / 1048576).toFixed(1)],
      ["CPU seconds", (m.cpu || {}).processSeconds], ["requests", m.requests.total],
      ["messages pushed", m.messages.pushed], ["messages popped", m.messages.popped]]),
    el("h2", {}, "Accelerators"),
    el("pre", {}, JSON.stringify({ pop: m.pop, wake: m.wake, dedupCache: m.dedupCache }, null, 2)));
}

// A maintenance flag's button: flips it (the broker asks for the admin role).
function toggle(name, path, on) {
  return el("button", { "data-action": name, class: on ? "danger" : "",
    onclick: () => act(`${name} ${on ? "off" : "on"}`, () => post(path, { enabled: !on }), r => r.message) },
    on ? "turn off" : "turn on");
}

// ---------------------------------------------------------------- token entry

// Shown when the broker refuses the call for want of a usable token; the refresh loop pauses
// until a token is entered.
function askToken(reason) {
  clearTimeout(timer);
  const input = el("input", { id: "token", type: "password", autocomplete: "off", placeholder: "JWT", size: "60" });
  render(el("h1", {}, "Token needed"),
    el("p", {}, "This broker has authentication on. Enter a JWT; its role decides what this page may do. ",
      "It is kept in this browser tab only."),
    el("p", { class: "error", id: "auth-error" }, reason),
    el("form", { class: "inline", id: "token-form", onsubmit: e => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      input.blur();
      refresh();
    } }, "Token", input, el("button", { type: "submit" }, "use token")));
  showSignOut();
  input.focus();
}

function showSignOut() {
  document.getElementById("signout").hidden = !token();
}

// ---------------------------------------------------------------- routing

const state = { route: "", page: 0, group: "", cursors: [], timerPage: 0, timerCursors: [], kvCursors: [] };

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const key = location.hash;
  if (key !== state.route) {
    Object.assign(state, { route: key, page: 0, cursors: [], timerPage: 0, timerCursors: [], kvCursors: [] });
  }
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === (parts[0] || "overview"));
  switch (parts[0]) {
    case "queue": return queuePage(parts[1], state.page);
    case "dlq": return dlqPage(parts[1], state.page);
    case "message": return messagePage(parts[1], parts[2]);
    case "kv": return kvPage(parts[1], parts[2]);
    case "ephemeral": return ephemeralPage();
    case "system": return systemPage();
    default: return overview();
  }
}

async function refresh() {
  clearTimeout(timer);
  // Forms being typed into are not redrawn under the user's cursor.
  const typing = document.activeElement && ["INPUT", "SELECT"].includes(document.activeElement.tagName);
  showSignOut();
  try {
    const h = await fetch("/health");
    const pill = document.getElementById("health");
    pill.textContent = h.ok ? "healthy" : "database unreachable";
    pill.className = `pill ${h.ok ? "ok" : "bad"}`;
    if (!typing) {
      await route();
      showStatus();
    }
  } catch (e) {
    if (e.status === 401) return askToken(e.message);
    if (e.status === 403) render(el("h1", {}, "Not allowed"), el("p", { class: "error" }, e.message));
    status(`error: ${e.message}`, true);
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

window.addEventListener("hashchange", () => { state.group = ""; refresh(); });
document.getElementById("signout").onclick = e => {
  e.preventDefault();
  sessionStorage.removeItem(TOKEN_KEY);
  refresh();
};
refresh();
