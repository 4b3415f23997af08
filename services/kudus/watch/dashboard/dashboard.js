// The Kudus dashboard: reads the monitor's stream as server-sent events
// from `kudus dashboard` (/events, one JSON object per message, the
// topic in "topic") and draws it with uPlot.  No network but its origin.
"use strict";

const NO_GROUP = 4294967295;
const PALETTE = ["#3b7dd8", "#d04848", "#2e9e5b", "#e0a030", "#8a4fd0", "#1fa3a3",
                 "#c0508a", "#6b7d2e", "#555", "#d87a3b"];

const state = {
  runs: [],             // {key, label, t0, t: [], acc: [], loss: [], p50: [], p99: [], dropped: [], regroups: []}
  current: null,
  workers: new Map(),   // rank -> last "worker" message
  shards: new Map(),    // rank -> last "shard" message
  members: new Map(),   // "role/rank" -> {role, rank, name, state}
  groups: [],           // group of each rank
  groupVersion: 0,
  regroups: 0,
  events: [],
  messages: 0,
  lastMessage: 0,
  connected: false,
  dirty: true,
};

// A new run starts when the model or consistency changes, or time goes
// back (kudus experiment runs its models one after another).
function runFor(m) {
  const key = `${m.consistency}/${m.model}`;
  const run = state.current;
  if (run && run.key === key && m.elapsed_s + 0.5 >= run.lastElapsed)
    return run;
  const same = state.runs.filter(r => r.key === key).length;
  const label = same ? `${m.consistency} (${same + 1})` : m.consistency;
  const next = { key, label, t0: m.t_ms - m.elapsed_s * 1000, lastElapsed: 0,
                 t: [], acc: [], loss: [], p50: [], p99: [], dropped: [], regroups: [] };
  state.runs.push(next);
  state.current = next;
  state.workers.clear();
  state.groups = [];
  state.charts_stale = true;
  return next;
}

function onStats(m) {
  const run = runFor(m);
  run.lastElapsed = m.elapsed_s;
  run.t.push(m.elapsed_s);
  run.acc.push(m.test_accuracy !== undefined ? m.test_accuracy : null);
  run.loss.push(m.train_loss !== undefined ? m.train_loss : null);
  run.p50.push(m.staleness_p50 || 0);
  run.p99.push(m.staleness_p99 || 0);
  run.dropped.push(m.dropped || 0);
  state.regroups = m.regroups || 0;
  const acc = m.test_accuracy !== undefined ? m.test_accuracy.toFixed(4) : "-";
  // auto shows what it runs now: "auto (alsp)".
  const model = m.mode && m.mode !== m.consistency ? `${m.consistency} (${m.mode})` : m.consistency;
  document.getElementById("headline").textContent =
    `${m.model}/${model}  t=${m.elapsed_s.toFixed(1)} s  version ${m.version}` +
    `  epoch ${(m.epoch || 0).toFixed(2)}  samples/s ${Math.round(m.samples_per_s || 0)}` +
    `  loss ${(m.train_loss || 0).toFixed(4)}  test acc ${acc}  workers ${m.workers}` +
    `  wait ${(100 * (m.wait_fraction || 0)).toFixed(1)}%`;
}

function member(role, rank, name) {
  const key = `${role}/${rank}`;
  let m = state.members.get(key);
  if (!m) {
    m = { role, rank, name: name || "", state: "alive" };
    state.members.set(key, m);
  }
  if (name)
    m.name = name;
  return m;
}

function onWorker(m) {
  state.workers.set(m.rank, m);
  const mem = member("worker", m.rank);
  if (mem.state === "dead" || mem.state === "left")
    mem.state = "rejoined";
}

function onShard(m) {
  state.shards.set(m.rank, m);
  member("shard", m.rank);
}

function onGroups(m) {
  state.groups = m.groups || [];
  state.groupVersion = m.version;
}

function onEvent(m) {
  state.events.push(m);
  if (state.events.length > 200)
    state.events.shift();
  if (m.kind === "regroup" && state.current)
    state.current.regroups.push((m.t_ms - state.current.t0) / 1000);
  if (m.role !== undefined && m.rank !== undefined) {
    const mem = member(m.role, m.rank, m.name);
    if (/-dead$/.test(m.kind)) mem.state = "dead";
    else if (/-left$/.test(m.kind)) mem.state = "left";
    else if (/-rejoin$|-restored$/.test(m.kind)) mem.state = "rejoined";
  }
}

