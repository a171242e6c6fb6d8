// Rosetta's web console: a client of the admin API v1 (/api/v1/…). Plain
// JavaScript, no framework, no build step. Every value from the server is
// put in the page as text (never as HTML).
"use strict";

// ---- helpers -------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "style") el.style.cssText = v; // the CSP allows styles set from script, not style attributes
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class APIError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const resp = await fetch(path, opts);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const err = (data && data.error) || { code: String(resp.status), message: text || resp.statusText };
    throw new APIError(resp.status, err.code, err.message);
  }
  return data;
}

const enc = encodeURIComponent;
const fmtInt = (n) => Number(n || 0).toLocaleString("en-US");
const fmtRate = (r) => (r >= 100 ? fmtInt(Math.round(r)) : Number(r || 0).toFixed(r >= 10 ? 1 : 2)) + "/s";

// lagChart draws a group's lag over time as an SVG line (no library).
function lagChart(points) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 600 120");
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "lag over the last minutes");
  if (points.length < 2) return h("p", { class: "muted" }, "The lag chart fills in as the node samples (every 10 s).");
  const t0 = points[0].time_ms, t1 = points[points.length - 1].time_ms;
  const top = Math.max(1, ...points.map((p) => p.lag));
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map((p) => (10 + 580 * (p.time_ms - t0) / Math.max(1, t1 - t0)).toFixed(1) + "," + (110 - 100 * p.lag / top).toFixed(1)).join(" "));
  svg.append(line);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "12");
  label.setAttribute("y", "14");
  label.textContent = "max " + fmtInt(top);
  svg.append(label);
  return svg;
}
function fmtBytes(n) {
  n = Number(n || 0);
  if (n < 1024) return n + " B";
  const u = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return n.toFixed(1) + " " + u[i];
}
function fmtMs(ms) {
  if (ms < 0) return "forever";
  const s = ms / 1000;
  if (s % 86400 === 0) return s / 86400 + " d";
  if (s % 3600 === 0) return s / 3600 + " h";
  if (s % 60 === 0) return s / 60 + " min";
  return s + " s";
}
const fmtTime = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "");
const errorBox = (e) => h("div", { class: "error", role: "alert" }, (e.code ? e.code + ": " : "") + e.message);

function table(headers, rows, onRow) {
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((c) => h("th", { class: c.num ? "num" : "" }, typeof c === "string" ? c : c.label)))),
    h("tbody", {}, rows.length === 0
      ? h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "nothing yet"))
      : rows.map((r, i) => h("tr", { class: onRow ? "click" : "", onclick: onRow ? () => onRow(i) : null },
        r.map((cell, j) => h("td", { class: headers[j].num ? "num" : "" }, cell))))));
}

let stopTimers = [];
function every(ms, fn) { const id = setInterval(fn, ms); stopTimers.push(() => clearInterval(id)); }

function showModal(...content) {
  const body = document.getElementById("modal-body");
  body.replaceChildren(...content);
  document.getElementById("modal").classList.remove("hidden");
}
function hideModal() { document.getElementById("modal").classList.add("hidden"); }

// ---- views ---------------------------------------------------------------

async function overview(view) {
  const [topics, groups, dlq, health] = await Promise.all([
    api("GET", "/api/v1/topics"), api("GET", "/api/v1/groups"), api("GET", "/api/v1/deadletters"), api("GET", "/healthz")]);
  const held = topics.reduce((a, t) => a + t.messages, 0);
  const bytes = topics.reduce((a, t) => a + t.bytes, 0);
  const lag = groups.reduce((a, g) => a + g.lag, 0);
  const dead = dlq.reduce((a, d) => a + d.messages, 0);
  const rateIn = topics.reduce((a, t) => a + (t.messages_per_sec || 0), 0);
  const rateOut = groups.reduce((a, g) => a + (g.consumed_per_sec || 0), 0);
  const stuck = groups.filter((g) => g.stuck);
  const card = (k, v) => h("div", { class: "card" }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));
  const alerts = [];
  if (health.disk_full) alerts.push(h("div", { class: "error" }, "The disk guard refuses writes: free disk space (", fmtBytes(health.free_bytes), " free)."));
  if (dead > 0) alerts.push(h("div", { class: "notice" }, fmtInt(dead), " dead-lettered messages wait in ", dlq.length, " groups' dead-letter topics. ", h("a", { href: "#/dlq" }, "Dead letters")));
  if (stuck.length > 0) alerts.push(h("div", { class: "notice" }, "Stuck consumers: ", stuck.map((g) => g.name).join(", "),
    " — behind for two minutes without committing."));
  const lagging = groups.filter((g) => g.lag > 0).sort((a, b) => b.lag - a.lag).slice(0, 10);
  view.replaceChildren(
    h("h1", {}, "Overview"), ...alerts,
    h("div", { class: "cards" }, card("messages in", fmtRate(rateIn)), card("consumed", fmtRate(rateOut)), card("topics", fmtInt(topics.length)), card("messages held", fmtInt(held)), card("bytes", fmtBytes(bytes)),
      card("consumer groups", fmtInt(groups.length)), card("total lag", fmtInt(lag)), card("dead letters", fmtInt(dead)),
      card("disk free", fmtBytes(health.free_bytes))),
    h("h2", {}, "Most lagging groups"),
    table([{ label: "group" }, { label: "topics", num: true }, { label: "lag", num: true }],
      lagging.map((g) => [g.name, g.topics, fmtInt(g.lag)]), (i) => { location.hash = "#/groups/" + enc(lagging[i].name); }));
}

