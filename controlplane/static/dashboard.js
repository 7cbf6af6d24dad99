// Halyard dashboard: reads the control plane's /api/ views and follows its event log
// (server-sent events). Plain DOM, no framework, nothing loaded from elsewhere.
"use strict";

const MAX_EVENTS = 200;
const REFRESH_MS = 5000; // heartbeats and cluster time move without events
const DEBOUNCE_MS = 200;
const SVG = "http://www.w3.org/2000/svg";
const JOB_ROWS = 300; // newest jobs listed; the count says how many match
const ui = { selected: null, timer: null, soon: null, tenants: "" };

function $(id) { return document.getElementById(id); }

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "data") Object.assign(node.dataset, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

async function getJSON(url) {
  const reply = await fetch(url, { cache: "no-store" });
  if (reply.status === 401) { window.location.assign("/login"); throw new Error("logged out"); }
  if (!reply.ok) throw new Error(`${url}: ${reply.status} ${(await reply.json()).error ?? ""}`);
  return reply.json();
}

function duration(s) {
  s = Math.max(0, Number(s) || 0);
  if (s < 60) return `${s.toFixed(0)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, "0")}h`;
}

function clock(t) { // cluster seconds as d+hh:mm:ss
  t = Math.max(0, Number(t) || 0);
  const d = Math.floor(t / 86400), h = Math.floor((t % 86400) / 3600), m = Math.floor((t % 3600) / 60);
  const hms = [h, m, Math.floor(t % 60)].map((x) => String(x).padStart(2, "0")).join(":");
  return d ? `${d}d+${hms}` : hms;
}

function jobColor(id) { // a stable colour per job id: FNV-1a, spread over the hue circle by the golden angle
  let h = 0x811c9dc5;
  for (const ch of id) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return `hsl(${(h * 137.508) % 360} ${55 + (h % 3) * 10}% ${45 + ((h >>> 8) % 3) * 8}%)`;
}

function placement(job) {
  const nodes = job.allocation?.nodes ?? [];
  return nodes.map((n) => `${n.node}:${(n.gpus ?? []).join(",")}`).join(" ");
}

// --- cluster --------------------------------------------------------------------

function renderCluster(c) {
  $("cluster-name").textContent = c.name;
  $("policy").textContent = c.policy;
  $("cluster-time").textContent = clock(c.cluster_time);
  $("t-gpus").textContent = `${c.total_gpus - c.free_gpus} / ${c.total_gpus}`;
  $("t-util").textContent = c.gpu_utilization_measured == null ? "–" : `${(100 * c.gpu_utilization_measured).toFixed(0)}%`;
  $("t-running").textContent = c.running_jobs;
  $("t-pending").textContent = c.pending_jobs;
  $("t-agents").textContent = `${c.agents_connected} / ${c.nodes.length}`;
  $("t-drained").textContent = c.nodes_drained;
  const map = $("map");
  map.replaceChildren(...c.racks.map((rack) => el("div", { class: "rack" }, el("div", { class: "rack-name" }, rack),
    ...c.nodes.filter((n) => n.rack === rack).map(renderNode))));
}

function renderNode(n) {
  const cls = ["node", n.drained ? "drained" : "", n.connected ? "" : "offline"].join(" ");
  const gpus = el("div", { class: "gpus" }, ...n.slots.map((job, i) => {
    if (job === "") return el("span", { class: "gpu other", title: `GPU ${i}: another tenant's job` });
    const cell = el("span", { class: "gpu", title: job ? `GPU ${i}: ${job}` : `GPU ${i}: free` });
    if (job) { cell.style.background = jobColor(job); cell.dataset.job = job; }
    return cell;
  }));
  const util = n.gpu_utilization == null ? "" : `util ${(100 * n.gpu_utilization).toFixed(0)}%`;
  const status = !n.connected ? "no agent" : n.drained ? "drained" : n.healthy === false ? "unhealthy" : "";
  return el("div", { class: cls, data: { node: n.name }, title: n.health_detail || "" },
    el("div", { class: "name" }, el("span", {}, n.name), el("span", { class: "muted" }, status)),
    gpus,
    el("div", { class: "meta" }, [n.gpu_type, `${n.slots.length - n.free_gpus}/${n.slots.length} busy`, util]
      .filter(Boolean).join(" · ")));
}

// --- utilisation timeline ----------------------------------------------------------

function renderTimeline(t) {
  const W = 600, H = 200, L = 34, R = 30, T = 8, B = 20, w = W - L - R, h = H - T - B;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
    "aria-label": "GPU allocation and queue length over time" });
  const x = (i) => L + (w * i) / Math.max(1, t.time.length - 1);
  const maxPending = Math.max(1, ...t.pending);
  const yBusy = (v) => T + h - (h * v) / Math.max(1, t.total_gpus);
  const yPending = (v) => T + h - (h * v) / maxPending;
  let area = `M ${L} ${T + h}`;
  t.gpus_busy.forEach((v, i) => { area += ` L ${x(i)} ${yBusy(v)}`; });
  area += ` L ${x(t.time.length - 1)} ${T + h} Z`;
  const line = t.pending.map((v, i) => `${i ? "L" : "M"} ${x(i)} ${yPending(v)}`).join(" ");
  let measured = "", pen = "M"; // a gap where no agent had reported yet
  t.measured.forEach((v, i) => {
    if (v == null) { pen = "M"; return; }
    measured += ` ${pen} ${x(i)} ${T + h - h * v}`;
    pen = "L";
  });
  chart.append(svg("path", { d: area, class: "busy" }), svg("path", { d: line, class: "pending" }),
    svg("path", { d: measured || "M 0 0", class: "measured" }));
  for (const f of [0, 0.5, 1]) {
    chart.append(svg("line", { x1: L, x2: L + w, y1: T + h * (1 - f), y2: T + h * (1 - f), class: "axis" }));
    const label = svg("text", { x: L - 4, y: T + h * (1 - f) + 3, "text-anchor": "end" });
    label.textContent = `${(100 * f).toFixed(0)}%`;
    chart.append(label);
    if (Number.isInteger(maxPending * f)) {
      const right = svg("text", { x: L + w + 4, y: T + h * (1 - f) + 3 });
      right.textContent = maxPending * f;
      chart.append(right);
    }
  }
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const label = svg("text", { x: L + w * f, y: H - 4, "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" });
    label.textContent = f === 1 ? "now" : `-${duration((t.end - t.start) * (1 - f))}`;
    chart.append(label);
  }
  $("chart").replaceChildren(chart);
}