function onMessage(e) {
  let m;
  try { m = JSON.parse(e.data); } catch (err) { return; }
  state.messages++;
  state.lastMessage = Date.now();
  if (m.topic === "stats") onStats(m);
  else if (m.topic === "worker") onWorker(m);
  else if (m.topic === "groups") onGroups(m);
  else if (m.topic === "event") onEvent(m);
  else if (m.topic === "shard") onShard(m);
  state.dirty = true;
}

// Charts.  uPlot wants one x array: uPlot.join merges the runs' series.
let accPlot = null, lossPlot = null, stalePlot = null;

function regroupLines(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.setLineDash([4, 4]);
  ctx.lineWidth = 1;
  state.runs.forEach((run, i) => {
    ctx.strokeStyle = PALETTE[i % PALETTE.length];
    for (const x of run.regroups) {
      const px = u.valToPos(x, "x", true);
      if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
      ctx.beginPath();
      ctx.moveTo(px, u.bbox.top);
      ctx.lineTo(px, u.bbox.top + u.bbox.height);
      ctx.stroke();
    }
  });
  ctx.restore();
}

function runsPlot(el, field, title, withRegroups) {
  const width = el.clientWidth || 800;
  const opts = {
    width, height: 240,
    scales: { x: { time: false } },
    axes: [{ label: "seconds" }, { label: title }],
    series: [{ label: "t (s)" }].concat(state.runs.map((r, i) => ({
      label: r.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true,
    }))),
    hooks: withRegroups ? { draw: [regroupLines] } : {},
  };
  return new uPlot(opts, runsData(field), el);
}

function runsData(field) {
  if (!state.runs.length) return [[]];
  return uPlot.join(state.runs.map(r => [r.t, r[field]]));
}

function staleData() {
  const r = state.current;
  return r ? [r.t, r.p50, r.p99, r.dropped] : [[], [], [], []];
}

function makeStalePlot(el) {
  return new uPlot({
    width: el.clientWidth || 400, height: 220,
    scales: { x: { time: false } },
    axes: [{ label: "seconds" }, { label: "versions" }, { side: 1, scale: "drops", label: "dropped", grid: { show: false } }],
    series: [{ label: "t (s)" },
             { label: "p50", stroke: "#3b7dd8" },
             { label: "p99", stroke: "#d04848" },
             { label: "dropped", stroke: "#888", scale: "drops", dash: [4, 2] }],
  }, staleData(), el);
}