async function topicList(view) {
  const topics = await api("GET", "/api/v1/topics");
  const name = h("input", { placeholder: "new topic", required: true, "aria-label": "topic name" });
  const queues = h("input", { type: "number", min: 1, placeholder: "queues", style: "width:90px", "aria-label": "queues" });
  const status = h("span");
  const create = h("form", { class: "inline", onsubmit: async (e) => {
    e.preventDefault();
    try {
      await api("POST", "/api/v1/topics", { name: name.value, queues: Number(queues.value || 0) });
      location.hash = "#/topics/" + enc(name.value);
    } catch (err) { status.replaceChildren(errorBox(err)); }
  } }, name, queues, h("button", { type: "submit" }, "Create topic"), status);
  view.replaceChildren(h("h1", {}, "Topics"), create,
    table([{ label: "topic" }, { label: "queues", num: true }, { label: "messages", num: true }, { label: "in", num: true }, { label: "bytes", num: true }, { label: "retention" }],
      topics.map((t) => [t.name, t.queues, fmtInt(t.messages), fmtRate(t.messages_per_sec), fmtBytes(t.bytes), fmtMs(t.retention_ms)]),
      (i) => { location.hash = "#/topics/" + enc(topics[i].name); }));
}

// messageBrowser shows a queue a page at a time (or live), for a topic or
// a group's dead letters (base is the messages endpoint).
function messageBrowser(base, queues, onRedrive) {
  const queue = h("select", { "aria-label": "queue" }, Array.from({ length: queues }, (_, i) => h("option", { value: i }, "queue " + i)));
  const from = h("select", { "aria-label": "from" }, h("option", { value: "oldest" }, "oldest"), h("option", { value: "newest" }, "newest"),
    h("option", { value: "offset" }, "offset…"), h("option", { value: "time" }, "time…"));
  const at = h("input", { placeholder: "offset or 2026-12-01T08:00:00Z", style: "width:220px", "aria-label": "start" });
  const limit = h("input", { type: "number", value: 20, min: 1, max: 500, style: "width:80px", "aria-label": "page size" });
  const live = h("input", { type: "checkbox", "aria-label": "live tail" });
  const out = h("div");
  let page = null;
  let selected = new Set();
  const render = () => {
    const rows = page.messages.map((m) => [
      onRedrive ? h("input", { type: "checkbox", checked: selected.has(m.offset), onclick: (e) => { e.stopPropagation(); e.target.checked ? selected.add(m.offset) : selected.delete(m.offset); } }) : null,
      m.offset, fmtTime(m.store_time_ms), m.key || "", m.tags || "", onRedrive ? m.origin || "" : null,
      h("span", { class: "body-cell mono" }, m.body_encoding === "text" ? m.body : "base64 " + m.body)].filter((c) => c !== null));
    const headers = [onRedrive ? { label: "" } : null, { label: "offset", num: true }, { label: "stored" }, { label: "key" }, { label: "tags" },
      onRedrive ? { label: "origin" } : null, { label: "body" }].filter((c) => c !== null);
    out.replaceChildren(table(headers, rows, (i) => messageDetail(page.messages[i])),
      h("p", { class: "muted" }, "next offset ", page.next_offset, " of ", page.end, " ",
        h("button", { class: "secondary", onclick: () => load(page.next_offset) }, "Next page")));
  };
  const load = async (offset) => {
    const q = new URLSearchParams({ queue: queue.value, limit: limit.value });
    if (offset !== undefined) q.set("offset", offset);
    else if (from.value === "newest") q.set("from", "newest");
    else if (from.value === "offset") q.set("offset", at.value);
    else if (from.value === "time") q.set("time_ms", Date.parse(at.value));
    try { page = await api("GET", base + "?" + q); selected = new Set(); render(); } catch (err) { out.replaceChildren(errorBox(err)); }
  };
  // Live tail: poll from where the page ended, appending.
  every(1000, async () => {
    if (!live.checked || !page) return;
    const q = new URLSearchParams({ queue: queue.value, limit: 100, offset: page.next_offset });
    try {
      const more = await api("GET", base + "?" + q);
      if (more.messages.length) { page.messages = page.messages.concat(more.messages).slice(-500); page.next_offset = more.next_offset; page.end = more.end; render(); }
    } catch (err) { /* the next poll retries */ }
  });
  const tools = [queue, from, at, limit, h("button", { onclick: () => load() }, "Show"), h("label", {}, live, " live tail")];
  if (onRedrive) {
    tools.push(h("button", { class: "secondary", onclick: () => onRedrive([...selected], false) }, "Re-drive selected"),
      h("button", { class: "secondary", onclick: () => onRedrive([...selected], true) }, "Selected to retry topic"));
  }
  setTimeout(() => load(), 0);
  return h("div", {}, h("div", { class: "toolbar" }, tools), out);
}

