// gkr-ui: the page of `gkr ui`. runtime/telemetry/ui/server.py serves it and the JSON it reads.
//
// Everything is drawn here as DOM and inline SVG built node by node: text from the store (run
// names, event messages) only ever becomes text nodes or attribute values, never markup, and
// nothing is loaded from anywhere but this server (the CSP forbids it too).
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
const WINDOWS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600];
let generation = 0; // bumped at each navigation: requests of a page left behind stop retrying

// ---- DOM ------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVGNS, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function card(title, id, ...children) {
  return el("section", {class: "card", id}, el("h2", {}, title),
            el("div", {class: "body"}, ...children));
}

function table(columns, rows, attrs) {
  const {rowClass, ...rest} = attrs || {};
  const head = el("tr", {}, columns.map((c) => el("th", {class: c.num ? "num" : null}, c.label)));
  const body = rows.map((row) => el("tr", {class: rowClass ? rowClass(row) : null},
    columns.map((c) => el("td", {class: c.num ? "num" : c.text ? "text" : null},
                          c.show ? c.show(row) : show(row[c.key])))));
  return el("div", {class: "scroll"}, el("table", rest, el("thead", {}, head),
                                        el("tbody", {}, body)));
}

function badge(text, kind) {
  return el("span", {class: `badge ${kind || text}`}, text);
}

function runLink(run) {
  return el("a", {href: `#/run/${encodeURIComponent(run)}`, class: "run"}, run);
}

// ---- formatting -----------------------------------------------------------------------------