// --- jobs, queue, detail ------------------------------------------------------------

function fillSelect(select, values) {
  const keep = select.value;
  select.replaceChildren(select.options[0], ...values.map((v) => el("option", { value: v }, v)));
  select.value = values.includes(keep) ? keep : "";
}

function progress(job) {
  const total = Number(job.iterations_total) || 0;
  const f = total ? Math.min(1, Number(job.iterations_done) / total) : 0;
  const bar = el("span", { class: "bar", title: `${(100 * f).toFixed(1)}%` }, el("i"));
  bar.firstChild.style.width = `${(100 * f).toFixed(1)}%`;
  return bar;
}

function renderJobs(j) {
  if (ui.tenants !== j.tenants.join("\n")) { ui.tenants = j.tenants.join("\n"); fillSelect($("tenant-filter"), j.tenants); }
  if ($("state-filter").options.length === 1) fillSelect($("state-filter"), j.states);
  $("jobs-count").textContent = j.total;
  $("jobs").replaceChildren(...j.jobs.map((job) => {
    const id = job.spec.job_id;
    const row = el("tr", { data: { jobId: id }, class: id === ui.selected ? "selected" : "" },
      el("td", {}, el("span", { class: "dot" }), id), el("td", {}, job.spec.tenant), el("td", {}, job.spec.model),
      el("td", {}, job.spec.num_gpus), el("td", {}, el("span", { class: `state ${job.state}` }, job.state)),
      el("td", {}, progress(job)), el("td", {}, clock(job.submit_time)), el("td", {}, duration(Number(job.queued_s) + job.waiting_s)),
      el("td", {}, job.preemptions), el("td", { class: "muted" }, placement(job)));
    row.querySelector(".dot").style.background = job.state === "RUNNING" ? jobColor(id) : "transparent";
    row.addEventListener("click", () => { ui.selected = id; refresh(); });
    return row;
  }));
}

function renderQueue(q) {
  $("queue-count").textContent = q.total;
  $("queue").replaceChildren(...q.jobs.map((job) => el("tr", { data: { jobId: job.spec.job_id } },
    el("td", {}, job.spec.job_id), el("td", {}, job.spec.tenant), el("td", {}, job.spec.num_gpus),
    el("td", {}, duration(job.waiting_s)),
    el("td", {}, job.expected_start == null ? "–" : `in ${duration(job.expected_start - q.cluster_time)}`),
    el("td", { class: "why", title: why(job) }, ...breakable(why(job))))));
}

// A reason's text with a line-break opportunity after each "_", so a narrow cell wraps CANNOT_FIT_NOW
// between its words rather than at whatever letter reaches the edge.
function breakable(text) {
  return text.split("_").flatMap((part, i, parts) => (i < parts.length - 1 ? [part + "_", el("wbr")] : [part]));
}