function messageDetail(m) {
  const pre = h("pre", { class: "mono" });
  const show = (how) => {
    let text = m.body;
    if (how === "json") { try { text = JSON.stringify(JSON.parse(m.body), null, 2); } catch (e) { text = "(not JSON)\n" + m.body; } }
    if (how === "hex") {
      const bytes = m.body_encoding === "base64" ? Uint8Array.from(atob(m.body), (c) => c.charCodeAt(0)) : new TextEncoder().encode(m.body);
      text = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
    }
    pre.textContent = text;
  };
  show("text");
  showModal(h("h2", {}, m.topic, " · queue ", m.queue, " · offset ", m.offset),
    table([{ label: "field" }, { label: "value" }], [["stored", fmtTime(m.store_time_ms)], ["born", fmtTime(m.born_time_ms)], ["key", m.key || ""],
      ["tags", m.tags || ""], ["body", fmtBytes(m.body_bytes) + (m.compressed ? " (zlib, as sent)" : "")]].concat(m.origin ? [["origin", m.origin]] : [])),
    h("h2", {}, "Headers and properties"),
    table([{ label: "key" }, { label: "value" }], (m.headers || []).map((x) => [x.key, h("span", { class: "mono" }, x.value)])),
    h("h2", {}, "Body"),
    h("div", { class: "tabs" }, ["text", "json", "hex"].map((how) => h("button", { onclick: () => show(how) }, how))), pre,
    h("h2", {}, "Trace"), traceTimeline(m));
}

// traceTimeline shows a message's recorded lifecycle (topics with message
// trace on), found by its id when it has one, else by its place.
function traceTimeline(m) {
  const box = h("div", { class: "muted" }, "Loading…");
  const id = (m.headers || []).find((x) => x.key === "UNIQ_KEY");
  const q = id ? "id=" + enc(id.value) : "topic=" + enc(m.topic) + "&queue=" + m.queue + "&offset=" + m.offset;
  api("GET", "/api/v1/trace?" + q).then((tr) => {
    if (tr.events.length === 0) {
      box.replaceChildren("Nothing recorded: turn message trace on for the topic to record its messages' lives.");
      return;
    }
    box.className = "";
    box.replaceChildren(h("ol", { class: "timeline" }, tr.events.map((e) => h("li", {},
      h("span", { class: "mono" }, e.time), " ", h("strong", {}, e.kind), " ",
      e.offset >= 0 ? e.topic + " queue " + e.queue + " offset " + e.offset : e.topic,
      e.group ? " · group " + e.group : "", e.client ? " · " + e.client : "", e.protocol ? " · " + e.protocol : "",
      e.attempt ? " · attempt " + e.attempt : "", e.detail ? " · " + e.detail : ""))));
  }).catch((err) => box.replaceChildren(errorBox(err)));
  return box;
}

async function topicDetail(view, name) {
  const t = await api("GET", "/api/v1/topics/" + enc(name));
  const key = h("input", { placeholder: "key", "aria-label": "key" });
  const body = h("textarea", { placeholder: "body", "aria-label": "body" });
  const sent = h("span");
  const produce = h("form", { class: "inline", onsubmit: async (e) => {
    e.preventDefault();
    try {
      const r = await api("POST", "/api/v1/topics/" + enc(name) + "/messages", { key: key.value, body: body.value });
      sent.replaceChildren(h("span", { class: "muted" }, "stored in queue ", r.queue, " at offset ", r.offset));
    } catch (err) { sent.replaceChildren(errorBox(err)); }
  } }, key, body, h("button", { type: "submit" }, "Produce"), sent);
  const del = h("button", { class: "danger", onclick: async () => {
    if (!confirm("Delete topic " + name + " and its messages?")) return;
    try { await api("DELETE", "/api/v1/topics/" + enc(name)); location.hash = "#/topics"; } catch (err) { view.prepend(errorBox(err)); }
  } }, "Delete topic");
  view.replaceChildren(h("h1", {}, "Topic ", name),
    h("p", { class: "muted" }, t.full_name, " · ", t.queues, " queues · ", fmtInt(t.messages), " messages · ", fmtBytes(t.bytes), " · retention ", fmtMs(t.retention_ms),
      t.config.cleanup_policy ? " · cleanup " + t.config.cleanup_policy : "", t.config.no_tiering ? " · kept out of tiered storage" : "", " ", del),
    h("h2", {}, "Queues"),
    queueTable(t.queue_list),
    h("h2", {}, "Messages"), messageBrowser("/api/v1/topics/" + enc(name) + "/messages", t.queues),
    h("h2", {}, "Produce a message"), produce);
}