function show(value) {
  if (value === null || value === undefined || value === "") return "—";
  if (typeof value === "number") return num(value);
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

function num(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "—";
  const abs = Math.abs(value);
  if (abs >= 1e9) return `${(value / 1e9).toFixed(2)}G`;
  if (abs >= 1e6) return `${(value / 1e6).toFixed(2)}M`;
  if (abs >= 1e4) return `${(value / 1e3).toFixed(1)}k`;
  if (Number.isInteger(value)) return String(value);
  return abs >= 100 ? value.toFixed(0) : abs >= 1 ? value.toFixed(2) : value.toPrecision(3);
}

function micros(us) {
  if (us === null || us === undefined) return "—";
  return us >= 1000 ? `${num(us / 1000)} ms` : `${num(us)} µs`;
}

function when(iso) {
  return iso ? iso.replace("T", " ").replace(/\.\d+/, "") : "—";
}

// UTC time of day; with the tenths or milliseconds a sub-second tick step needs.
function clock(ms, step) {
  const digits = !step || step >= 1000 ? 19 : step >= 100 ? 21 : 23;
  return new Date(ms).toISOString().slice(11, digits);
}

function duration(first, last) {
  const s = Math.max(0, Math.round((Date.parse(last) - Date.parse(first)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m${s % 60}s`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
}

// ---- data -----------------------------------------------------------------------------------

class Left extends Error {} // the user navigated away: stop quietly

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function notice(text, kind) {
  const box = document.getElementById("notice");
  box.className = `notice ${kind || ""}`;
  box.replaceChildren(text);
  box.hidden = !text;
}

// GET JSON. A busy store (a run is writing to it: 503) is shown and asked again after the
// server's Retry-After, until it answers or the user leaves the page.
async function api(path) {
  const mine = generation;
  for (;;) {
    let response;
    try {
      response = await fetch(path, {headers: {Accept: "application/json"}});
    } catch (error) {
      notice(`gkr ui is not answering (${error.message}); asking again in 5 s`, "error");
      await sleep(5000);
      if (mine !== generation) throw new Left();
      continue;
    }
    const body = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
    if (response.status === 503 && body.busy) {
      const wait = Number(response.headers.get("Retry-After")) || 5;
      notice(`${body.error} — asking again every ${wait} s`, "busy");
      await sleep(wait * 1000);
      if (mine !== generation) throw new Left();
      continue;
    }
    notice("");
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    if (body.store) document.getElementById("store").replaceChildren(`store ${body.store}`);
    return body;
  }
}

// Fill a card's body from one endpoint; its failure stays in that card.
async function fill(section, path, draw) {
  const body = section.querySelector(".body");
  body.replaceChildren(el("p", {class: "muted"}, "loading…"));
  try {
    const data = await api(path);
    body.replaceChildren(...[draw(data)].flat().filter((part) => part !== null));
    return data;
  } catch (error) {
    if (error instanceof Left) throw error;
    body.replaceChildren(el("p", {class: "error"}, error.message));
    return null;
  }
}

// ---- charts ---------------------------------------------------------------------------------

function ticks(lo, hi, count) {
  const raw = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => raw <= s) || power * 10;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

// A tick's label, with the decimals its step needs (0.52, 0.54; 31.90k, 31.95k).
function tickLabel(value, step) {
  const [scale, suffix] = Math.abs(value) >= 1e6 ? [1e6, "M"] : Math.abs(value) >= 1e4
    ? [1e3, "k"] : [1, ""];
  const decimals = Math.min(6, Math.max(0, -Math.floor(Math.log10(step / scale) + 1e-9)));
  return `${(value / scale).toFixed(decimals)}${suffix}`;
}

function extent(values, pad) {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo === hi) [lo, hi] = [lo - (Math.abs(lo) || 1) / 2, hi + (Math.abs(hi) || 1) / 2];
  const margin = (hi - lo) * pad;
  return [lo - margin, hi + margin];
}

function pathOf(points, x, y) {
  let d = "";
  let pen = false;
  for (const [px, py] of points) {
    if (py === null || py === undefined || !Number.isFinite(py)) {
      pen = false;
      continue;
    }
    d += `${pen ? "L" : "M"}${x(px).toFixed(1)},${y(py).toFixed(1)}`;
    pen = true;
  }
  return d;
}

// A line chart: spec = {id, title, time (x in ms), series: [{name, points: [[x, y]], dash}],
// band: {lo: [[x, y]], hi: [[x, y]]} (a shaded range, e.g. min–max over ranks)}.
function lineChart(spec) {
  const W = 560, H = 210, L = 58, R = 14, T = 10, B = 28;
  const finite = (p) => p[1] !== null && Number.isFinite(p[1]);
  const shown = spec.series.flatMap((s) => s.points.filter(finite));
  const banded = spec.band ? [...spec.band.lo, ...spec.band.hi].filter(finite) : [];
  const keys = spec.series.map((s, i) => el("span", {class: "key"},
    svg("svg", {width: 14, height: 4}, svg("line", {x1: 0, y1: 2, x2: 14, y2: 2,
      stroke: s.color || PALETTE[i], "stroke-width": 3, "stroke-dasharray": s.dash})), s.name));
  const caption = el("figcaption", {}, el("div", {class: "title"}, spec.title),
                     el("div", {class: "keys"}, keys));
  if (!shown.length) {
    return el("figure", {class: "chart-box", "data-chart": spec.id}, caption,
              el("p", {class: "muted"}, "no data"));
  }
  const [x0, x1] = extent(shown.map((p) => p[0]), 0);
  const [y0, y1] = extent([...shown, ...banded].map((p) => p[1]), 0.06);
  const x = (v) => L + ((v - x0) / (x1 - x0)) * (W - L - R);
  const y = (v) => H - B - ((v - y0) / (y1 - y0)) * (H - T - B);
  const root = svg("svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, "data-chart": spec.id,
                           role: "img", "aria-label": spec.title});
  const yTicks = ticks(y0, y1, 4);
  for (const v of yTicks) {
    root.append(svg("line", {class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v)}),
                svg("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end"},
                    tickLabel(v, yTicks[1] - yTicks[0] || 1)));
  }
  const xTicks = ticks(x0, x1, 5);
  for (const v of xTicks) {
    const anchor = x(v) > W - R - 30 ? "end" : x(v) < L + 20 ? "start" : "middle";
    root.append(svg("text", {x: x(v), y: H - 8, "text-anchor": anchor},
                    spec.time ? clock(v, xTicks[1] - xTicks[0]) : num(v)));
  }
  root.append(svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
  if (spec.band) {
    const hi = pathOf(spec.band.hi, x, y);
    const lo = pathOf([...spec.band.lo].reverse(), x, y).replace(/^M/, "L");
    if (hi && lo) {
      root.append(svg("path", {class: "band", d: `${hi}${lo}Z`, fill: PALETTE[0],
                               "fill-opacity": 0.12}));
    }
  }
  spec.series.forEach((s, i) => {
    const points = s.points.filter(finite);
    const color = s.color || PALETTE[i];
    root.append(svg("path", {class: "series", d: pathOf(s.points, x, y), stroke: color,
                             "stroke-dasharray": s.dash, "data-series": s.name,
                             "data-points": points.length}));
    if (points.length === 1) {
      root.append(svg("circle", {cx: x(points[0][0]), cy: y(points[0][1]), r: 3, fill: color}));
    }
  });
  return el("figure", {class: "chart-box"}, caption, root);
}

function heatColor(t) {
  // light yellow -> orange -> dark red: late ranks stand out.
  const stops = [[255, 247, 212], [253, 141, 60], [165, 15, 21]];
  const k = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(k));
  const f = k - i;
  const c = stops[i].map((a, j) => Math.round(a + (stops[i + 1][j] - a) * f));
  return `rgb(${c.join(",")})`;
}

// Rank × window cells: how late each rank arrived at its collectives, per window.
function heatmapChart(map) {
  const cols = map.windows.length, rows = map.ranks.length;
  const cw = Math.max(6, Math.min(32, Math.floor(900 / Math.max(cols, 1))));
  const ch = Math.max(10, Math.min(24, Math.floor(420 / Math.max(rows, 1))));
  const L = 64, T = 8, B = 40, W = L + cols * cw + 16, H = T + rows * ch + B;
  const values = map.late_us.flat().filter((v) => v !== null);
  const top = Math.max(...values, 1e-9);
  const root = svg("svg", {class: "heatmap", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                           "data-chart": "heatmap", role: "img",
                           "aria-label": "rank by window straggler heatmap"});
  map.ranks.forEach((rank, r) => {
    root.append(svg("text", {x: L - 6, y: T + r * ch + ch / 2 + 4, "text-anchor": "end"},
                    `rank ${rank}`));
    map.windows.forEach((start, c) => {
      const late = map.late_us[r][c];
      const last = map.last[r][c], groups = map.groups[r][c];
      const tip = late === null ? `rank ${rank}, ${when(start)}: no samples`
        : `rank ${rank}, ${when(start)}: ${micros(late)} after the first arriver on average; ` +
          `last in ${last} of ${groups} groups`;
      root.append(svg("rect", {
        class: last * 2 > groups ? "cell last" : "cell", x: L + c * cw, y: T + r * ch,
        width: cw, height: ch, fill: late === null ? "#eef2f6" : heatColor(late / top),
        "data-rank": rank, "data-window": start, "data-late-us": late,
      }, svg("title", {}, tip)));
    });
  });
  const every = Math.max(1, Math.ceil(70 / cw)); // a time label needs about 70 px
  map.windows.forEach((start, c) => {
    if (c % every === 0) {
      root.append(svg("text", {x: L + c * cw, y: T + rows * ch + 14},
                      clock(Date.parse(start))));
    }
  });
  const legend = el("span", {class: "key legend"}, el("span", {}, "0"),
    svg("svg", {width: 100, height: 10}, [0, 1, 2, 3, 4].map((i) =>
      svg("rect", {x: i * 20, y: 0, width: 20, height: 10, fill: heatColor(i / 4)}))),
    el("span", {}, `${micros(top)} after the first arriver, mean over the window's groups ` +
                   "(outlined: last to arrive in most groups)"));
  return [el("div", {class: "controls"}, legend), el("div", {class: "heatmap-box"}, root)];
}

// ---- pages ----------------------------------------------------------------------------------

const RUN_COLUMNS = [
  {label: "Run", show: (r) => runLink(r.run), text: true},
  {label: "State", show: (r) => stateBadge(r.state)},
  {key: "cluster", label: "Cluster"}, {key: "namespace", label: "Namespace"},
  {key: "job", label: "Job"}, {key: "ranks", label: "Ranks", num: true},
  {key: "last_step", label: "Last step", num: true},
  {label: "First seen", show: (r) => when(r.first_ts)},
  {label: "Last seen", show: (r) => when(r.last_ts)},
  {label: "Duration", show: (r) => duration(r.first_ts, r.last_ts), num: true},
];

function stateBadge(state) {
  const name = {Started: "running", Succeeded: "succeeded", Failed: "failed"}[state];
  return name ? badge(name) : badge("unknown");
}

const EVENT_COLUMNS = [
  {label: "Time", show: (e) => when(e.ts)},
  {label: "Run", show: (e) => (e.run ? runLink(e.run) : "—"), text: true},
  {key: "source", label: "Source"},
  {label: "Object", show: (e) => `${e.object_kind} ${e.object_name}`, text: true},
  {key: "reason", label: "Reason"},
  {label: "Severity", show: (e) => badge(e.severity || "Normal")},
  {key: "message", label: "Message", text: true},
  {key: "node", label: "Node"},
];

function eventsTable(events) {
  if (!events.length) return el("p", {class: "muted"}, "No events recorded.");
  return table(EVENT_COLUMNS, events, {id: "events"});
}

function runsTable(body) {
  if (!body.runs.length) {
    return el("p", {class: "muted"}, "No runs in this store yet: ",
              el("code", {}, "gkr run --local examples/train/tiny.yaml"), " writes one.");
  }
  return table(RUN_COLUMNS, body.runs, {id: "runs"});
}

function clusterPanel(body) {
  if (!body.reachable) {
    return el("p", {class: "unreachable", id: "no-cluster"}, "No cluster reachable: ",
              body.reason);
  }
  return [
    el("p", {class: "muted"}, `context ${show(body.context)} at ${body.host}`),
    el("h3", {}, `Nodes (${body.nodes.length})`),
    table([{key: "name", label: "Node"}, {label: "Ready", show: (n) => readyBadge(n.ready)},
           {key: "cordoned", label: "Cordoned"}, {key: "instance_type", label: "Type"},
           {key: "warden_state", label: "Warden"}], body.nodes, {id: "nodes"}),
    el("h3", {}, `GKR pods (${body.pods.length})`),
    table([{key: "namespace", label: "Namespace"}, {key: "name", label: "Pod", text: true},
           {key: "job", label: "Job"}, {key: "role", label: "Role"},
           {key: "phase", label: "Phase"}, {key: "node", label: "Node"},
           {key: "restarts", label: "Restarts", num: true},
           {label: "Started", show: (p) => when(p.started)}], body.pods, {id: "pods"}),
  ];
}

function readyBadge(ready) {
  return ready ? badge("ready", "ok") : badge("not ready", "bad");
}

function wardenPanel(body) {
  if (!body.reachable) {
    return el("p", {class: "unreachable", id: "no-warden"}, "Warden not reachable: ",
              body.reason);
  }
  if (!body.nodes.length) return el("p", {class: "muted"}, "Warden has handled no node.");
  const nodes = [...body.nodes].sort((a, b) => Number(b.working) - Number(a.working));
  const working = nodes.filter((n) => n.working).length;
  return [
    el("p", {class: "muted"}, `${working} node(s) in an open incident, from ${body.address}`),
    table([{key: "node", label: "Node"},
           {label: "Incident", show: (n) => (n.working ? badge("working") : n.status)},
           {key: "phase", label: "Phase"}, {label: "Started", show: (n) => when(n.started)},
           {key: "recent_cordons", label: "Recent cordons", num: true},
           {key: "reserved_for", label: "Reserved for"},
           {label: "Reserved until", show: (n) => when(n.reserved_until)}],
          nodes, {id: "warden", rowClass: (n) => (n.working ? "working" : null)}),
  ];
}

async function homePage(main) {
  document.title = "gkr ui";
  const runs = card("Runs", "runs-card");
  const cluster = card("Cluster", "cluster-card");
  const warden = card("Nodes Warden is working on", "warden-card");
  const events = card("Recent events", "events-card");
  main.replaceChildren(runs, cluster, warden, events);
  await Promise.all([
    fill(runs, "/api/runs", runsTable),
    fill(cluster, "/api/cluster", clusterPanel),
    fill(warden, "/api/warden", wardenPanel),
    fill(events, "/api/events", (body) => eventsTable(body.events)),
  ]);
}

function runHeader(s) {
  const fact = (label, value) => el("div", {}, el("dt", {}, label), el("dd", {}, value));
  return el("section", {class: "card", id: "run-header"},
    el("a", {href: "#/"}, "← all runs"),
    el("h1", {id: "run-name"}, s.run),
    el("dl", {class: "facts"},
       fact("state", stateBadge(s.state)), fact("cluster", show(s.cluster)),
       fact("namespace", show(s.namespace)), fact("job", show(s.job)),
       fact("ranks", show(s.ranks)), fact("last step", show(s.last_step)),
       fact("first seen", when(s.first_ts)), fact("last seen", when(s.last_ts)),
       fact("duration", duration(s.first_ts, s.last_ts))));
}

function trainingCharts(steps) {
  const at = (key) => steps.map((r) => [r.step_from, r[key]]);
  return el("div", {class: "charts"},
    lineChart({id: "loss", title: "Loss (mean over ranks; band: min–max)",
               series: [{name: "mean", points: at("loss_mean")}],
               band: {lo: at("loss_min"), hi: at("loss_max")}}),
    lineChart({id: "samples", title: "Throughput (samples/s, all ranks)",
               series: [{name: "samples/s", points: at("run_samples_per_s"),
                         color: PALETTE[2]}]}),
    lineChart({id: "tokens", title: "Throughput (tokens/s, all ranks)",
               series: [{name: "tokens/s", points: at("run_tokens_per_s"),
                         color: PALETTE[3]}]}),
    lineChart({id: "step-time", title: "Step time (s)",
               series: [{name: "mean", points: at("step_time_mean_s")},
                        {name: "slowest rank", points: at("step_time_max_s"),
                         color: PALETTE[1]}]}));
}

function bytes(value) {
  return value === null || value === undefined ? "—" : `${(value / 2 ** 30).toFixed(1)} GiB`;
}

function percent(fraction) {
  return fraction === null || fraction === undefined ? "—" : `${(fraction * 100).toFixed(1)}%`;
}

// Memory as measured: the CUDA allocator's peak where a rank used CUDA, else the process's
// peak resident set (runtime/telemetry/schema/0007_step_throughput.sql).
function memoryOf(rows) {
  const cuda = rows.some((r) => r.cuda_peak_allocated_bytes !== null);
  return cuda ? {key: "cuda_peak_allocated_bytes", title: "Peak CUDA memory allocated (GiB)"}
              : {key: "rss_peak_bytes", title: "Peak resident memory of the process (GiB)"};
}

const RANK_COLUMNS = [
  {label: "Rank", num: true, show: (r) => String(r.rank)},
  {key: "pod", label: "Pod", text: true}, {key: "node", label: "Node", text: true},
  {key: "steps", label: "Steps", num: true},
  {key: "tokens_per_s_mean", label: "Tokens/s", num: true},
  {label: "MFU", num: true, show: (r) => percent(r.mfu_mean)},
  {label: "Mean step", num: true, show: (r) => `${num(r.step_time_mean_s)} s`},
  {label: "Slowest step", num: true, show: (r) => `${num(r.step_time_max_s)} s`},
  {label: "CUDA allocated", num: true, show: (r) => bytes(r.cuda_peak_allocated_bytes)},
  {label: "CUDA reserved", num: true, show: (r) => bytes(r.cuda_peak_reserved_bytes)},
  {label: "Peak RSS", num: true, show: (r) => bytes(r.rss_peak_bytes)},
];

// Per-rank curves of the slowest ranks (by tokens/s), then every rank's figures.
function rankSection(ranks) {
  if (!ranks.table.length) return el("p", {class: "muted"}, "No training steps recorded.");
  const memory = memoryOf(ranks.table);
  const chart = (id, title, key, scale) => lineChart({id, title,
    series: ranks.curves.map((c, i) => ({
      name: `rank ${c.rank}`, color: PALETTE[i % PALETTE.length],
      points: c.steps.map((p) => [p.step_from, p[key] === null ? null : p[key] * scale])}))});
  const drawn = ranks.curves.length < ranks.ranks_total
    ? el("p", {class: "muted"}, `curves of the ${ranks.curves.length} slowest of ` +
                                `${ranks.ranks_total} ranks (by tokens/s)`) : null;
  return [
    el("div", {class: "charts"},
       chart("rank-tokens", "Tokens/s per rank", "tokens_per_s_mean", 1),
       chart("rank-mfu", "MFU per rank (%)", "mfu_mean", 100),
       chart("rank-memory", memory.title, memory.key, 1 / 2 ** 30),
       chart("rank-step-time", "Step time per rank (s)", "step_time_mean_s", 1)),
    drawn,
    table(RANK_COLUMNS, ranks.table, {id: "ranks"}),
  ];
}

function fleetSection(fleet, health) {
  const services = Object.keys(fleet);
  if (!services.length) return el("p", {class: "muted"}, "No FleetMonitor summaries.");
  const t = (rows, key) => rows.map((r) => [Date.parse(r.at), r[key]]);
  const healthTable = table([
    {key: "service", label: "Service"},
    {label: "Workers healthy", num: true, show: (h) => `${h.workers_healthy}/${h.workers_known}`},
    {label: "Health", show: (h) => (h.workers_healthy < h.workers_known || h.errors
      ? badge("degraded", "bad") : badge("healthy", "ok"))},
    {key: "pending", label: "Pending", num: true},
    {key: "throughput_rps", label: "Requests/s", num: true},
    {key: "restarts", label: "Restarts", num: true}, {key: "errors", label: "Errors", num: true},
    {label: "Last report", show: (h) => when(h.last_ts)}], health, {id: "health"});
  const latency = services.map((name) => lineChart({
    id: `fleet-${name}`, title: `${name}: latency (ms; dashed p99)`, time: true,
    series: [
      {name: "queue p50", points: t(fleet[name], "queue_wait_ms_p50"), color: PALETTE[0]},
      {name: "processing p50", points: t(fleet[name], "process_ms_p50"), color: PALETTE[2]},
      {name: "transfer p50", points: t(fleet[name], "transfer_ms_p50"), color: PALETTE[4]},
      {name: "queue p99", points: t(fleet[name], "queue_wait_ms_p99"), color: PALETTE[0],
       dash: "4 3"},
      {name: "processing p99", points: t(fleet[name], "process_ms_p99"), color: PALETTE[2],
       dash: "4 3"},
      {name: "transfer p99", points: t(fleet[name], "transfer_ms_p99"), color: PALETTE[4],
       dash: "4 3"}]}));
  const rate = lineChart({id: "fleet-rate", title: "Requests/s per service", time: true,
    series: services.map((name, i) => ({name, points: t(fleet[name], "throughput_rps"),
                                        color: PALETTE[i % PALETTE.length]}))});
  return [healthTable, el("div", {class: "charts"}, rate, ...latency)];
}

function stragglerTable(ranks) {
  return table([
    {label: "Rank", num: true, show: (r) => String(r.rank)},
    {label: "", show: (r) => (r.persistent ? badge("persistent straggler", "persistent") : "")},
    {key: "pod", label: "Pod", text: true}, {key: "node", label: "Node", text: true},
    {key: "times_last", label: "Times last", num: true},
    {key: "groups", label: "Groups", num: true},
    {label: "Share last", num: true, show: (r) => `${(r.share_last * 100).toFixed(0)}%`},
    {label: "Mean skew", num: true, show: (r) => micros(r.mean_skew_us)},
    {label: "Max skew", num: true, show: (r) => micros(r.max_skew_us)},
    {label: "Mean waiting", num: true, show: (r) => micros(r.mean_waiting_us)},
  ], ranks, {id: "stragglers", rowClass: (r) => (r.persistent ? "persistent" : null)});
}

function stragglerBody(body) {
  if (!body.available) return el("p", {class: "muted", id: "no-stragglers"}, body.message);
  const map = body.heatmap;
  const cut = map.ranks.length < map.ranks_total || map.windows.length < map.windows_total;
  return [
    ...heatmapChart(map),
    cut ? el("p", {class: "muted"}, `showing ${map.ranks.length} of ${map.ranks_total} ranks ` +
                                    `(the most persistent) and the latest ${map.windows.length} ` +
                                    `of ${map.windows_total} windows`) : null,
    el("h3", {}, "Persistent stragglers: who arrived last, how often and by how much"),
    stragglerTable(body.ranks),
  ];
}

function stragglerCard(run) {
  const section = card("Stragglers (rank × window)", "stragglers-card");
  const pick = el("select", {id: "window", "aria-label": "window"},
    WINDOWS_S.map((s) => el("option", {value: s, selected: s === 30 ? "" : null}, `${s} s`)));
  const load = () => fill(section, `/api/runs/${encodeURIComponent(run)}/stragglers?window=` +
                                   pick.value, stragglerBody);
  pick.addEventListener("change", () => load().catch(() => {}));
  section.insertBefore(el("div", {class: "controls"}, el("label", {for: "window"}, "window"),
                          pick), section.querySelector(".body"));
  return {section, load};
}

const PLACEMENT_COLUMNS = [
  {key: "role", label: "Role"},
  {label: "Rank", num: true, show: (p) => (p.rank < 0 ? "—" : String(p.rank))},
  {key: "pod", label: "Pod", text: true}, {key: "node", label: "Node", text: true},
  {key: "cluster", label: "Cluster"}, {key: "namespace", label: "Namespace"},
  {key: "learner", label: "Learner"},
  {label: "Replica group", num: true,
   show: (p) => (p.replica_group < 0 ? "—" : String(p.replica_group))},
  {label: "First seen", show: (p) => when(p.first_ts)},
  {label: "Last seen", show: (p) => when(p.last_ts)},
  {label: "Live", show: (p) => el("span", {class: "live", "data-pod": p.pod}, "…")},
];

// Live pod phases beside the run's pods, when a cluster answers.
async function markLive(section) {
  const live = await api("/api/cluster").catch((error) => {
    if (error instanceof Left) throw error;
    return {reachable: false, reason: error.message};
  });
  const phases = new Map((live.pods || []).map((p) => [p.name, p.phase]));
  for (const cell of section.querySelectorAll("span.live")) {
    cell.replaceChildren(live.reachable ? show(phases.get(cell.dataset.pod) || "not running")
                                        : "—");
  }
  if (!live.reachable) {
    section.querySelector(".body").prepend(
      el("p", {class: "unreachable", id: "no-cluster"}, "No cluster reachable: ", live.reason));
  }
}

// The sample ledger's verdict (runtime/telemetry/ledger_verdict.py), in its own words.
function ledgerCard(ledger) {
  const body = ledger.available
    ? [badge(ledger.exactly_once ? "exactly once" : "not exactly once",
             ledger.exactly_once ? "ok" : "bad"),
       el("pre", {class: "verdict", id: "ledger-verdict"}, ledger.text)]
    : [el("p", {class: "muted", id: "no-ledger"}, ledger.message)];
  return card("Samples: trained exactly once?", "ledger-card", ...body);
}

async function runPage(main, run) {
  document.title = `gkr ui: ${run}`;
  main.replaceChildren(el("p", {class: "muted"}, "loading…"));
  const page = await api(`/api/runs/${encodeURIComponent(run)}`);
  const stragglers = stragglerCard(run);
  const placement = card("Pods and nodes", "placement-card",
                         table(PLACEMENT_COLUMNS, page.placement, {id: "placement"}));
  main.replaceChildren(
    runHeader(page.summary),
    card("Training", "training-card", trainingCharts(page.steps)),
    ledgerCard(page.ledger),
    card("Ranks: throughput, MFU, memory and step time", "ranks-card", rankSection(page.ranks)),
    card("Auxiliary services", "fleet-card", fleetSection(page.fleet, page.health)),
    stragglers.section, placement,
    card("Events", "run-events-card", eventsTable(page.events)));
  await Promise.all([stragglers.load(), markLive(placement)]);
}

async function route() {
  generation += 1;
  notice("");
  const main = document.getElementById("main");
  const match = /^#\/run\/(.+)$/.exec(location.hash);
  try {
    if (match) await runPage(main, decodeURIComponent(match[1]));
    else await homePage(main);
  } catch (error) {
    if (!(error instanceof Left)) main.replaceChildren(el("p", {class: "error"}, error.message));
  }
}

window.addEventListener("hashchange", route);
route();