// GetJob's wait reason: "CODE (stage): reason", or "–" before a pass has looked at the job.
function why(job) {
  return job.wait ? `${job.wait.code} (${job.wait.stage}): ${job.wait.reason}` : "–";
}

function renderDetail(d) {
  if (!d) { $("detail").replaceChildren(); return; }
  const job = d.job, spec = job.spec;
  $("detail-id").textContent = spec.job_id;
  const rows = [["state", job.state], ["tenant / user", `${spec.tenant} / ${spec.user || "–"}`],
    ["model", `${spec.model}, batch ${spec.batch_size || "reference"}`], ["GPUs", `${spec.num_gpus}${spec.gpu_type ? " × " + spec.gpu_type : ""}`],
    ["iterations", `${Math.floor(Number(job.iterations_done))} / ${job.iterations_total}`],
    ["submitted", clock(job.submit_time)], ["first start", job.start_time == null ? "–" : clock(job.start_time)],
    ["ended", job.end_time == null ? "–" : clock(job.end_time)], ["queued", duration(Number(job.queued_s) + job.waiting_s)],
    ["preemptions", job.preemptions], ["placement", placement(job) || "–"],
    ["environment", (job.env_names ?? []).join(" ") || "–"],
    ...(job.state === "PENDING" ? [["waiting", why(job)]] : [])];
  const dl = el("dl", {}, ...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const events = el("ol", { class: "job-events" }, ...d.events.map((e) =>
    el("li", {}, `${clock(e.time)} `, el("span", { class: "kind" }, e.kind), ` ${e.detail}`)));
  $("detail").replaceChildren(dl, el("b", {}, "events"), events);
}

// --- events (live) --------------------------------------------------------------------

function addEvent(e, live) {
  const list = $("events");
  const item = el("li", { class: live ? "new" : "", data: { seq: e.seq, jobId: e.job_id } },
    `#${e.seq} ${clock(e.time)} ${e.job_id} `, el("span", { class: "kind" }, e.kind), ` ${e.detail}`);
  list.prepend(item);
  while (list.children.length > MAX_EVENTS) list.lastChild.remove();
}

function follow() {
  let loaded = false;
  const source = new EventSource("/api/events");
  source.onopen = () => { $("live").className = "live on"; $("live").textContent = "live"; };
  source.onerror = () => { $("live").className = "live off"; $("live").textContent = "reconnecting"; };
  source.onmessage = (msg) => { addEvent(JSON.parse(msg.data), loaded); scheduleRefresh(); };
  setTimeout(() => { loaded = true; }, 500); // the first batch is history, later ones flash
}

// --- refresh ----------------------------------------------------------------------------

function scheduleRefresh() { // at most one refresh per DEBOUNCE_MS, however fast events come
  if (ui.soon) return;
  clearTimeout(ui.timer);
  ui.soon = setTimeout(() => { ui.soon = null; refresh(); }, DEBOUNCE_MS);
}

async function refresh() {
  clearTimeout(ui.timer);
  const filters = new URLSearchParams({ limit: JOB_ROWS });
  if ($("state-filter").value) filters.set("state", $("state-filter").value);
  if ($("tenant-filter").value) filters.set("tenant", $("tenant-filter").value);
  try {
    const [cluster, jobs, queue, timeline, detail] = await Promise.all([
      getJSON("/api/cluster"), getJSON(`/api/jobs?${filters}`), getJSON(`/api/queue?limit=${JOB_ROWS}`),
      getJSON(`/api/utilization${$("window").value ? `?window_s=${$("window").value}` : ""}`),
      ui.selected ? getJSON(`/api/jobs/${encodeURIComponent(ui.selected)}`) : Promise.resolve(null)]);
    renderCluster(cluster); renderJobs(jobs); renderQueue(queue); renderTimeline(timeline); renderDetail(detail);
    document.body.dataset.refreshed = String(Date.now());
  } catch (err) {
    $("live").className = "live off";
    $("live").textContent = String(err.message || err);
  }
  ui.timer = setTimeout(refresh, REFRESH_MS);
}

// --- who is looking ------------------------------------------------------------------

async function session() { // the caller; with a dashboard session, the logout form's CSRF token
  const s = await getJSON("/api/session");
  $("who").textContent = s.role === "tenant-user" ? `${s.name} (tenant ${s.tenant})` : `${s.name} (${s.role})`;
  $("insecure").hidden = !s.insecure;
  if (s.csrf) { $("logout-csrf").value = s.csrf; $("logout-form").hidden = false; }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const id of ["state-filter", "tenant-filter", "window"]) $(id).addEventListener("change", refresh);
  session().then(() => { refresh(); follow(); }, () => {});
});