// queueTable lists a topic's queues; when the node tiers, "local from" is
// each queue's first offset on local disk (below it, in the bucket only).
function queueTable(queues) {
  const tiered = queues.some((q) => q.local_start !== undefined);
  const headers = [{ label: "queue", num: true }, { label: "start", num: true }, { label: "end", num: true }, { label: "messages", num: true }, { label: "bytes", num: true }];
  if (tiered) headers.push({ label: "local from", num: true }, { label: "in the bucket only", num: true });
  return table(headers, queues.map((q) => {
    const row = [q.queue, fmtInt(q.start), fmtInt(q.end), fmtInt(q.end - q.start), fmtBytes(q.bytes)];
    if (tiered) {
      const local = q.local_start === undefined ? q.start : q.local_start;
      row.push(fmtInt(local), fmtInt(local - q.start) + " messages");
    }
    return row;
  }));
}

async function groupList(view) {
  const groups = await api("GET", "/api/v1/groups");
  view.replaceChildren(h("h1", {}, "Consumer groups"),
    h("p", { class: "muted" }, "Every group that commits offsets or has live members: Kafka classic and KIP-848 groups, RocketMQ push and pull consumers."),
    table([{ label: "group" }, { label: "state" }, { label: "members", num: true }, { label: "topics", num: true }, { label: "lag", num: true }, { label: "consumed", num: true }],
      groups.map((g) => [g.name, (g.state || "") + (g.stuck ? " (stuck)" : ""), g.members, g.topics, fmtInt(g.lag), fmtRate(g.consumed_per_sec)]), (i) => { location.hash = "#/groups/" + enc(groups[i].name); }));
}

async function groupDetail(view, name) {
  const g = await api("GET", "/api/v1/groups/" + enc(name));
  const maxLag = Math.max(1, ...g.offsets.map((o) => o.lag));
  const to = h("select", { "aria-label": "reset to" }, ["earliest", "latest", "time", "offset"].map((v) => h("option", { value: v }, v)));
  const val = h("input", { placeholder: "time or offset", "aria-label": "time or offset" });
  const topic = h("select", { "aria-label": "topic" }, h("option", { value: "" }, "every topic"),
    [...new Set(g.offsets.map((o) => o.topic))].map((t) => h("option", { value: t }, t)));
  const result = h("div");
  const reset = async (dry) => {
    const req = { to: to.value, topic: topic.value, dry_run: dry };
    if (to.value === "time") req.time_ms = Date.parse(val.value);
    if (to.value === "offset") req.offset = Number(val.value);
    try {
      const moves = await api("POST", "/api/v1/groups/" + enc(name) + "/reset", req);
      result.replaceChildren(h("div", { class: "notice" }, dry ? "Dry run: nothing moved." : "Offsets moved."),
        table([{ label: "topic" }, { label: "queue", num: true }, { label: "from", num: true }, { label: "to", num: true }],
          moves.map((m) => [m.topic, m.queue, m.from < 0 ? "-" : fmtInt(m.from), fmtInt(m.to)])));
      if (!dry) setTimeout(() => route(), 800);
    } catch (err) { result.replaceChildren(errorBox(err)); }
  };
  view.replaceChildren(h("h1", {}, "Group ", name), h("p", { class: "muted" }, "total lag ", fmtInt(g.lag)), lagChart(g.lag_history || []),
    table([{ label: "topic" }, { label: "queue", num: true }, { label: "committed", num: true }, { label: "end", num: true }, { label: "lag", num: true }, { label: "" }, { label: "committed at" }],
      g.offsets.map((o) => [o.topic, o.queue, fmtInt(o.committed), fmtInt(o.end), fmtInt(o.lag),
        h("div", { class: "bar", title: o.lag + " behind" }, h("div", { style: "width:" + Math.round(100 * o.lag / maxLag) + "%" })), fmtTime(o.commit_time_ms)])),
    h("h2", {}, "Members"),
    g.type ? h("p", { class: "muted" },
      { consumer: "KIP-848 consumer group", share: "share group (KIP-932)" }[g.type] || "classic group", ", ", g.state, ", ",
      g.type === "classic" ? "generation " : "epoch ", g.generation) : "",
    table([{ label: "protocol" }, { label: "client" }, { label: "host" }, { label: "member" }, { label: "subscriptions" }, { label: "assignment" }],
      g.members.map((m) => [m.protocol, m.client_id + (m.client ? " (" + m.client + ")" : ""), m.host || "", m.member_id || "",
        (m.subscriptions || []).join(", "), (m.assignment || []).map((a) => a.topic + " " + a.queues.join(",")).join("; ") || (m.protocol === "rocketmq" ? "chosen by the clients" : m.protocol === "rocketmq-grpc" ? "any queue (POP)" : "")])),
    h("h2", {}, "Reset offsets"),
    h("p", { class: "muted" }, "Stop the group's consumers first: a running member commits its own position over the reset."),
    h("div", { class: "toolbar" }, topic, to, val, h("button", { class: "secondary", onclick: () => reset(true) }, "Dry run"), h("button", { onclick: () => reset(false) }, "Reset")),
    result);
  every(5000, async () => {
    if (location.hash !== "#/groups/" + enc(name)) return;
    try {
      const fresh = await api("GET", "/api/v1/groups/" + enc(name));
      const p = view.querySelector("p.muted");
      if (p) p.textContent = "total lag " + fmtInt(fresh.lag);
    } catch (e) { /* next time */ }
  });
}