function drawCharts() {
  const accEl = document.getElementById("acc-chart");
  const lossEl = document.getElementById("loss-chart");
  const staleEl = document.getElementById("stale-chart");
  if (state.charts_stale || !accPlot) {
    for (const p of [accPlot, lossPlot, stalePlot]) if (p) p.destroy();
    accPlot = runsPlot(accEl, "acc", "test accuracy", true);
    lossPlot = runsPlot(lossEl, "loss", "train loss", false);
    stalePlot = makeStalePlot(staleEl);
    state.charts_stale = false;
  } else {
    accPlot.setData(runsData("acc"));
    lossPlot.setData(runsData("loss"));
    stalePlot.setData(staleData());
  }
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function drawWorkers() {
  const body = document.querySelector("#workers tbody");
  const ranks = [...state.workers.keys()].sort((a, b) => a - b);
  let widest = 1;
  for (const r of ranks) {
    const w = state.workers.get(r);
    widest = Math.max(widest, (w.compute_ms || 0) + (w.push_ms || 0) + (w.wait_ms || 0) + (w.pull_ms || 0));
  }
  const rows = [];
  for (const r of ranks) {
    const w = state.workers.get(r);
    const mem = state.members.get(`worker/${r}`);
    const tr = document.createElement("tr");
    tr.dataset.rank = r;
    tr.appendChild(cell(r));
    const st = mem ? mem.state : "alive";
    tr.appendChild(cell(st, `state-${st}`));
    const g = state.groups[r];
    tr.appendChild(cell(g === undefined || g === NO_GROUP ? "-" : g));
    tr.appendChild(cell(Math.round(w.samples_per_s || 0)));
    const bar = document.createElement("div");
    bar.className = "bar";
    for (const part of ["compute", "push", "wait", "pull"]) {
      const span = document.createElement("span");
      span.className = part;
      span.style.width = `${(100 * (w[`${part}_ms`] || 0) / widest).toFixed(2)}%`;
      span.title = `${part} ${(w[`${part}_ms`] || 0).toFixed(1)} ms`;
      bar.appendChild(span);
    }
    const td = cell("", "bar-col");
    td.appendChild(bar);
    tr.appendChild(td);
    tr.appendChild(cell((w.iter_ms || 0).toFixed(1)));
    tr.appendChild(cell(w.staleness || 0));
    tr.appendChild(cell(w.dropped || 0));
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

function drawShards() {
  const body = document.querySelector("#shards tbody");
  const ranks = [...state.shards.keys()].sort((a, b) => a - b);
  body.replaceChildren(...ranks.map(r => {
    const s = state.shards.get(r);
    const tr = document.createElement("tr");
    tr.dataset.rank = r;
    for (const v of [r, s.version, s.pushes, s.pulls, s.commits,
                     ((s.bytes_in || 0) / 1e6).toFixed(1), ((s.bytes_out || 0) / 1e6).toFixed(1),
                     s.staged, s.checkpoints,
                     s.checkpoint_age_s !== undefined ? `${s.checkpoint_age_s.toFixed(1)} s` : "-"])
      tr.appendChild(cell(v === undefined ? "-" : v));
    return tr;
  }));
}

function drawGroups() {
  const el = document.getElementById("groups");
  const byGroup = new Map();
  state.groups.forEach((g, rank) => {
    if (g === NO_GROUP) return;
    if (!byGroup.has(g)) byGroup.set(g, []);
    byGroup.get(g).push(rank);
  });
  const chips = [...byGroup.keys()].sort((a, b) => a - b).map(g => {
    const span = document.createElement("span");
    span.className = "group";
    span.style.background = PALETTE[g % PALETTE.length];
    span.textContent = `group ${g}: ${byGroup.get(g).join(" ")}`;
    return span;
  });
  el.replaceChildren(...chips);
  document.getElementById("group-note").textContent = byGroup.size
    ? `${byGroup.size} groups at version ${state.groupVersion}, ${state.regroups} regroups`
    : "no groups (not ALSP)";
}

function drawMembers() {
  const body = document.querySelector("#members tbody");
  const list = [...state.members.values()].sort((a, b) =>
    a.role.localeCompare(b.role) || a.rank - b.rank);
  body.replaceChildren(...list.map(m => {
    const tr = document.createElement("tr");
    tr.appendChild(cell(m.role));
    tr.appendChild(cell(m.rank));
    tr.appendChild(cell(m.name));
    tr.appendChild(cell(m.state, `state-${m.state}`));
    return tr;
  }));
}

function drawEvents() {
  const ol = document.getElementById("events");
  ol.replaceChildren(...state.events.slice(-50).reverse().map(e => {
    const li = document.createElement("li");
    const t = e.t_ms ? new Date(e.t_ms).toLocaleTimeString() : "";
    li.textContent = `${t} ${e.kind}: ${e.detail || ""}`;
    return li;
  }));
}

function drawStatus() {
  const el = document.getElementById("status");
  const quiet = Date.now() - state.lastMessage > 5000;
  el.className = "status " + (!state.connected ? "off" : quiet ? "idle" : "on");
  el.textContent = !state.connected ? "disconnected" : quiet ? "no data for 5 s" : "live";
}

function draw() {
  drawStatus();
  if (!state.dirty) return;
  state.dirty = false;
  drawCharts();
  drawWorkers();
  drawShards();
  drawGroups();
  drawMembers();
  drawEvents();
}

// For tests and for the curious: what the page has drawn.
window.kudusDashboard = {
  summary() {
    return {
      connected: state.connected,
      messages: state.messages,
      runs: state.runs.map(r => ({ label: r.label, points: r.t.length,
                                   accuracy_points: r.acc.filter(v => v !== null).length })),
      ranks: [...state.workers.keys()].sort((a, b) => a - b),
      table_rows: document.querySelectorAll("#workers tbody tr").length,
      shard_rows: document.querySelectorAll("#shards tbody tr").length,
      groups: state.groups.filter(g => g !== NO_GROUP).length,
    };
  },
};

const source = new EventSource("/events");
source.onopen = () => { state.connected = true; };
source.onerror = () => { state.connected = false; };
source.onmessage = onMessage;
window.addEventListener("resize", () => { state.charts_stale = true; state.dirty = true; });
setInterval(draw, 500);