async function messageSearch(view) {
  const key = h("input", { placeholder: "key or RocketMQ message id", style: "width:320px", required: true, "aria-label": "key" });
  const topic = h("input", { placeholder: "topic (optional)", "aria-label": "topic" });
  const out = h("div");
  view.replaceChildren(h("h1", {}, "Find messages"),
    h("form", { class: "inline", onsubmit: async (e) => {
      e.preventDefault();
      const q = new URLSearchParams({ key: key.value });
      if (topic.value) q.set("topic", topic.value);
      try {
        const found = await api("GET", "/api/v1/messages?" + q);
        out.replaceChildren(table([{ label: "topic" }, { label: "queue", num: true }, { label: "offset", num: true }, { label: "stored" }, { label: "key" }, { label: "body" }],
          found.map((m) => [m.topic, m.queue, m.offset, fmtTime(m.store_time_ms), m.key || "", h("span", { class: "body-cell mono" }, m.body)]),
          (i) => messageDetail(found[i])));
      } catch (err) { out.replaceChildren(errorBox(err)); }
    } }, key, topic, h("button", { type: "submit" }, "Search")), out);
}

async function dlqList(view) {
  const dl = await api("GET", "/api/v1/deadletters");
  view.replaceChildren(h("h1", {}, "Dead letters"),
    table([{ label: "group" }, { label: "messages", num: true }, { label: "start", num: true }, { label: "end", num: true }, { label: "bytes", num: true }],
      dl.map((d) => [d.group, fmtInt(d.messages), d.start, d.end, fmtBytes(d.bytes)]), (i) => { location.hash = "#/dlq/" + enc(dl[i].group); }));
}

async function dlqDetail(view, group) {
  const status = h("div");
  const redrive = async (offsets, toRetry) => {
    if (offsets.length === 0) { status.replaceChildren(h("div", { class: "notice" }, "Select dead letters first.")); return; }
    try {
      const r = await api("POST", "/api/v1/deadletters/" + enc(group) + "/redrive", { offsets: offsets, to_retry: toRetry });
      status.replaceChildren(h("div", { class: "notice" }, "Re-drove ", r.redriven, (r.skipped || []).length ? "; skipped " + r.skipped.length + " (origin unknown or gone)" : "", "."));
    } catch (err) { status.replaceChildren(errorBox(err)); }
  };
  view.replaceChildren(h("h1", {}, "Dead letters of ", group),
    h("p", { class: "muted" }, "Re-drive sends chosen messages back to the topic each was consumed from (every group subscribed there gets it again), or to this group's retry topic. They stay in the dead-letter topic."),
    status, messageBrowser("/api/v1/deadletters/" + enc(group) + "/messages", 1, redrive));
}

async function transactions(view) {
  const tx = await api("GET", "/api/v1/transactions");
  const status = h("div");
  const act = async (method, path, what) => {
    if (!confirm(what + "?")) return;
    try { await api(method, path); status.replaceChildren(h("div", { class: "notice" }, what, ": done.")); setTimeout(route, 800); } catch (err) { status.replaceChildren(errorBox(err)); }
  };
  view.replaceChildren(h("h1", {}, "Transactions in doubt"), status,
    h("h2", {}, "Kafka transactions"),
    h("p", { class: "muted" }, "An open transaction holds back every read_committed consumer of its partitions. Aborting one fences its producer."),
    table([{ label: "transactional id" }, { label: "state" }, { label: "producer id", num: true }, { label: "started" }, { label: "partitions" }, { label: "" }],
      tx.kafka.map((k) => [k.id, k.state, k.producer_id, fmtTime(k.start_ms), k.partitions.map((p) => p.topic + "-" + p.partition).join(", "),
        h("button", { class: "danger", onclick: () => act("POST", "/api/v1/transactions/kafka/" + enc(k.id) + "/abort", "Abort " + k.id) }, "Abort")])),
    h("h2", {}, "RocketMQ half messages"),
    h("p", { class: "muted" }, "Transactional messages whose producer has not committed or rolled back; the broker keeps asking it (check-backs)."),
    table([{ label: "offset", num: true }, { label: "producer group" }, { label: "topic" }, { label: "message id" }, { label: "stored" }, { label: "checks", num: true }, { label: "" }],
      tx.rocketmq.map((m) => [m.offset, m.group, m.topic, m.message_id || "", fmtTime(m.stored_ms), m.checks,
        h("span", {}, h("button", { onclick: () => act("POST", "/api/v1/transactions/rocketmq/" + m.offset + "/commit", "Commit half message " + m.offset) }, "Commit"), " ",
          h("button", { class: "danger", onclick: () => act("POST", "/api/v1/transactions/rocketmq/" + m.offset + "/rollback", "Roll back half message " + m.offset) }, "Roll back"))])));
}

async function mqttView(view) {
  let sessions, retained;
  try {
    [sessions, retained] = await Promise.all([api("GET", "/api/v1/mqtt/sessions"), api("GET", "/api/v1/mqtt/retained")]);
  } catch (err) {
    view.replaceChildren(h("h1", {}, "MQTT"), h("p", { class: "muted" }, "This node does not serve MQTT (listen.mqtt), or its MQTT state is not loaded."), errorBox(err));
    return;
  }
  const levels = { 3: "3.1", 4: "3.1.1", 5: "5.0" };
  const list = sessions.sessions || [];
  view.replaceChildren(h("h1", {}, "MQTT"),
    h("h2", {}, "Sessions (", fmtInt(list.length), ", ", fmtInt(list.filter((x) => x.connected).length), " connected)"),
    h("p", { class: "muted" }, "A session outlives its connection for its expiry interval (clean session off, or an MQTT 5 session expiry); its subscriptions and place in each queue are kept, so what was published meanwhile is delivered when the client comes back."),
    table([{ label: "client id" }, { label: "state" }, { label: "version" }, { label: "expiry (s)", num: true }, { label: "in flight", num: true }, { label: "subscriptions" }],
      list.map((x) => [x.client_id, x.connected ? "connected " + (x.remote || "") : "waiting", levels[x.protocol_level] || "", fmtInt(x.expiry_seconds), fmtInt(x.in_flight),
        x.subscriptions.map((f) => f.filter + " (QoS " + f.qos + ")").join(", ")])),
    h("h2", {}, "Retained messages (", fmtInt((retained.retained || []).length), ")"),
    table([{ label: "topic" }, { label: "size", num: true }, { label: "QoS", num: true }],
      (retained.retained || []).map((r) => [r.topic, fmtBytes(r.bytes), r.qos])));
}

async function timers(view, topic) {
  const q = new URLSearchParams({ limit: "200" });
  if (topic) q.set("topic", topic);
  const list = await api("GET", "/api/v1/timers?" + q.toString());
  const status = h("div");
  const filter = h("input", { type: "text", placeholder: "topic", value: topic || "", "aria-label": "topic" });
  const cancel = async (t) => {
    if (!confirm("Cancel " + t.id + " (due " + t.due + ")?")) return;
    try {
      await api("DELETE", "/api/v1/timers/" + enc(t.id) + "?topic=" + enc(t.topic));
      status.replaceChildren(h("div", { class: "notice" }, "Cancelled ", t.id, "."));
      setTimeout(route, 800);
    } catch (err) { status.replaceChildren(errorBox(err)); }
  };
  view.replaceChildren(h("h1", {}, "Pending timers"),
    h("p", { class: "muted" }, "Timer messages (a delivery time or delay) and RocketMQ delay levels waiting for their time, the earliest first. A cancelled one is never delivered."),
    h("form", { onsubmit: (e) => { e.preventDefault(); location.hash = "#/timers" + (filter.value ? "/" + enc(filter.value) : ""); } },
      filter, " ", h("button", { type: "submit" }, "Filter")),
    status,
    table([{ label: "due" }, { label: "topic" }, { label: "message id" }, { label: "kind" }, { label: "tags" }, { label: "keys" }, { label: "bytes", num: true }, { label: "" }],
      list.timers.map((t) => [t.due, t.topic, t.id, t.delay_level ? "delay level " + t.delay_level : "timer", t.tags || "", t.keys || "", t.size,
        h("button", { class: "danger", onclick: () => cancel(t) }, "Cancel")])),
    list.more ? h("p", { class: "muted" }, "The first ", list.timers.length, " are shown; more are pending.") : "");
}

async function securityView(view) {
  const [users, acls, quotas] = (await Promise.all([api("GET", "/api/v1/users"), api("GET", "/api/v1/acls"), api("GET", "/api/v1/quotas")])).map((l) => l || []);
  const status = h("div");
  const act = async (method, path, body, what) => {
    try { await api(method, path, body); status.replaceChildren(h("div", { class: "notice" }, what, ": done.")); setTimeout(route, 800); } catch (err) { status.replaceChildren(errorBox(err)); }
  };
  const user = h("input", { placeholder: "user", "aria-label": "user name", required: true });
  const password = h("input", { type: "password", placeholder: "password", "aria-label": "password", required: true });
  const pick = (label, options) => h("select", { "aria-label": label }, options.map((v) => h("option", { value: v }, v)));
  const principal = h("input", { placeholder: "User:alice", "aria-label": "principal", required: true });
  const rtype = pick("resource type", ["topic", "group", "cluster", "transactional_id"]);
  const rname = h("input", { placeholder: "resource name (* for all)", "aria-label": "resource name", required: true });
  const pattern = pick("pattern", ["literal", "prefixed"]);
  const op = pick("operation", ["read", "write", "create", "delete", "alter", "describe", "all"]);
  const perm = pick("permission", ["allow", "deny"]);
  const aclQuery = (b) => new URLSearchParams({ principal: b.principal, resourceType: b.resourceType, resourceName: b.resourceName,
    patternType: b.patternType, operation: b.operation, permission: b.permission, host: b.host }).toString();
  view.replaceChildren(h("h1", {}, "Users and ACLs"), status,
    h("h2", {}, "Users"),
    h("p", { class: "muted" }, "SCRAM and PLAIN credentials for Kafka, signing secrets for RocketMQ clients (their access key is the user name)."),
    table([{ label: "user" }, { label: "mechanisms" }, { label: "namespace" }, { label: "" }],
      users.map((u) => [u.name + (u.super ? " (super user)" : ""), (u.mechanisms || []).map((m) => m.mechanism + " ×" + m.iterations).join(", ") + (u.hasSecret ? (u.mechanisms && u.mechanisms.length ? ", " : "") + "RocketMQ secret" : ""),
        u.namespace || "", h("button", { class: "danger", onclick: () => confirm("Delete user " + u.name + "?") && act("DELETE", "/api/v1/users/" + enc(u.name), undefined, "Deleted " + u.name) }, "Delete")])),
    h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); act("PUT", "/api/v1/users/" + enc(user.value), { password: password.value }, "Saved " + user.value); } },
      user, password, h("button", { type: "submit" }, "Create or set password")),
    h("h2", {}, "ACLs"),
    h("p", { class: "muted" }, "Checked only when security.authorization is on; every protocol and the admin API obey them."),
    table([{ label: "principal" }, { label: "resource" }, { label: "pattern" }, { label: "operation" }, { label: "permission" }, { label: "host" }, { label: "" }],
      acls.map((b) => [b.principal, b.resourceType + " " + b.resourceName, b.patternType, b.operation, b.permission, b.host,
        h("button", { class: "danger", onclick: () => act("DELETE", "/api/v1/acls?" + aclQuery(b), undefined, "Removed the ACL") }, "Remove")])),
    h("form", { class: "inline", onsubmit: (e) => { e.preventDefault();
      act("POST", "/api/v1/acls", [{ principal: principal.value, resourceType: rtype.value, resourceName: rname.value, patternType: pattern.value,
        operation: op.value, permission: perm.value, host: "*" }], "Added the ACL"); } },
      principal, rtype, rname, pattern, op, perm, h("button", { type: "submit" }, "Add ACL")),
    h("h2", {}, "Quotas"),
    table([{ label: "entity" }, { label: "produce B/s", num: true }, { label: "fetch B/s", num: true }, { label: "storage" }, { label: "topics" }],
      quotas.map((q) => [q.entity, fmtInt((q.limits || {}).produceBytesPerSecond), fmtInt((q.limits || {}).fetchBytesPerSecond),
        fmtBytes(q.usage.storageBytes) + ((q.limits || {}).storageBytes ? " of " + fmtBytes(q.limits.storageBytes) : ""),
        q.usage.topics + ((q.limits || {}).topics ? " of " + q.limits.topics : "")])));
}

async function clusterView(view) {
  let c;
  try { c = await api("GET", "/api/v1/cluster"); } catch (err) {
    view.replaceChildren(h("h1", {}, "Cluster"), h("p", { class: "muted" }, "A single node.")); return;
  }
  const nodes = c.nodes || [];
  const groups = c.groups || [];
  view.replaceChildren(h("h1", {}, "Cluster ", c.name || ""),
    h("p", { class: "muted" }, "id ", c.cluster_id || "-", " · metadata in ", c.metadata || "-", " · this node ", c.self),
    h("h2", {}, "Nodes"),
    table([{ label: "node", num: true }, { label: "incarnation", num: true }, { label: "endpoints" }, { label: "started" }],
      nodes.map((n) => [n.id, n.incarnation, Object.entries(n.endpoints || {}).map(([k, v]) => k + " " + v).join(", "), n.started])),
    h("h2", {}, "Replication groups"),
    table([{ label: "group", num: true }, { label: "leader", num: true }, { label: "term", num: true }, { label: "commit", num: true }, { label: "replicas" }],
      groups.map((g) => [g.id, g.leader, g.term, fmtInt(g.commit_index), (g.progress || []).map((p) => p.node + " (lag " + p.lag + ")").join(", ") || (g.replicas || []).join(", ")])));
}

// storageView shows where the data is: local segments, what went to the
// tiered-storage bucket (still local too, or in the bucket only) and what
// waits to go, with the upload and cold-read counters.
async function storageView(view) {
  const [s, t] = await Promise.all([api("GET", "/api/v1/storage"), api("GET", "/api/v1/storage/tier")]);
  const st = t.status || {};
  const segs = t.segments || [];
  const sum = (xs) => xs.reduce((n, x) => n + x.bytes, 0);
  const local = segs.filter((x) => x.local), bucketOnly = segs.filter((x) => !x.local);
  const head = [h("h1", {}, "Storage"),
    h("p", { class: "muted" }, "Local disk: ", fmtBytes(s.log_bytes), " in ", (s.segments || []).length, " segments, ", fmtBytes(s.live_bytes), " of it live.")];
  if (!st.enabled) {
    view.replaceChildren(...head, h("p", { class: "muted" }, "Tiered storage is off (storage.tier.bucket is not set): everything is on local disk."));
    return;
  }
  const status = h("span");
  const upload = h("button", { onclick: async () => {
    try { const r = await api("POST", "/api/v1/storage/tier/upload"); status.replaceChildren(h("span", { class: "muted" }, " uploaded ", r.uploaded_segments, " segments")); setTimeout(route, 800); } catch (err) { status.replaceChildren(errorBox(err)); }
  } }, "Upload sealed segments now");
  const lookups = st.cache_hits + st.cache_misses;
  const grouped = segs.some((x) => x.group !== undefined);
  const shown = segs.slice(-200).reverse();
  const stalled = st.last_error ? [h("div", { class: "error", role: "alert" }, "Uploads stalled since ", st.last_error_at || "", ": ", st.last_error)] : [];
  view.replaceChildren(...head, ...stalled,
    h("h2", {}, "Where the log is"),
    table([{ label: "where" }, { label: "segments", num: true }, { label: "bytes", num: true }], [
      ["local disk only: sealed, waiting for upload", fmtInt(st.pending_segments), fmtBytes(st.pending_bytes)],
      ["local disk and the bucket", fmtInt(local.length), fmtBytes(sum(local))],
      ["the bucket only", fmtInt(bucketOnly.length), fmtBytes(sum(bucketOnly))],
    ]),
    h("p", { class: "muted" }, "This process uploaded ", fmtInt(st.uploaded_segments), " segments (", fmtBytes(st.uploaded_bytes), "), ",
      fmtInt(st.upload_errors), " upload passes failed; cold reads: ", fmtInt(st.cold_reads), " ranged reads, ", fmtBytes(st.cold_read_bytes),
      lookups ? ", cache hits " + Math.round(100 * st.cache_hits / lookups) + "%" : "", ". ", upload, status),
    h("h2", {}, "Tiered segments", segs.length > shown.length ? " (newest " + shown.length + " of " + segs.length + ")" : ""),
    table((grouped ? [{ label: "group", num: true }] : []).concat([{ label: "log positions" }, { label: "records (log index)" }, { label: "object", num: true },
      { label: "queues", num: true }, { label: "where" }, { label: "key" }]),
    shown.map((x) => (grouped ? [x.group] : []).concat([fmtInt(x.base) + " – " + fmtInt(x.end), fmtInt(x.first_index) + " – " + fmtInt(x.last_index),
      fmtBytes(x.bytes), x.queues, x.local ? "local and bucket" : "bucket only", x.key]))));
}

// ---- routing -------------------------------------------------------------

const routes = [
  [/^#?\/?$/, "overview", overview],
  [/^#\/topics$/, "topics", topicList],
  [/^#\/topics\/(.+)$/, "topics", topicDetail],
  [/^#\/groups$/, "groups", groupList],
  [/^#\/groups\/(.+)$/, "groups", groupDetail],
  [/^#\/messages$/, "messages", messageSearch],
  [/^#\/dlq$/, "dlq", dlqList],
  [/^#\/dlq\/(.+)$/, "dlq", dlqDetail],
  [/^#\/transactions$/, "transactions", transactions],
  [/^#\/timers$/, "timers", timers],
  [/^#\/timers\/(.+)$/, "timers", timers],
  [/^#\/security$/, "security", securityView],
  [/^#\/storage$/, "storage", storageView],
  [/^#\/cluster$/, "cluster", clusterView],
  [/^#\/mqtt$/, "mqtt", mqttView],
];

async function route() {
  stopTimers.forEach((stop) => stop());
  stopTimers = [];
  hideModal();
  // A fresh element per page: the last page's rows can't be clicked while
  // this one loads, and a slower earlier page writes into the detached one.
  const view = h("main", { id: "view" }, h("p", { class: "muted" }, "Loading…"));
  document.getElementById("view").replaceWith(view);
  for (const [re, nav, fn] of routes) {
    const m = location.hash.match(re);
    if (!m) continue;
    document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
    try { await fn(view, ...m.slice(1).map(decodeURIComponent)); } catch (err) { view.replaceChildren(errorBox(err)); }
    return;
  }
  view.replaceChildren(h("p", {}, "No such page. ", h("a", { href: "#/" }, "Overview")));
}

async function health() {
  const pill = document.getElementById("health");
  try {
    const s = await api("GET", "/healthz");
    pill.textContent = s.role === "follower" ? "follower" : s.status;
    pill.className = "pill " + (s.status === "ok" ? "ok" : s.status === "read-only" ? "bad" : "warn");
  } catch (e) { pill.textContent = "unreachable"; pill.className = "pill bad"; }
}

document.getElementById("modal-close").addEventListener("click", hideModal);
document.getElementById("modal").addEventListener("click", (e) => { if (e.target.id === "modal") hideModal(); });
window.addEventListener("hashchange", route);
route();
health();
setInterval(health, 10000);
