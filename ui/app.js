// Runnel dashboard: a single page over the broker's /v1 HTTP API.
//
// Hash routes (#/, #/topics, #/topics/<name>, #/groups, #/groups/<id>, #/transactions, #/transforms
// (with the validators), #/transforms/<name>) pick a view; the current
// view polls its endpoint every POLL_MS while the tab is visible and re-renders only the parts
// that show data, so inputs (filters, forms, the message browser) keep their state.
// Every string that comes from the API is user data: it goes through esc() before it reaches
// innerHTML. Big tables are built as one string per render, with delegated listeners.
"use strict";

(() => {
  const POLL_MS = 2000;
  /** Samples kept for sparklines (3 minutes at 2 s) and for the lag chart (20 minutes). */
  const SPARK_SAMPLES = 90;
  const LAG_SAMPLES = 600;
  /** Characters of a key/value shown before the cell offers "show all". */
  const CELL_CHARS = 300;

  // ---------------------------------------------------------------------------------------
  // Formatting
  // ---------------------------------------------------------------------------------------

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (value) => String(value ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
  const intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const oneDecimal = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  const DASH = "–";

  const fmtInt = (n) => (n == null || Number.isNaN(n) ? DASH : intFormat.format(n));

  function fmtBytes(n) {
    if (n == null || Number.isNaN(n)) return DASH;
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let value = n;
    let unit = 0;
    while (Math.abs(value) >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    if (unit === 0) return `${intFormat.format(value)} B`;
    const digits = Math.abs(value) < 10 ? 2 : Math.abs(value) < 100 ? 1 : 0;
    return `${value.toFixed(digits)} ${units[unit]}`;
  }

  /** A per-second count: 0/s, 3.5/s, 1,234/s, 12.3k/s, 4.5M/s. */
  function fmtRate(n) {
    if (n == null || Number.isNaN(n)) return DASH;
    if (n === 0) return "0/s";
    if (n < 10) return `${oneDecimal.format(n)}/s`;
    if (n < 10000) return `${intFormat.format(n)}/s`;
    if (n < 1e6) return `${oneDecimal.format(n / 1e3)}k/s`;
    return `${oneDecimal.format(n / 1e6)}M/s`;
  }

  const fmtByteRate = (n) => (n == null || Number.isNaN(n) ? DASH : `${fmtBytes(n < 1024 ? Math.round(n) : n)}/s`);

  function fmtDuration(ms) {
    if (ms == null || ms < 0) return DASH;
    const s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    if (d > 0) return `${d}d ${h}h`;
    if (h > 0) return `${h}h ${m}m`;
    if (m > 0) return `${m}m ${s % 60}s`;
    return `${s}s`;
  }

  function fmtAgo(ms) {
    const delta = Date.now() - ms;
    if (Math.abs(delta) < 1000) return "just now";
    return delta >= 0 ? `${fmtDuration(delta)} ago` : `in ${fmtDuration(-delta)}`;
  }

  /** ISO time in UTC, millisecond precision, as the broker stores it. */
  // A timestamp past what a Date holds (a producer may write any i64) shows as the number.
  const fmtIso = (ms) => {
    const date = new Date(ms);
    return Number.isFinite(date.getTime()) ? date.toISOString().replace("T", " ").replace("Z", " UTC") : String(ms);
  };

  /** A right-aligned number cell; zeros are muted so the figures that matter stand out. */
  const num = (value, field, text) =>
    `<td class="num${value === 0 ? " zero" : ""}" data-field="${field}">${text ?? fmtInt(value)}</td>`;
  const plural = (n, word) => `${fmtInt(n)} ${word}${n === 1 ? "" : "s"}`;
  const topicHref = (name) => `#/topics/${encodeURIComponent(name)}`;
  const groupHref = (id) => `#/groups/${encodeURIComponent(id)}`;
  const transformHref = (name) => `#/transforms/${encodeURIComponent(name)}`;

  function stateBadge(state) {
    const tone = { Stable: "ok", Empty: "neutral", Dead: "bad" }[state] || "warn";
    return `<span class="badge ${tone}" data-field="state">${esc(state)}</span>`;
  }

  /** A transform's or partition's state: running green, failed red, paused/stopped grey. */
  function transformBadge(state) {
    const tone = { running: "ok", failed: "bad", paused: "neutral", stopped: "neutral" }[state] || "warn";
    return `<span class="badge ${tone}" data-field="state" data-state="${esc(state)}">${esc(state)}</span>`;
  }

  // ---------------------------------------------------------------------------------------
  // API
  // ---------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(message, status, code) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** JSON request; non-2xx answers throw ApiError carrying the API's own `message`. */
  async function api(path, { method = "GET", body, signal } = {}) {
    // X-Runnel-UI: the login cookie authenticates a change only with it (a cross-site page
    // cannot send it), and a 401 then carries no Basic challenge (no browser password prompt).
    const headers = { Accept: "application/json", "X-Runnel-UI": "1" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      signal,
      cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (!response.ok) {
      const message = (data && data.message) || `${response.status} ${response.statusText}`.trim();
      throw new ApiError(message, response.status, data && data.error_code);
    }
    return data;
  }

  const isAbort = (e) => e && e.name === "AbortError";

  // ---------------------------------------------------------------------------------------
  // Charts (inline SVG)
  // ---------------------------------------------------------------------------------------

  function sparkline(values) {
    const w = 200;
    const h = 40;
    const baseline = `<line class="base" x1="0" x2="${w}" y1="${h - 1}" y2="${h - 1}"/>`;
    if (values.length === 0) return `<svg class="spark" viewBox="0 0 ${w} ${h}" aria-hidden="true">${baseline}</svg>`;
    const max = Math.max(...values, 1e-9);
    // Few samples fill the width at a fixed pace instead of a sliver at the right edge.
    const step = values.length > 1 ? w / (Math.max(30, values.length) - 1) : 0;
    const x0 = w - step * (values.length - 1);
    const points = values.map((v, i) => `${(x0 + i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`);
    const area = `M${x0.toFixed(1)},${h} L${points.join(" L")} L${w},${h} Z`;
    return `<svg class="spark" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" aria-hidden="true">
      ${baseline}<path class="area" d="${area}"/><polyline class="line" points="${points.join(" ")}"/></svg>`;
  }

  /** Total lag over time: samples [{t, lag}], drawn to the container's width. */
  function lagChart(samples, width) {
    const w = Math.max(320, Math.floor(width));
    const h = 200;
    const pad = { left: 56, right: 16, top: 14, bottom: 26 };
    const plotW = w - pad.left - pad.right;
    const plotH = h - pad.top - pad.bottom;
    const maxLag = Math.max(1, ...samples.map((s) => s.lag));
    const niceMax = niceCeil(maxLag);
    const tEnd = samples.length ? samples[samples.length - 1].t : Date.now();
    const tStart = samples.length ? Math.min(samples[0].t, tEnd - 60000) : tEnd - 60000;
    const span = Math.max(1, tEnd - tStart);
    const x = (t) => pad.left + ((t - tStart) / span) * plotW;
    const y = (v) => pad.top + plotH - (v / niceMax) * plotH;
    let grid = "";
    for (let i = 0; i <= 4; i++) {
      const v = (niceMax * i) / 4;
      grid += `<line class="grid" x1="${pad.left}" x2="${w - pad.right}" y1="${y(v)}" y2="${y(v)}"/>`;
      grid += `<text class="axis" x="${pad.left - 8}" y="${y(v) + 4}" text-anchor="end">${fmtInt(v)}</text>`;
    }
    grid += `<text class="axis" x="${pad.left}" y="${h - 6}">${esc(fmtDuration(tEnd - tStart))} ago</text>`;
    grid += `<text class="axis" x="${w - pad.right}" y="${h - 6}" text-anchor="end">now</text>`;
    let plot = "";
    if (samples.length === 1) {
      plot = `<circle class="dot" cx="${x(samples[0].t)}" cy="${y(samples[0].lag)}" r="3.5"/>`;
    } else if (samples.length > 1) {
      const pts = samples.map((s) => `${x(s.t).toFixed(1)},${y(s.lag).toFixed(1)}`);
      const last = samples[samples.length - 1];
      plot = `<path class="area" d="M${x(samples[0].t).toFixed(1)},${y(0)} L${pts.join(" L")} L${x(last.t).toFixed(1)},${y(0)} Z"/>
        <polyline class="line" points="${pts.join(" ")}"/>
        <circle class="dot" cx="${x(last.t).toFixed(1)}" cy="${y(last.lag).toFixed(1)}" r="3.5"/>`;
    }
    return `<svg viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img"
      aria-label="Total lag over the last ${esc(fmtDuration(span))}">${grid}${plot}</svg>`;
  }

  /**
   * ISR changes per interval: buckets [{start_ms, shrinks, expands}], expands as bars above the
   * axis, shrinks below it, so a node that left and came back reads as a dip and a bump.
   */
  function isrChart(buckets, intervalMs, width) {
    const w = Math.max(320, Math.floor(width));
    const h = 160;
    const pad = { left: 40, right: 16, top: 12, bottom: 24 };
    const plotW = w - pad.left - pad.right;
    const half = (h - pad.top - pad.bottom) / 2;
    const mid = pad.top + half;
    const niceMax = niceCeil(Math.max(1, ...buckets.map((b) => Math.max(b.shrinks, b.expands))));
    const slot = plotW / Math.max(1, buckets.length);
    const barW = Math.max(1, slot - 2);
    let bars = "";
    buckets.forEach((b, i) => {
      const x = (pad.left + i * slot + 1).toFixed(1);
      const tip = `<title>${esc(fmtIso(b.start_ms))}: ${esc(plural(b.shrinks, "shrink"))}, ${esc(plural(b.expands, "expand"))}</title>`;
      if (b.expands > 0) {
        const bh = (b.expands / niceMax) * half;
        bars += `<rect class="expand" x="${x}" y="${(mid - bh).toFixed(1)}" width="${barW.toFixed(1)}" height="${bh.toFixed(1)}">${tip}</rect>`;
      }
      if (b.shrinks > 0) {
        const bh = (b.shrinks / niceMax) * half;
        bars += `<rect class="shrink" x="${x}" y="${mid.toFixed(1)}" width="${barW.toFixed(1)}" height="${bh.toFixed(1)}">${tip}</rect>`;
      }
    });
    const span = intervalMs * buckets.length;
    const axis = `<line class="grid" x1="${pad.left}" x2="${w - pad.right}" y1="${pad.top}" y2="${pad.top}"/>
      <line class="zero" x1="${pad.left}" x2="${w - pad.right}" y1="${mid}" y2="${mid}"/>
      <line class="grid" x1="${pad.left}" x2="${w - pad.right}" y1="${mid + half}" y2="${mid + half}"/>
      <text class="axis" x="${pad.left - 8}" y="${pad.top + 4}" text-anchor="end">${fmtInt(niceMax)}</text>
      <text class="axis" x="${pad.left - 8}" y="${mid + 4}" text-anchor="end">0</text>
      <text class="axis" x="${pad.left - 8}" y="${mid + half + 4}" text-anchor="end">${fmtInt(niceMax)}</text>
      <text class="axis" x="${pad.left}" y="${h - 6}">${esc(fmtDuration(span))} ago</text>
      <text class="axis" x="${w - pad.right}" y="${h - 6}" text-anchor="end">now</text>`;
    return `<svg viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img"
      aria-label="ISR shrinks and expands over the last ${esc(fmtDuration(span))}">${axis}${bars}</svg>`;
  }

  /** 1, 2, 5 × 10^n at or above `v`, so axis labels are round numbers. */
  function niceCeil(v) {
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 4, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // ---------------------------------------------------------------------------------------
  // Tables
  // ---------------------------------------------------------------------------------------

  /** Sort state for one table; headers carry data-sort="<key>" and one listener per thead. */
  function sortable(thead, state, onChange) {
    const mark = () => {
      for (const th of thead.querySelectorAll("th[data-sort]")) {
        th.setAttribute("aria-sort", th.dataset.sort === state.key ? (state.dir > 0 ? "ascending" : "descending") : "none");
      }
    };
    thead.addEventListener("click", (event) => {
      const th = event.target.closest("th[data-sort]");
      if (!th) return;
      if (state.key === th.dataset.sort) state.dir = -state.dir;
      else {
        state.key = th.dataset.sort;
        state.dir = th.classList.contains("num") ? -1 : 1;
      }
      mark();
      onChange();
    });
    mark();
  }

  function sortRows(rows, state) {
    const { key, dir } = state;
    return rows.slice().sort((a, b) => {
      const x = a[key];
      const y = b[key];
      if (typeof x === "number" && typeof y === "number") return (x - y) * dir;
      return String(x ?? "").localeCompare(String(y ?? "")) * dir;
    });
  }

  /** Rows link to a page: a click anywhere on a row (not on a control) follows its link. */
  function rowLinks(tbody) {
    tbody.addEventListener("click", (event) => {
      if (event.target.closest("a, button, input, select, textarea")) return;
      if (window.getSelection && String(window.getSelection()).length > 0) return;
      const link = event.target.closest("tr")?.querySelector("a[href^='#/']");
      if (link) location.hash = link.getAttribute("href");
    });
  }

  // ---------------------------------------------------------------------------------------
  // Views: { mount(root), refresh(signal), unmount() }
  // ---------------------------------------------------------------------------------------

  const clusterSamples = { bytesIn: [], bytesOut: [], messagesIn: [] };
  const pushSample = (list, value, cap) => {
    list.push(value);
    if (list.length > cap) list.splice(0, list.length - cap);
  };

  function overviewView() {
    let root;
    return {
      title: "Overview",
      mount(el) {
        root = el;
        root.innerHTML = `<div class="loading">Loading cluster…</div>`;
      },
      async refresh(signal) {
        // The transforms count is a bonus: a node without the endpoint still shows its cluster.
        const [c, transforms] = await Promise.all([
          api("/v1/cluster", { signal }),
          api("/v1/transforms", { signal }).catch((e) => {
            if (isAbort(e)) throw e;
            return null;
          }),
        ]);
        pushSample(clusterSamples.bytesIn, c.bytes_in_per_sec || 0, SPARK_SAMPLES);
        pushSample(clusterSamples.bytesOut, c.bytes_out_per_sec || 0, SPARK_SAMPLES);
        pushSample(clusterSamples.messagesIn, c.messages_in_per_sec || 0, SPARK_SAMPLES);
        const nodeList = (c.nodes || []).slice().sort((a, b) => a.node_id - b.node_id);
        const fenced = nodeList.filter((n) => n.state === "fenced").length;
        const nodes = nodeList
          .map((n) => {
            const roles = n.roles && n.roles.length ? n.roles : ["broker"];
            const isVoter = roles.includes("controller");
            return `<tr data-testid="node-row" data-node="${esc(n.node_id)}" data-state="${esc(n.state || "live")}"
                data-roles="${esc(roles.join(","))}" data-controller="${n.is_controller ? "true" : "false"}"${n.state === "fenced" ? ` class="warn"` : ""}>
              <td class="num" data-field="node_id">${fmtInt(n.node_id)}${n.node_id === c.node_id ? ` <span class="badge neutral" title="The node this page talks to">this node</span>` : ""}</td>
              <td data-field="host">${esc(n.host)}</td>
              <td class="num" data-field="port">${esc(n.port)}</td>
              <td data-field="rack">${n.rack == null ? `<span class="muted">${DASH}</span>` : esc(n.rack)}</td>
              <td data-field="state">${nodeBadge(n.state)}</td>
              <td data-field="roles">${esc(roles.join(" + "))}</td>
              <td data-field="controller">${n.is_controller
                ? `<span class="badge accent">active controller</span>`
                : isVoter ? `<span class="muted" title="A voter of the metadata quorum, not its leader">voter</span>` : `<span class="muted">${DASH}</span>`}</td>
              ${num(n.leader_partitions, "leader_partitions")}${num(n.replica_partitions, "replica_partitions")}
              ${num(n.broker_epoch, "broker_epoch")}</tr>`;
          })
          .join("");
        const urp = c.under_replicated_partitions || 0;
        const offline = c.offline_partitions || 0;
        const reassigning = c.reassigning_partitions || 0;
        const isr = c.isr_changes || { buckets: [], shrinks: 0, expands: 0, interval_ms: 10000 };
        root.innerHTML = `
          <div class="page-head">
            <div><h1>Cluster</h1>
              <p class="sub">ID <code data-testid="cluster-id">${esc(c.cluster_id)}</code>
                · Runnel ${esc(c.version)} · up ${esc(fmtDuration(c.uptime_ms))}</p></div>
          </div>
          ${((c.security && c.security.warnings) || [])
            .map((w) => `<p class="banner warn" data-testid="security-warning">${esc(w)}</p>`)
            .join("")}
          <section class="stats">
            ${stat("Nodes", fmtInt(nodeList.length), "cluster-nodes")}
            ${stat("Fenced nodes", fmtInt(fenced), "cluster-fenced", null, fenced > 0 ? "warn" : "")}
            ${stat("Controller", c.controller_id == null ? "none" : `node ${fmtInt(c.controller_id)}`, "cluster-controller", null, c.controller_id == null ? "bad" : "")}
            ${stat("Topics", fmtInt(c.topics), "cluster-topics", "#/topics")}
            ${stat("Partitions", fmtInt(c.partitions), "cluster-partitions")}
            ${stat("Under-replicated", fmtInt(urp), "cluster-under-replicated", null, urp > 0 ? "warn" : "")}
            ${stat("Offline partitions", fmtInt(offline), "cluster-offline", null, offline > 0 ? "bad" : "")}
            ${stat("Reassigning", fmtInt(reassigning), "cluster-reassigning", null, reassigning > 0 ? "accent" : "")}
            ${stat("Connections", fmtInt(c.connections), "cluster-connections")}
            ${stat("Transforms", transforms ? fmtInt((transforms.transforms || []).length) : DASH, "cluster-transforms", "#/transforms",
              transforms && (transforms.transforms || []).some((t) => t.state === "failed") ? "bad" : "")}
          </section>
          <section class="throughput">
            ${meter("Bytes in", fmtByteRate(c.bytes_in_per_sec), clusterSamples.bytesIn, "bytes-in")}
            ${meter("Bytes out", fmtByteRate(c.bytes_out_per_sec), clusterSamples.bytesOut, "bytes-out")}
            ${meter("Messages in", fmtRate(c.messages_in_per_sec), clusterSamples.messagesIn, "messages-in")}
          </section>
          <section class="card flush">
            <h2>Nodes</h2>
            <table class="data" data-testid="nodes-table"><thead><tr><th class="num">ID</th><th>Host</th><th class="num">Port</th><th>Rack</th>
              <th>State</th><th>Roles</th><th>Controller</th><th class="num">Leads</th><th class="num">Replicas</th>
              <th class="num" title="The incarnation registered now (Kafka's broker epoch)">Broker epoch</th></tr></thead>
            <tbody>${nodes}</tbody></table>
          </section>
          <section class="card">
            <h2>ISR shrinks and expands <span class="hint">partitions per ${esc(fmtDuration(isr.interval_ms))}, last ${esc(fmtDuration(isr.interval_ms * isr.buckets.length))}, whole cluster</span></h2>
            <p class="legend"><span class="key shrink"></span>Shrinks <b data-testid="isr-shrinks">${fmtInt(isr.shrinks)}</b>
              <span class="key expand"></span>Expands <b data-testid="isr-expands">${fmtInt(isr.expands)}</b></p>
            <div class="chart" data-testid="isr-chart" data-shrinks="${esc(isr.shrinks)}" data-expands="${esc(isr.expands)}"></div>
          </section>`;
        const box = root.querySelector("[data-testid=isr-chart]");
        box.innerHTML = isrChart(isr.buckets || [], isr.interval_ms, box.clientWidth || 800);
      },
    };
  }

  /** A node's lifecycle state: live green, fenced amber (out of every ISR, leads nothing). */
  function nodeBadge(state) {
    if (state === "fenced") return `<span class="badge warn" title="Fenced: its lease expired or it has just registered">fenced</span>`;
    return `<span class="badge ok">${esc(state || "live")}</span>`;
  }

  function stat(label, value, testid, href, tone = "") {
    const inner = `<span class="label">${esc(label)}</span><span class="value" data-testid="${testid}">${value}</span>`;
    return href
      ? `<a class="stat ${tone}" href="${href}">${inner}</a>`
      : `<div class="stat ${tone}">${inner}</div>`;
  }

  function meter(label, value, samples, testid) {
    return `<div class="meter"><div><span class="label">${esc(label)}</span>
      <span class="value" data-testid="${testid}">${esc(value)}</span></div>${sparkline(samples)}</div>`;
  }

  // Topics list state survives navigation (filter text, internal toggle, sort order, page).
  // The node answers a page at a time in name order (`next` is the cursor of the one after):
  // `cursors` holds the `after` of every page up to the current one, so Previous pops it.
  const TOPICS_PAGE = 100;
  const topicsState = { filter: "", internal: false, sort: { key: "name", dir: 1 }, cursors: [null] };

  function topicsView() {
    let root;
    let topics = null;
    let page = { next: null, total: 0 };
    let lastRender = null;
    const render = () => {
      if (!topics) return;
      renderPager();
      const needle = topicsState.filter.trim().toLowerCase();
      const shown = sortRows(needle ? topics.filter((t) => t.name.toLowerCase().includes(needle)) : topics, topicsState.sort);
      const html = shown
        .map((t) => {
          const urp = t.under_replicated_partitions || 0;
          const offline = t.offline_partitions || 0;
          const moving = t.reassigning_partitions || 0;
          const flag = offline > 0 ? "bad" : urp > 0 ? "warn" : "";
          return `<tr data-testid="topic-row" data-topic="${esc(t.name)}"${flag ? ` class="${flag}"` : ""}>
            <td data-field="name"><a href="${topicHref(t.name)}">${esc(t.name)}</a>${t.internal ? ` <span class="badge neutral">internal</span>` : ""}${moving > 0 ? ` <span class="badge accent" data-field="reassigning" title="${esc(plural(moving, "partition"))} being reassigned">reassigning</span>` : ""}</td>
            ${num(t.partitions, "partitions")}${num(t.replication_factor, "replication_factor")}
            ${num(t.size_bytes, "size_bytes", fmtBytes(t.size_bytes))}${num(t.messages, "messages")}
            ${num(t.messages_in_per_sec, "messages_in_per_sec", fmtRate(t.messages_in_per_sec))}
            <td class="num" data-field="under_replicated_partitions">${urp > 0 ? `<span class="badge warn">${fmtInt(urp)}</span>` : `<span class="muted">0</span>`}</td>
            <td class="num" data-field="offline_partitions">${offline > 0 ? `<span class="badge bad">${fmtInt(offline)}</span>` : `<span class="muted">0</span>`}</td></tr>`;
        })
        .join("");
      root.querySelector("#topic-count").textContent = needle
        ? `${plural(page.total, "topic")} match the filter`
        : plural(page.total, "topic");
      // Polls that change nothing leave the DOM alone (keeps text selections and hover).
      if (html === lastRender) return;
      lastRender = html;
      root.querySelector("tbody").innerHTML = html;
      root.querySelector("[data-testid=topics-empty]").hidden = shown.length > 0;
      root.querySelector("[data-testid=topics-empty]").textContent =
        topics.length || needle ? "No topic matches the filter." : "No topics yet. Create one above.";
    };
    const renderPager = () => {
      const first = (topicsState.cursors.length - 1) * TOPICS_PAGE;
      const pager = root.querySelector("[data-testid=topics-pager]");
      pager.hidden = first === 0 && !page.next;
      root.querySelector("[data-testid=topics-range]").textContent = topics.length
        ? `${fmtInt(first + 1)}–${fmtInt(first + topics.length)} of ${fmtInt(page.total)}`
        : `none of ${fmtInt(page.total)}`;
      root.querySelector("[data-testid=topics-prev]").disabled = first === 0;
      root.querySelector("[data-testid=topics-next]").disabled = !page.next;
    };
    const turn = (cursors) => {
      topicsState.cursors = cursors;
      lastRender = null;
      refreshNow();
    };
    return {
      title: "Topics",
      mount(el) {
        root = el;
        root.innerHTML = `
          <div class="page-head"><div><h1>Topics</h1><p class="sub" id="topic-count">Loading…</p></div></div>
          <section class="card">
            <h2>Create topic</h2>
            <form class="create-form" data-testid="create-topic-form" id="create-topic-form" autocomplete="off" novalidate>
              <label class="field name">Name<input name="name" placeholder="orders" spellcheck="false" maxlength="249"></label>
              <label class="field small">Partitions<input name="partitions" type="number" min="1" value="1" inputmode="numeric"></label>
              <label class="field small">Replication factor<input name="replication_factor" type="number" min="1" value="1" inputmode="numeric"></label>
              <label class="field grow"><span>Configs <span class="hint">key=value, one per line</span></span>
                <textarea name="configs" rows="1" spellcheck="false" placeholder="retention.ms=604800000"></textarea></label>
              <button type="submit" class="primary" data-testid="create-topic-submit">Create topic</button>
            </form>
            <p class="form-status" data-testid="create-topic-status" role="status" hidden></p>
          </section>
          <div class="toolbar">
            <input type="search" class="filter" data-testid="topic-filter" placeholder="Filter topics by name" aria-label="Filter topics" spellcheck="false">
            <label class="check"><input type="checkbox" data-testid="show-internal"> Show internal topics</label>
          </div>
          <section class="card flush">
            <table class="data" data-testid="topics-table">
              <thead><tr>
                <th data-sort="name">Name</th><th class="num" data-sort="partitions">Partitions</th>
                <th class="num" data-sort="replication_factor">Replication</th><th class="num" data-sort="size_bytes">Size</th>
                <th class="num" data-sort="messages">Messages</th><th class="num" data-sort="messages_in_per_sec">Messages/s</th>
                <th class="num" data-sort="under_replicated_partitions">Under-replicated</th>
                <th class="num" data-sort="offline_partitions">Offline</th>
              </tr></thead>
              <tbody></tbody>
            </table>
            <p class="empty" data-testid="topics-empty" hidden></p>
          </section>
          <div class="pager" data-testid="topics-pager" hidden>
            <button type="button" data-testid="topics-prev">← Previous</button>
            <span class="muted" data-testid="topics-range"></span>
            <button type="button" data-testid="topics-next">Next →</button>
          </div>`;
        const filter = root.querySelector("[data-testid=topic-filter]");
        filter.value = topicsState.filter;
        filter.addEventListener("input", () => {
          topicsState.filter = filter.value;
          render(); // this page at once; the node filters every page with the next poll
          turn([null]);
        });
        const internal = root.querySelector("[data-testid=show-internal]");
        internal.checked = topicsState.internal;
        internal.addEventListener("change", () => {
          topicsState.internal = internal.checked;
          turn([null]);
        });
        sortable(root.querySelector("thead"), topicsState.sort, render);
        rowLinks(root.querySelector("tbody"));
        root.querySelector("form").addEventListener("submit", createTopic);
        root.querySelector("[data-testid=topics-prev]").addEventListener("click", () => {
          if (topicsState.cursors.length > 1) turn(topicsState.cursors.slice(0, -1));
        });
        root.querySelector("[data-testid=topics-next]").addEventListener("click", () => {
          if (page.next) turn([...topicsState.cursors, page.next]);
        });
      },
      async refresh(signal) {
        const { internal, cursors } = topicsState;
        const search = topicsState.filter.trim();
        const params = new URLSearchParams({ internal, limit: TOPICS_PAGE });
        if (search) params.set("search", search);
        const after = cursors[cursors.length - 1];
        if (after !== null) params.set("after", after);
        const data = await api(`/v1/topics?${params}`, { signal });
        // Toggled, typed or paged while in flight: the next poll (queued) asks again.
        if (internal !== topicsState.internal || cursors !== topicsState.cursors || search !== topicsState.filter.trim()) return;
        topics = data.topics || [];
        page = { next: data.next ?? null, total: data.total ?? topics.length };
        // A page emptied by deletions steps back to the first.
        if (!topics.length && cursors.length > 1) {
          turn([null]);
          return;
        }
        render();
      },
    };
  }

  /** key=value lines (blank lines and # comments skipped) → {key: value}; throws on a bad line. */
  function parseConfigs(text) {
    const configs = {};
    text.split(/\r?\n/).forEach((raw, i) => {
      const line = raw.trim();
      if (!line || line.startsWith("#")) return;
      const eq = line.indexOf("=");
      if (eq <= 0) throw new Error(`Configs line ${i + 1}: expected key=value, got "${line}"`);
      configs[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
    });
    return configs;
  }

  /** Integers go as numbers; anything else goes as typed so the API's validation message shows. */
  const asInt = (text) => (/^\s*-?\d+\s*$/.test(text) ? Number(text) : text);

  async function createTopic(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const status = form.parentElement.querySelector("[data-testid=create-topic-status]");
    const button = form.querySelector("button[type=submit]");
    const show = (tone, html) => {
      status.hidden = false;
      status.className = `form-status ${tone}`;
      status.innerHTML = html;
    };
    let body;
    try {
      body = {
        name: form.elements.name.value.trim(),
        partitions: asInt(form.elements.partitions.value),
        replication_factor: asInt(form.elements.replication_factor.value),
        configs: parseConfigs(form.elements.configs.value),
      };
    } catch (e) {
      show("error", esc(e.message));
      return;
    }
    button.disabled = true;
    show("pending", "Creating…");
    try {
      const created = await api("/v1/topics", { method: "POST", body });
      show("ok", `Created <a href="${topicHref(created.name || body.name)}">${esc(created.name || body.name)}</a>.`);
      form.elements.name.value = "";
      form.elements.configs.value = "";
      refreshNow();
    } catch (e) {
      show("error", esc(e.message));
    } finally {
      button.disabled = false;
    }
  }

  function topicView(name) {
    let root;
    let detail = null;
    let configs = null;
    let partitionCount = -1;
    let records = [];
    let nextOffset = null;
    let showDefaults = false;
    const base = `/v1/topics/${encodeURIComponent(name)}`;

    const renderPartitions = () => {
      const parts = detail.partitions || [];
      const totalSize = parts.reduce((sum, p) => sum + (p.size_bytes || 0), 0);
      // Partitions without a replica here have no offsets on this node; they count as unknown.
      const hosted = parts.filter((p) => p.high_watermark != null && p.log_start_offset != null);
      const messages = hosted.length === parts.length
        ? hosted.reduce((sum, p) => sum + (p.high_watermark - p.log_start_offset), 0)
        : null;
      const urp = parts.filter((p) => p.under_replicated).length;
      const offline = parts.filter((p) => p.offline).length;
      const moving = parts.filter((p) => reassigning(p)).length;
      root.querySelector("#topic-stats").innerHTML = `
        ${stat("Partitions", fmtInt(parts.length), "topic-partitions")}
        ${stat("Replication factor", fmtInt(detail.replication_factor), "topic-replication-factor")}
        ${stat("Size", hosted.length === parts.length ? fmtBytes(totalSize) : `${fmtBytes(totalSize)} here`, "topic-size")}
        ${stat("Messages", fmtInt(messages), "topic-messages")}
        ${stat("Under-replicated", fmtInt(urp), "topic-under-replicated", null, urp > 0 ? "warn" : "")}
        ${stat("Offline", fmtInt(offline), "topic-offline", null, offline > 0 ? "bad" : "")}
        ${stat("Reassigning", fmtInt(moving), "topic-reassigning", null, moving > 0 ? "accent" : "")}`;
      root.querySelector("#topic-id").textContent = detail.topic_id || "";
      root.querySelector("#topic-internal").hidden = !detail.internal;
      const rows = parts
        .slice()
        .sort((a, b) => a.partition - b.partition)
        .map((p) => {
          const flag = p.offline ? "bad" : p.under_replicated ? "warn" : "";
          const ids = (list) => esc((list || []).join(", "));
          const outOfSync = p.out_of_sync_replicas || (p.replicas || []).filter((r) => !(p.isr || []).includes(r));
          const adding = p.adding_replicas || [];
          const removing = p.removing_replicas || [];
          // Each replica is marked: out of the ISR, being added or being removed by a reassignment.
          const replicas = (p.replicas || [])
            .map((r) => {
              const out = outOfSync.includes(r);
              const marks = [out ? "out" : "in", adding.includes(r) ? "adding" : "", removing.includes(r) ? "removing" : ""].filter(Boolean);
              const title = [out ? "not in the ISR" : "in sync", adding.includes(r) ? "being added" : "", removing.includes(r) ? "being removed" : ""]
                .filter(Boolean)
                .join(", ");
              return `<span class="replica ${marks.join(" ")}" data-replica="${esc(r)}" data-in-sync="${out ? "false" : "true"}" title="Node ${esc(r)}: ${esc(title)}">${fmtInt(r)}</span>`;
            })
            .join("");
          const lags = (p.followers || []).map((f) => f.lag);
          const moves = [adding.length ? `adding ${ids(adding)}` : "", removing.length ? `removing ${ids(removing)}` : ""].filter(Boolean);
          const status = [
            p.offline ? `<span class="badge bad">offline</span>` : "",
            !p.offline && p.under_replicated ? `<span class="badge warn">under-replicated</span>` : "",
            reassigning(p) ? `<span class="badge accent">reassigning</span>` : "",
          ].filter(Boolean);
          return `<tr data-testid="partition-row" data-partition="${p.partition}"${flag ? ` class="${flag}"` : ""}
              data-under-replicated="${p.under_replicated ? "true" : "false"}" data-offline="${p.offline ? "true" : "false"}"
              data-reassigning="${reassigning(p) ? "true" : "false"}" data-out-of-sync="${esc(outOfSync.join(","))}">
            ${num(p.partition, "partition")}
            <td class="num" data-field="leader">${p.leader == null || p.leader < 0 ? `<span class="badge bad">none</span>` : fmtInt(p.leader)}</td>
            <td class="num replicas" data-field="replicas">${replicas}</td>
            <td class="num" data-field="isr">${ids(p.isr)}</td>
            <td data-field="reassignment">${moves.length ? esc(moves.join(" · ")) : `<span class="muted">${DASH}</span>`}</td>
            ${num(p.leader_epoch, "leader_epoch")}${num(p.log_start_offset, "log_start_offset")}
            ${num(p.high_watermark, "high_watermark")}${num(p.last_stable_offset, "last_stable_offset")}${num(p.log_end_offset, "log_end_offset")}
            ${lags.length ? num(Math.max(...lags), "max_follower_lag") : `<td class="num muted" data-field="max_follower_lag" title="Known on the leader only">${DASH}</td>`}
            ${num(p.size_bytes, "size_bytes", fmtBytes(p.size_bytes))}
            <td data-field="status">${status.length ? status.join(" ") : `<span class="badge ok">in sync</span>`}</td>
          </tr>`;
        })
        .join("");
      root.querySelector("[data-testid=partitions-table] tbody").innerHTML = rows;
      if (parts.length !== partitionCount) {
        // The message browser's partition picker follows the partition count, keeping the choice.
        const select = root.querySelector("select[name=partition]");
        const chosen = select.value;
        select.innerHTML = parts.map((p) => `<option value="${p.partition}">${p.partition}</option>`).join("");
        if (chosen !== "" && parts.some((p) => String(p.partition) === chosen)) select.value = chosen;
        else {
          // First visit: open the first partition that holds records rather than an empty one.
          const first = parts.find((p) => p.high_watermark > p.log_start_offset);
          if (first) select.value = String(first.partition);
        }
        partitionCount = parts.length;
      }
    };

    const renderConfigs = () => {
      const list = configs || Object.entries(detail.configs || {}).map(([k, v]) => ({ name: k, value: v, source: "topic" }));
      const overrides = list.filter((c) => c.source === "topic");
      const defaults = list.length - overrides.length;
      const sorted = (showDefaults ? list : overrides)
        .slice()
        .sort((a, b) => (a.source === "topic" ? 0 : 1) - (b.source === "topic" ? 0 : 1) || a.name.localeCompare(b.name));
      root.querySelector("#configs-toggle").hidden = defaults === 0;
      root.querySelector("#configs-toggle span").textContent = `Show defaults (${fmtInt(defaults)})`;
      const body = sorted
        .map(
          (c) => `<tr data-testid="config-row" data-config="${esc(c.name)}"${c.source === "topic" ? ` class="override"` : ""}>
            <td data-field="name"><code>${esc(c.name)}</code></td><td data-field="value" class="wrap">${c.value == null ? `<span class="muted">null</span>` : esc(c.value)}</td>
            <td data-field="source">${c.source === "topic" ? `<span class="badge accent">topic</span>` : `<span class="muted">${esc(c.source || "default")}</span>`}</td></tr>`,
        )
        .join("");
      root.querySelector("#configs").innerHTML = body
        ? `<table class="data" data-testid="configs-table"><thead><tr><th>Name</th><th>Value</th><th>Source</th></tr></thead><tbody>${body}</tbody></table>`
        : `<p class="empty">No overrides: every setting has its broker default.</p>`;
    };

    const renderRecords = (meta, empty) => {
      const rows = records
        .map((r, i) => {
          const headers = (r.headers || [])
            .map((h, j) => `<div class="hdr"><span class="hk">${esc(h.key)}</span>: ${payload(h.value, h.encoding, i, `h${j}`)}</div>`)
            .join("");
          return `<tr data-testid="record-row" data-offset="${esc(r.offset)}" data-partition="${esc(r.partition)}">
            ${num(r.offset, "offset")}
            <td data-field="timestamp" class="nowrap">${r.timestamp == null || r.timestamp < 0 ? DASH : `${esc(fmtIso(r.timestamp))}<div class="muted small">${esc(fmtAgo(r.timestamp))}</div>`}</td>
            <td data-field="key" class="payload">${payload(r.key, r.key_encoding, i, "k")}</td>
            <td data-field="value" class="payload">${payload(r.value, r.value_encoding, i, "v")}</td>
            <td data-field="headers" class="payload">${headers || `<span class="muted">${DASH}</span>`}</td></tr>`;
        })
        .join("");
      root.querySelector("#records").innerHTML = rows
        ? `<table class="data records" data-testid="records-table"><thead><tr><th class="num">Offset</th><th>Timestamp</th><th>Key</th><th>Value</th><th>Headers</th></tr></thead><tbody>${rows}</tbody></table>`
        : `<p class="empty" data-testid="records-empty">${esc(empty)}</p>`;
      root.querySelector("#records-meta").textContent = meta;
      root.querySelector("#records-next").disabled = nextOffset == null || records.length === 0;
    };

    const fetchRecords = async (offsetOverride) => {
      const form = root.querySelector("#records-form");
      const partition = form.elements.partition.value;
      const offset = offsetOverride ?? form.elements.offset.value.trim();
      const limit = form.elements.limit.value.trim() || "50";
      const isolation = form.elements.isolation.value;
      const params = new URLSearchParams({ partition, limit, isolation });
      if (offset !== "") params.set("offset", offset);
      const status = root.querySelector("#records-meta");
      status.textContent = "Loading…";
      status.className = "meta";
      try {
        const data = await api(`${base}/records?${params}`);
        records = data.records || [];
        nextOffset = data.next_offset;
        if (offsetOverride != null) form.elements.offset.value = String(offsetOverride);
        renderRecords(
          `${plural(records.length, "record")} · partition ${data.partition} · log start ${fmtInt(data.log_start_offset)} · high watermark ${fmtInt(data.high_watermark)}` +
            (data.last_stable_offset < data.high_watermark ? ` · last stable ${fmtInt(data.last_stable_offset)}` : ""),
          data.high_watermark === data.log_start_offset
            ? `Partition ${data.partition} is empty.`
            : isolation === "read_committed"
              ? "No committed records from this offset up to the last stable offset."
              : "No records from this offset up to the high watermark.",
        );
      } catch (e) {
        status.textContent = e.message;
        status.className = "meta error";
      }
    };

    return {
      title: name,
      mount(el) {
        root = el;
        root.innerHTML = `
          <nav class="crumbs"><a href="#/topics">Topics</a><span>/</span></nav>
          <div class="page-head">
            <div><h1 data-testid="topic-name">${esc(name)} <span class="badge neutral" id="topic-internal" hidden>internal</span></h1>
              <p class="sub">Topic ID <code id="topic-id"></code></p></div>
            <button type="button" class="danger" data-testid="delete-topic">Delete topic</button>
          </div>
          <div class="stack" id="topic-body">
            <section class="stats" id="topic-stats"></section>
            <section class="card flush">
              <h2>Partitions</h2>
              <table class="data" data-testid="partitions-table"><thead><tr>
                <th class="num">Partition</th><th class="num">Leader</th>
                <th class="num" title="Replicas out of the ISR are struck through">Replicas</th><th class="num">ISR</th><th>Reassignment</th>
                <th class="num">Leader epoch</th><th class="num">Log start</th><th class="num">High watermark</th>
                <th class="num" title="Last stable offset: read_committed consumers read up to here (an open transaction holds it back)">LSO</th>
                <th class="num">Log end</th><th class="num" title="Records the furthest follower is behind the leader's log end">Follower lag</th>
                <th class="num">Size</th><th>Status</th></tr></thead><tbody></tbody></table>
            </section>
            <section class="card flush">
              <div class="card-head"><h2>Configuration</h2>
                <label class="check" id="configs-toggle" hidden><input type="checkbox" data-testid="show-default-configs"><span>Show defaults</span></label></div>
              <div id="configs"><p class="empty">Loading…</p></div>
            </section>
            <section class="card" data-testid="message-browser">
              <h2>Messages</h2>
              <form class="records-form" id="records-form" data-testid="records-form" autocomplete="off">
                <label class="field small">Partition<select name="partition"></select></label>
                <label class="field small">Offset<input name="offset" placeholder="log start" inputmode="numeric" title="Empty: from the log start. Negative: that many before the high watermark."></label>
                <label class="field small">Limit<input name="limit" type="number" min="1" max="1000" value="50"></label>
                <label class="field small">Isolation<select name="isolation" data-testid="records-isolation" title="read_committed: up to the last stable offset, without aborted transactions' records">
                  <option value="read_uncommitted">read_uncommitted</option><option value="read_committed">read_committed</option></select></label>
                <button type="submit" class="primary" data-testid="records-fetch">Fetch</button>
                <button type="button" id="records-next" data-testid="records-next" disabled>Next page →</button>
                <button type="button" id="records-tail" data-testid="records-tail">Latest</button>
                <span class="meta" id="records-meta"></span>
              </form>
              <div id="records"></div>
            </section>
          </div>`;
        root.querySelector("#configs-toggle input").addEventListener("change", (e) => {
          showDefaults = e.target.checked;
          if (detail) renderConfigs();
        });
        const form = root.querySelector("#records-form");
        form.addEventListener("submit", (e) => {
          e.preventDefault();
          fetchRecords();
        });
        root.querySelector("#records-next").addEventListener("click", () => fetchRecords(String(nextOffset)));
        root.querySelector("#records-tail").addEventListener("click", () => {
          const limit = Number(form.elements.limit.value) || 50;
          form.elements.offset.value = "";
          fetchRecords(String(-limit));
        });
        // Long keys/values are cut in the table; a click on the marker shows the whole text.
        root.querySelector("#records").addEventListener("click", (e) => {
          const more = e.target.closest("[data-more]");
          if (!more) return;
          const [index, kind, header] = more.dataset.more.split(":");
          const r = records[Number(index)];
          if (!r) return;
          const text = kind === "k" ? r.key : kind === "v" ? r.value : r.headers[Number(header)]?.value;
          more.parentElement.querySelector(".text").textContent = text ?? "";
          more.remove();
        });
        root.querySelector("[data-testid=delete-topic]").addEventListener("click", async () => {
          if (!window.confirm(`Delete topic "${name}" and all of its data? This cannot be undone.`)) return;
          try {
            await api(base, { method: "DELETE" });
            location.hash = "#/topics";
          } catch (e) {
            showBanner(`Could not delete ${name}: ${e.message}`, "action");
          }
        });
        api(`${base}/configs`)
          .then((data) => {
            configs = data.configs || [];
            if (detail) renderConfigs();
          })
          .catch(() => {
            configs = null; // fall back to the overrides in the topic detail
          });
      },
      async refresh(signal) {
        let data;
        try {
          data = await api(base, { signal });
        } catch (e) {
          if (e.status === 404) {
            root.querySelector("#topic-body").innerHTML = `<div class="notfound" data-testid="not-found">
              <h2>Topic not found</h2><p>${esc(e.message)}</p><p><a href="#/topics">Back to topics</a></p></div>`;
            root.querySelector("[data-testid=delete-topic]").hidden = true;
            root.querySelector(".page-head .sub").hidden = true;
            return;
          }
          throw e;
        }
        if (!root.querySelector("#topic-stats")) return; // not-found page is showing
        const first = detail == null;
        detail = data;
        renderPartitions();
        if (first || configs == null) renderConfigs();
        if (first) fetchRecords();
      },
    };
  }

  const reassigning = (p) => (p.adding_replicas || []).length > 0 || (p.removing_replicas || []).length > 0;

  /** A key, value or header value; base64 ones are marked, long ones cut with a "more" link. */
  function payload(value, encoding, index, kind) {
    if (value == null) return `<span class="null">null</span>`;
    const b64 = encoding === "base64" ? `<span class="badge b64" data-encoding="base64" title="Not UTF-8: shown as base64">base64</span> ` : "";
    const s = String(value);
    if (s.length <= CELL_CHARS) return `${b64}<span class="text">${esc(s)}</span>`;
    const marker = kind.startsWith("h") ? `${index}:h:${kind.slice(1)}` : `${index}:${kind}`;
    const more = `<button type="button" class="link" data-more="${marker}">show all ${fmtInt(s.length)} chars</button>`;
    return `${b64}<span class="text">${esc(s.slice(0, CELL_CHARS))}…</span> ${more}`;
  }

  const groupsState = { filter: "", sort: { key: "group_id", dir: 1 } };

  function groupsView() {
    let root;
    let groups = null;
    let lastRender = null;
    const render = () => {
      if (!groups) return;
      const needle = groupsState.filter.trim().toLowerCase();
      const shown = sortRows(needle ? groups.filter((g) => g.group_id.toLowerCase().includes(needle)) : groups, groupsState.sort);
      const html = shown
        .map(
          (g) => `<tr data-testid="group-row" data-group="${esc(g.group_id)}">
            <td data-field="group_id"><a href="${groupHref(g.group_id)}">${esc(g.group_id)}</a></td>
            <td>${stateBadge(g.state)}</td>
            <td data-field="protocol_type">${esc(g.protocol_type) || `<span class="muted">${DASH}</span>`}</td>
            <td data-field="protocol">${esc(g.protocol) || `<span class="muted">${DASH}</span>`}${assignorNote(g.assignor)}</td>
            ${num(g.members, "members")}
            <td class="num" data-field="total_lag">${g.total_lag > 0 ? `<strong>${fmtInt(g.total_lag)}</strong>` : fmtInt(g.total_lag)}</td>
            ${num(g.coordinator, "coordinator")}</tr>`,
        )
        .join("");
      if (html === lastRender) return;
      lastRender = html;
      root.querySelector("tbody").innerHTML = html;
      const empty = root.querySelector("[data-testid=groups-empty]");
      empty.hidden = shown.length > 0;
      empty.textContent = groups.length ? "No group matches the filter." : "No consumer groups yet.";
      root.querySelector("#group-count").textContent =
        shown.length === groups.length ? plural(groups.length, "group") : `${fmtInt(shown.length)} of ${plural(groups.length, "group")}`;
    };
    return {
      title: "Consumer groups",
      mount(el) {
        root = el;
        root.innerHTML = `
          <div class="page-head"><div><h1>Consumer groups</h1><p class="sub" id="group-count">Loading…</p></div></div>
          <div class="toolbar">
            <input type="search" class="filter" data-testid="group-filter" placeholder="Filter groups by id" aria-label="Filter groups" spellcheck="false">
          </div>
          <section class="card flush">
            <table class="data" data-testid="groups-table"><thead><tr>
              <th data-sort="group_id">Group</th><th data-sort="state">State</th><th data-sort="protocol_type">Type</th>
              <th data-sort="protocol">Assignor</th><th class="num" data-sort="members">Members</th>
              <th class="num" data-sort="total_lag">Total lag</th><th class="num" data-sort="coordinator">Coordinator</th>
            </tr></thead><tbody></tbody></table>
            <p class="empty" data-testid="groups-empty" hidden></p>
          </section>`;
        const filter = root.querySelector("[data-testid=group-filter]");
        filter.value = groupsState.filter;
        filter.addEventListener("input", () => {
          groupsState.filter = filter.value;
          render();
        });
        sortable(root.querySelector("thead"), groupsState.sort, render);
        rowLinks(root.querySelector("tbody"));
      },
      async refresh(signal) {
        const data = await api("/v1/groups", { signal });
        groups = data.groups || [];
        render();
      },
    };
  }

  function groupView(id) {
    let root;
    let group = null;
    const samples = [];
    const base = `/v1/groups/${encodeURIComponent(id)}`;
    const drawChart = () => {
      const box = root.querySelector("[data-testid=lag-chart]");
      if (!box) return;
      box.dataset.samples = String(samples.length);
      box.innerHTML = lagChart(samples, box.clientWidth || 800);
    };
    const onResize = () => drawChart();
    return {
      title: id,
      mount(el) {
        root = el;
        root.innerHTML = `
          <nav class="crumbs"><a href="#/groups">Consumer groups</a><span>/</span></nav>
          <div class="page-head"><div><h1 data-testid="group-id">${esc(id)}</h1><p class="sub" id="group-sub">Loading…</p></div></div>
          <div class="stack" id="group-body">
            <section class="stats" id="group-stats"></section>
            <section class="card">
              <h2>Total lag over time <span class="hint">sampled every ${POLL_MS / 1000} s while this page is open</span></h2>
              <div class="chart" data-testid="lag-chart" data-samples="0"></div>
            </section>
            <section class="card" id="group-assignor" hidden></section>
            <section class="card flush"><h2>Members</h2><div id="members"></div></section>
            <section class="card flush"><h2>Partitions</h2><div id="offsets"></div></section>
          </div>`;
        window.addEventListener("resize", onResize);
      },
      unmount() {
        window.removeEventListener("resize", onResize);
      },
      async refresh(signal) {
        try {
          group = await api(base, { signal });
        } catch (e) {
          if (e.status === 404) {
            root.querySelector("#group-body").innerHTML = `<div class="notfound" data-testid="not-found">
              <h2>Group not found</h2><p>${esc(e.message)}</p><p><a href="#/groups">Back to consumer groups</a></p></div>`;
            root.querySelector("#group-sub").textContent = "";
            return;
          }
          throw e;
        }
        if (!root.querySelector("#group-stats")) return;
        const g = group;
        pushSample(samples, { t: Date.now(), lag: g.total_lag || 0 }, LAG_SAMPLES);
        root.querySelector("#group-sub").textContent = [
          g.protocol_type ? `${g.protocol_type} protocol` : "offsets only (no protocol)",
          g.protocol ? `assignor ${g.protocol}` : null,
          `coordinator node ${fmtInt(g.coordinator)}`,
        ]
          .filter(Boolean)
          .join(" · ");
        const members = g.members || [];
        const offsets = (g.offsets || []).slice().sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
        const maxLag = Math.max(1, ...offsets.map((o) => o.lag || 0));
        root.querySelector("#group-stats").innerHTML = `
          <div class="stat"><span class="label">State</span><span class="value" data-testid="group-state">${stateBadge(g.state)}</span></div>
          ${stat("Members", fmtInt(members.length), "group-members")}
          ${stat("Total lag", fmtInt(g.total_lag), "group-total-lag", null, g.total_lag > 0 ? "accent" : "")}
          ${stat("Partitions", fmtInt(offsets.length), "group-partitions")}
          ${stat("Topics", fmtInt(new Set(offsets.map((o) => o.topic)).size), "group-topics")}`;
        const a = g.assignor;
        const assignment = root.querySelector("#group-assignor");
        assignment.hidden = !a;
        if (a) {
          assignment.innerHTML = `<h2>Server-side assignment <span class="hint">KIP-848: the coordinator computes each group epoch's target with the members' chosen assignor</span></h2>
            <dl class="config" data-testid="group-assignor">
              <dt>Assignor</dt><dd data-field="assignor">${esc(a.name)}${a.version == null ? ` <span class="muted">(built-in)</span>` : ` <span class="muted">(uploaded, version ${fmtInt(a.version)})</span>`}</dd>
              <dt>Computed</dt><dd data-field="assigned">${a.assigned_ms == null ? `<span class="muted">before this coordinator took over</span>` : `${fmtIso(a.assigned_ms)} <span class="muted">(${fmtAgo(a.assigned_ms)})</span>`}</dd>
              <dt>Epochs</dt><dd data-field="epochs">group ${fmtInt(a.group_epoch)} · assignment ${fmtInt(a.assignment_epoch)}</dd>
              ${a.error ? `<dt>Fallback</dt><dd data-field="assignor-error" class="bad">${esc(a.error)}</dd>` : ""}
            </dl>`;
        }
        drawChart();
        const memberById = new Map(members.map((m) => [m.member_id, m]));
        root.querySelector("#members").innerHTML = members.length
          ? `<table class="data" data-testid="members-table"><thead><tr><th>Member</th><th>Client</th><th>Host</th><th>Instance</th><th>Assignment</th></tr></thead><tbody>${members
              .map(
                (m) => `<tr data-testid="member-row" data-member="${esc(m.member_id)}">
                  <td data-field="member_id" class="wrap"><code>${esc(m.member_id)}</code>${g.protocol_type === "consumer" && m.protocol === "classic" ? ` <span class="badge neutral" data-field="member-protocol" title="A classic-protocol member inside a consumer group (KIP-848 migration): it rejoins to reconcile">classic</span>` : ""}</td>
                  <td data-field="client_id">${esc(m.client_id)}</td><td data-field="client_host">${esc(m.client_host)}</td>
                  <td data-field="group_instance_id">${m.group_instance_id == null ? `<span class="muted">${DASH}</span>` : esc(m.group_instance_id)}</td>
                  <td data-field="assignment">${(m.assignment || [])
                    .map((a) => `<div><a href="${topicHref(a.topic)}">${esc(a.topic)}</a> <span class="muted">[${esc((a.partitions || []).join(", "))}]</span></div>`)
                    .join("") || `<span class="muted">nothing assigned</span>`}</td></tr>`,
              )
              .join("")}</tbody></table>`
          : `<p class="empty">No active members. Committed offsets are kept${g.state === "Empty" ? " while the group is empty" : ""}.</p>`;
        root.querySelector("#offsets").innerHTML = offsets.length
          ? `<table class="data" data-testid="offsets-table"><thead><tr><th>Topic</th><th class="num">Partition</th><th class="num">Committed</th>
              <th class="num">Log end</th><th class="num">Lag</th><th class="bar-col"></th><th>Member</th></tr></thead><tbody>${offsets
              .map((o) => {
                const m = o.member_id == null ? null : memberById.get(o.member_id);
                return `<tr data-testid="offset-row" data-topic="${esc(o.topic)}" data-partition="${o.partition}">
                  <td data-field="topic"><a href="${topicHref(o.topic)}">${esc(o.topic)}</a></td>
                  ${num(o.partition, "partition")}
                  <td class="num" data-field="committed_offset">${o.committed_offset == null || o.committed_offset < 0 ? `<span class="muted">none</span>` : fmtInt(o.committed_offset)}</td>
                  ${num(o.log_end_offset, "log_end_offset")}${num(o.lag, "lag")}
                  <td class="bar-col"><span class="bar" style="width:${(((o.lag || 0) / maxLag) * 100).toFixed(1)}%"></span></td>
                  <td data-field="member_id">${o.member_id == null ? `<span class="muted">${DASH}</span>` : `<code title="${esc(o.member_id)}">${esc(m ? m.client_id || o.member_id : o.member_id)}</code>`}</td></tr>`;
              })
              .join("")}</tbody></table>`
          : `<p class="empty">No committed offsets.</p>`;
      },
    };
  }

  const transactionsState = { filter: "", openOnly: true, sort: { key: "age_ms", dir: -1 } };

  /** A transaction's state: open ones amber (they hold last stable offsets back), aborts red. */
  function txnBadge(state) {
    const tone = { CompleteCommit: "ok", Empty: "neutral", CompleteAbort: "bad", Dead: "bad", PrepareAbort: "bad" }[state] || "warn";
    return `<span class="badge ${tone}" data-field="state">${esc(state)}</span>`;
  }

  function transactionsView() {
    let root;
    let data = null;
    let lastRender = null;
    const render = () => {
      if (!data) return;
      const all = data.transactions || [];
      const needle = transactionsState.filter.trim().toLowerCase();
      const matching = all.filter(
        (t) => (!transactionsState.openOnly || t.open) && (!needle || t.transactional_id.toLowerCase().includes(needle)),
      );
      const shown = sortRows(matching, transactionsState.sort);
      const html = shown
        .map((t) => {
          const parts = (t.partitions || [])
            .map((p) => `<a href="${topicHref(p.topic)}">${esc(p.topic)}</a> <span class="muted">[${p.partitions.map(fmtInt).join(", ")}]</span>`)
            .join("<br>");
          const overdue = t.open && t.age_ms != null && t.age_ms > t.timeout_ms;
          return `<tr data-testid="txn-row" data-txn="${esc(t.transactional_id)}">
            <td data-field="transactional_id"><code>${esc(t.transactional_id)}</code></td>
            <td>${txnBadge(t.state)}</td>
            ${num(t.producer_id, "producer_id")}
            ${num(t.producer_epoch, "producer_epoch")}
            <td class="num" data-field="age_ms">${t.age_ms == null ? `<span class="muted">${DASH}</span>` : overdue ? `<strong>${fmtDuration(t.age_ms)}</strong>` : fmtDuration(t.age_ms)}</td>
            <td class="num" data-field="timeout_ms">${fmtDuration(t.timeout_ms)}</td>
            <td data-field="partitions">${parts || `<span class="muted">${DASH}</span>`}</td>
            ${num(t.coordinator, "coordinator")}</tr>`;
        })
        .join("");
      const unreachable = data.unreachable_brokers || [];
      const key = html + unreachable.join(",");
      if (key === lastRender) return;
      lastRender = key;
      root.querySelector("tbody").innerHTML = html;
      const empty = root.querySelector("[data-testid=txns-empty]");
      empty.hidden = shown.length > 0;
      empty.textContent = all.length
        ? transactionsState.openOnly && !needle ? "No open transactions." : "No transaction matches the filter."
        : "No transactional producers yet.";
      const open = all.filter((t) => t.open).length;
      root.querySelector("#txn-count").textContent = `${plural(all.length, "transactional id")}, ${fmtInt(open)} open`;
      const partial = root.querySelector("[data-testid=txns-partial]");
      partial.hidden = unreachable.length === 0;
      partial.textContent = `Brokers ${unreachable.join(", ")} did not answer: their transactions are missing.`;
    };
    return {
      title: "Transactions",
      mount(el) {
        root = el;
        root.innerHTML = `
          <div class="page-head"><div><h1>Transactions</h1><p class="sub" id="txn-count">Loading…</p></div></div>
          <p class="banner warn" data-testid="txns-partial" hidden></p>
          <div class="toolbar">
            <input type="search" class="filter" data-testid="txn-filter" placeholder="Filter by transactional id" aria-label="Filter transactions" spellcheck="false">
            <label class="check"><input type="checkbox" data-testid="txn-open-only"> Open only</label>
          </div>
          <section class="card flush">
            <table class="data" data-testid="txns-table"><thead><tr>
              <th data-sort="transactional_id">Transactional id</th><th data-sort="state">State</th>
              <th class="num" data-sort="producer_id">Producer id</th><th class="num" data-sort="producer_epoch">Epoch</th>
              <th class="num" data-sort="age_ms">Open for</th><th class="num" data-sort="timeout_ms">Timeout</th>
              <th>Partitions</th><th class="num" data-sort="coordinator">Coordinator</th>
            </tr></thead><tbody></tbody></table>
            <p class="empty" data-testid="txns-empty" hidden></p>
          </section>`;
        const filter = root.querySelector("[data-testid=txn-filter]");
        filter.value = transactionsState.filter;
        filter.addEventListener("input", () => {
          transactionsState.filter = filter.value;
          render();
        });
        const openOnly = root.querySelector("[data-testid=txn-open-only]");
        openOnly.checked = transactionsState.openOnly;
        openOnly.addEventListener("change", () => {
          transactionsState.openOnly = openOnly.checked;
          render();
        });
        sortable(root.querySelector("thead"), transactionsState.sort, render);
      },
      async refresh(signal) {
        data = await api("/v1/transactions", { signal });
        render();
      },
    };
  }

  const transformsState = { filter: "", sort: { key: "name", dir: 1 } };

  /** The validators card of the Transforms page: what each refused, and its failures. */
  function renderValidators(root, validators) {
    const html = validators
      .map((v) => {
        const last = v.last_error_ms > (v.last_rejection_ms ?? -1) ? v.last_error : v.last_rejection;
        return `<tr data-testid="validator-row" data-validator="${esc(v.name)}"${v.failures > 0 ? ` class="bad"` : ""}>
          <td data-field="name">${esc(v.name)}</td>
          <td data-field="topic"><a href="${topicHref(v.topic)}">${esc(v.topic)}</a></td>
          <td data-field="on_failure">${v.on_failure === "accept" ? "fail open" : "fail closed"}</td>
          ${num(v.batches_accepted, "batches_accepted")}
          ${num(v.batches_rejected, "batches_rejected")}
          ${num(v.records_rejected, "records_rejected")}
          <td class="num" data-field="failures">${v.failures > 0 ? `<span class="badge bad">${fmtInt(v.failures)}</span>` : `<span class="muted">0</span>`}</td>
          <td data-field="last" class="muted">${esc(last ?? "")}</td>
          ${num(v.version, "version")}</tr>`;
      })
      .join("");
    const body = root.querySelector("[data-testid=validators-table] tbody");
    if (body.innerHTML !== html) body.innerHTML = html;
    const empty = root.querySelector("[data-testid=validators-empty]");
    empty.hidden = validators.length > 0;
  }

  /** A consumer-protocol group's assignor: its uploaded version, or the fallback, after the name. */
  function assignorNote(a) {
    if (!a) return "";
    if (a.error) return ` <span class="badge bad" title="${esc(a.error)}">fallback</span>`;
    return a.version == null ? "" : ` <span class="muted">v${fmtInt(a.version)}</span>`;
  }

  /** The assignors card of the Transforms page: built-in and uploaded, with runs and failures. */
  function renderAssignors(root, list) {
    const builtin = (list.builtin || []).map(
      (name, i) => `<tr data-testid="assignor-row" data-assignor="${esc(name)}">
        <td data-field="name">${esc(name)}</td><td data-field="kind">built-in${i === 0 ? " (default)" : ""}</td>
        <td class="num muted">${DASH}</td><td class="num muted">${DASH}</td><td class="num muted">${DASH}</td><td></td><td class="muted"></td></tr>`,
    );
    const uploaded = (list.assignors || []).map(
      (a) => `<tr data-testid="assignor-row" data-assignor="${esc(a.name)}"${a.failures > 0 ? ` class="bad"` : ""}>
        <td data-field="name">${esc(a.name)}</td><td data-field="kind">wasm</td>
        ${num(a.version, "version")}${num(a.runs, "runs")}
        <td class="num" data-field="failures">${a.failures > 0 ? `<span class="badge bad">${fmtInt(a.failures)}</span>` : `<span class="muted">0</span>`}</td>
        <td data-field="deployed">${a.deployed_ms > 0 ? fmtAgo(a.deployed_ms) : ""}</td>
        <td data-field="last_error" class="muted">${esc(a.last_error ?? "")}</td></tr>`,
    );
    const html = builtin.concat(uploaded).join("");
    const body = root.querySelector("[data-testid=assignors-table] tbody");
    if (body.innerHTML !== html) body.innerHTML = html;
  }

  function transformsView() {
    let root;
    let transforms = null;
    let lastRender = null;
    const render = () => {
      if (!transforms) return;
      const needle = transformsState.filter.trim().toLowerCase();
      const rows = transforms.map((t) => ({ ...t, outputs: (t.output_topics || []).join(", ") }));
      const matches = (t) =>
        t.name.toLowerCase().includes(needle) || t.input_topic.toLowerCase().includes(needle) || t.outputs.toLowerCase().includes(needle);
      const shown = sortRows(needle ? rows.filter(matches) : rows, transformsState.sort);
      const html = shown
        .map(
          (t) => `<tr data-testid="transform-row" data-transform="${esc(t.name)}"${t.state === "failed" ? ` class="bad"` : ""}>
            <td data-field="name"><a href="${transformHref(t.name)}">${esc(t.name)}</a></td>
            <td data-field="topics"><a href="${topicHref(t.input_topic)}">${esc(t.input_topic)}</a> <span class="muted">→</span>
              ${(t.output_topics || []).map((o) => `<a href="${topicHref(o)}">${esc(o)}</a>`).join(", ")}</td>
            <td>${transformBadge(t.state)}</td>
            ${num(t.lag, "lag")}
            ${num(t.records_in_per_sec, "records_in_per_sec", fmtRate(t.records_in_per_sec))}
            ${num(t.records_out_per_sec, "records_out_per_sec", fmtRate(t.records_out_per_sec))}
            <td class="num" data-field="errors">${t.errors > 0 ? `<span class="badge bad">${fmtInt(t.errors)}</span>` : `<span class="muted">0</span>`}</td>
            ${num(t.version, "version")}</tr>`,
        )
        .join("");
      if (html === lastRender) return;
      lastRender = html;
      root.querySelector("tbody").innerHTML = html;
      const empty = root.querySelector("[data-testid=transforms-empty]");
      empty.hidden = shown.length > 0;
      empty.innerHTML = transforms.length
        ? "No transform matches the filter."
        : "No transforms yet. Build one with <code>runnel transform build</code> and deploy it with <code>runnel transform deploy</code>.";
      root.querySelector("#transform-count").textContent =
        shown.length === transforms.length
          ? plural(transforms.length, "transform")
          : `${fmtInt(shown.length)} of ${plural(transforms.length, "transform")}`;
    };
    return {
      title: "Transforms",
      mount(el) {
        root = el;
        root.innerHTML = `
          <div class="page-head"><div><h1>Transforms</h1><p class="sub" id="transform-count">Loading…</p></div></div>
          <div class="toolbar">
            <input type="search" class="filter" data-testid="transform-filter" placeholder="Filter by name or topic" aria-label="Filter transforms" spellcheck="false">
          </div>
          <section class="card flush">
            <table class="data" data-testid="transforms-table"><thead><tr>
              <th data-sort="name">Name</th><th data-sort="input_topic">Input → outputs</th><th data-sort="state">State</th>
              <th class="num" data-sort="lag">Lag</th><th class="num" data-sort="records_in_per_sec">In/s</th>
              <th class="num" data-sort="records_out_per_sec">Out/s</th><th class="num" data-sort="errors">Errors</th>
              <th class="num" data-sort="version">Version</th>
            </tr></thead><tbody></tbody></table>
            <p class="empty" data-testid="transforms-empty" hidden></p>
          </section>
          <section class="card flush" data-testid="validators">
            <h2>Validators <span class="hint">WASM checks on a topic's produce path: a refused batch is answered INVALID_RECORD and never appended</span></h2>
            <table class="data" data-testid="validators-table"><thead><tr>
              <th>Name</th><th>Topic</th><th>On failure</th><th class="num">Accepted</th><th class="num">Rejected</th>
              <th class="num">Records rejected</th><th class="num">Failures</th><th>Last rejection or error</th><th class="num">Version</th>
            </tr></thead><tbody></tbody></table>
            <p class="empty" data-testid="validators-empty" hidden>No validators. Attach one to a topic with <code>runnel validator deploy</code>.</p>
          </section>
          <section class="card flush" data-testid="assignors">
            <h2>Assignors <span class="hint">server-side partition assignors of consumer groups (group.protocol=consumer), chosen with group.remote.assignor; upload one with <code>runnel assignor deploy</code></span></h2>
            <table class="data" data-testid="assignors-table"><thead><tr>
              <th>Name</th><th>Kind</th><th class="num">Version</th><th class="num">Runs</th><th class="num">Failures</th><th>Deployed</th><th>Last error</th>
            </tr></thead><tbody></tbody></table>
          </section>`;
        const filter = root.querySelector("[data-testid=transform-filter]");
        filter.value = transformsState.filter;
        filter.addEventListener("input", () => {
          transformsState.filter = filter.value;
          render();
        });
        sortable(root.querySelector("thead"), transformsState.sort, render);
        rowLinks(root.querySelector("tbody"));
      },
      async refresh(signal) {
        const [data, checks, assignors] = await Promise.all([
          api("/v1/transforms", { signal }),
          api("/v1/validators", { signal }),
          api("/v1/assignors", { signal }),
        ]);
        transforms = data.transforms || [];
        render();
        renderValidators(root, checks.validators || []);
        renderAssignors(root, assignors);
      },
    };
  }

  const LOG_LEVELS = new Set(["error", "warn", "info", "debug", "trace"]);

  function transformView(name) {
    let root;
    let detail = null;
    let lastLogs = null;
    let busy = false;
    const samples = { in: [], out: [] };
    const base = `/v1/transforms/${encodeURIComponent(name)}`;

    const renderDetail = () => {
      const t = detail;
      const parts = (t.partitions || []).slice().sort((a, b) => a.partition - b.partition);
      const sum = (key) => parts.reduce((total, p) => total + (p[key] || 0), 0);
      root.querySelector("#transform-sub").innerHTML = `version ${fmtInt(t.version)} · module ${esc(fmtBytes(t.module_bytes))}
        · sha256 <code title="${esc(t.sha256)}">${esc(String(t.sha256 || "").slice(0, 12))}</code>`;
      const pause = root.querySelector("[data-testid=transform-pause]");
      const resume = root.querySelector("[data-testid=transform-resume]");
      pause.hidden = t.paused;
      resume.hidden = !t.paused;
      pause.disabled = resume.disabled = busy;
      root.querySelector("#transform-stats").innerHTML = `
        <div class="stat"><span class="label">State</span><span class="value" data-testid="transform-state">${transformBadge(t.state)}</span></div>
        ${stat("Lag", fmtInt(t.lag), "transform-lag", null, t.lag > 0 ? "accent" : "")}
        ${stat("Records in", fmtInt(sum("records_in")), "transform-records-in")}
        ${stat("Records out", fmtInt(sum("records_out")), "transform-records-out")}
        ${stat("Errors", fmtInt(t.errors), "transform-errors", null, t.errors > 0 ? "bad" : "")}
        ${stat("Skipped · dead-lettered", `${fmtInt(sum("skipped"))} · ${fmtInt(sum("dead_lettered"))}`, "transform-dropped", null,
          sum("skipped") + sum("dead_lettered") > 0 ? "warn" : "")}
        ${stat("Memory", fmtBytes(sum("memory_bytes")), "transform-memory")}
        ${t.stateful ? stat("Keyed state", `${fmtBytes(sum("state_bytes"))} · ${fmtInt(sum("state_keys"))} keys`, "transform-state-size") : ""}`;
      root.querySelector("#transform-throughput").innerHTML = `
        ${meter("Records in", fmtRate(t.records_in_per_sec), samples.in, "transform-in-rate")}
        ${meter("Records out", fmtRate(t.records_out_per_sec), samples.out, "transform-out-rate")}`;
      root.querySelector("#transform-throughput").dataset.samples = String(samples.in.length);
      const params = Object.entries(t.parameters || {});
      const errorPolicy =
        t.error_policy === "dead_letter" && t.dead_letter_topic != null
          ? `dead_letter → <a href="${topicHref(t.dead_letter_topic)}">${esc(t.dead_letter_topic)}</a>`
          : esc(t.error_policy);
      const config = [
        ["Input topic", `<a href="${topicHref(t.input_topic)}" data-field="input_topic">${esc(t.input_topic)}</a>`],
        ["Output topics", (t.output_topics || []).map((o, i) => `<span class="muted">${i}:</span> <a href="${topicHref(o)}">${esc(o)}</a>`).join("<br>")],
        ["Parameters", params.length ? params.map(([k, v]) => `<code>${esc(k)}=${esc(v)}</code>`).join("<br>") : `<span class="muted">none</span>`],
        ["Start", esc(t.start)],
        ["Delivery", `<span data-field="delivery">${esc(String(t.delivery || "").replaceAll("_", "-"))}</span>
          <span class="muted">· commit every ${fmtInt(t.commit_interval_ms)} ms</span>`],
        ["Error policy", errorPolicy],
        ["Memory limit", `${esc(fmtBytes(t.memory_bytes))} per instance`],
        ["Keyed state", t.stateful && t.state_topic != null
          ? `changelog <a href="${topicHref(t.state_topic)}" data-field="state_topic">${esc(t.state_topic)}</a>
             <span class="muted" data-field="state_bytes_max">· at most ${esc(fmtBytes(t.state_bytes_max))} per partition</span>`
          : `<span class="muted">stateless</span>`],
        ["Call timeout", `${fmtInt(t.call_timeout_ms)} ms`],
        ["Batch", `${fmtInt(t.batch_records_max)} records per call at most`],
      ];
      root.querySelector("#transform-config").innerHTML = `<dl class="config">${config
        .map(([k, v]) => `<dt>${esc(k)}</dt><dd>${v}</dd>`)
        .join("")}</dl>`;
      root.querySelector("#transform-partitions").innerHTML = parts.length
        ? `<table class="data" data-testid="transform-partitions-table"><thead><tr><th class="num">Partition</th><th>State</th>
            <th class="num">Position</th><th class="num">High watermark</th><th class="num">Lag</th><th class="num">Records in</th>
            <th class="num">In/s</th><th class="num">Out/s</th><th class="num">Errors</th><th class="num">Memory</th>${t.stateful ? `<th class="num">Keyed state</th>` : ""}<th>Last error</th>
            </tr></thead><tbody>${parts
              .map(
                (p) => `<tr data-testid="transform-partition-row" data-partition="${esc(p.partition)}"${p.state === "failed" ? ` class="bad"` : ""}>
                  ${num(p.partition, "partition")}<td>${transformBadge(p.state)}</td>
                  ${num(p.position, "position")}${num(p.high_watermark, "high_watermark")}${num(p.lag, "lag")}
                  ${num(p.records_in, "records_in")}
                  ${num(p.records_in_per_sec, "records_in_per_sec", fmtRate(p.records_in_per_sec))}
                  ${num(p.records_out_per_sec, "records_out_per_sec", fmtRate(p.records_out_per_sec))}
                  ${num(p.errors, "errors")}${num(p.memory_bytes, "memory_bytes", fmtBytes(p.memory_bytes))}
                  ${t.stateful ? num(p.state_bytes, "state_bytes", `${fmtBytes(p.state_bytes)} · ${fmtInt(p.state_keys)} keys`) : ""}
                  <td data-field="last_error" class="wrap">${p.last_error == null ? `<span class="muted">${DASH}</span>` : `<span class="error-text">${esc(p.last_error)}</span>${p.last_error_ms == null ? "" : `<div class="muted small">${esc(fmtAgo(p.last_error_ms))}</div>`}`}</td></tr>`,
              )
              .join("")}</tbody></table>`
        : `<p class="empty">No input partition is led by this node, or none has started yet.</p>`;
    };

    const renderLogs = (lines) => {
      const box = root.querySelector("[data-testid=transform-logs]");
      const html = lines
        .map((l) => {
          const level = LOG_LEVELS.has(l.level) ? l.level : "info";
          const time = new Date(l.timestamp_ms).toISOString().slice(11, 23);
          return `<div class="log-line" data-level="${level}"><span class="ts" title="${esc(fmtIso(l.timestamp_ms))}">${time}</span>
            <span class="lvl">${level.toUpperCase()}</span><span class="part">${l.partition == null ? "host" : `p${esc(l.partition)}`}</span><span class="msg">${esc(l.message)}</span></div>`;
        })
        .join("");
      if (html === lastLogs) return;
      lastLogs = html;
      // Follow the tail unless the reader scrolled up to look at something.
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
      box.innerHTML = html || `<p class="empty">No log lines yet.</p>`;
      box.dataset.lines = String(lines.length);
      if (atBottom) box.scrollTop = box.scrollHeight;
    };

    const act = async (action, label) => {
      busy = true;
      if (detail) renderDetail();
      try {
        await api(`${base}/${action}`, { method: "POST" });
      } catch (e) {
        showBanner(`Could not ${label} ${name}: ${e.message}`, "action");
      } finally {
        busy = false;
        refreshNow();
      }
    };

    return {
      title: name,
      mount(el) {
        root = el;
        root.innerHTML = `
          <nav class="crumbs"><a href="#/transforms">Transforms</a><span>/</span></nav>
          <div class="page-head">
            <div><h1 data-testid="transform-name">${esc(name)}</h1><p class="sub" id="transform-sub">Loading…</p></div>
            <div class="actions">
              <button type="button" data-testid="transform-pause" hidden>Pause</button>
              <button type="button" class="primary" data-testid="transform-resume" hidden>Resume</button>
              <button type="button" class="danger" data-testid="delete-transform">Delete transform</button>
            </div>
          </div>
          <div class="stack" id="transform-body">
            <section class="stats" id="transform-stats"></section>
            <section class="throughput two" id="transform-throughput" data-testid="transform-throughput" data-samples="0"></section>
            <section class="card flush"><h2>Partitions</h2><div id="transform-partitions"></div></section>
            <section class="card"><h2>Configuration</h2><div id="transform-config"></div></section>
            <section class="card">
              <h2>Logs <span class="hint">the last 200 lines, refreshed every ${POLL_MS / 1000} s</span></h2>
              <div class="logs" data-testid="transform-logs" data-lines="0" tabindex="0" aria-label="Transform logs"></div>
            </section>
          </div>`;
        root.querySelector("[data-testid=transform-pause]").addEventListener("click", () => act("pause", "pause"));
        root.querySelector("[data-testid=transform-resume]").addEventListener("click", () => act("resume", "resume"));
        root.querySelector("[data-testid=delete-transform]").addEventListener("click", async () => {
          if (!window.confirm(`Delete transform "${name}"? Its output topics and their records stay.`)) return;
          try {
            await api(base, { method: "DELETE" });
            location.hash = "#/transforms";
          } catch (e) {
            showBanner(`Could not delete ${name}: ${e.message}`, "action");
          }
        });
      },
      async refresh(signal) {
        let data;
        let logs;
        try {
          [data, logs] = await Promise.all([api(base, { signal }), api(`${base}/logs?limit=200`, { signal })]);
        } catch (e) {
          if (e.status === 404) {
            root.querySelector("#transform-body").innerHTML = `<div class="notfound" data-testid="not-found">
              <h2>Transform not found</h2><p>${esc(e.message)}</p><p><a href="#/transforms">Back to transforms</a></p></div>`;
            root.querySelector(".page-head .actions").hidden = true;
            root.querySelector("#transform-sub").textContent = "";
            return;
          }
          throw e;
        }
        if (!root.querySelector("#transform-stats")) return; // not-found page is showing
        detail = data;
        pushSample(samples.in, data.records_in_per_sec || 0, SPARK_SAMPLES);
        pushSample(samples.out, data.records_out_per_sec || 0, SPARK_SAMPLES);
        renderDetail();
        renderLogs(logs.lines || []);
      },
    };
  }

  function notFoundView() {
    return {
      title: "Not found",
      mount(el) {
        el.innerHTML = `<div class="notfound"><h2>No such page</h2><p><a href="#/">Back to the overview</a></p></div>`;
      },
      async refresh() {},
    };
  }

  // ---------------------------------------------------------------------------------------
  // Router and polling
  // ---------------------------------------------------------------------------------------

  function route() {
    const hash = location.hash.replace(/^#\/?/, "");
    const parts = hash.split("?")[0].split("/").filter(Boolean);
    let decoded;
    try {
      decoded = parts.map(decodeURIComponent);
    } catch {
      return { nav: null, view: notFoundView() };
    }
    const [section, ...rest] = decoded;
    if (!section) return { nav: "overview", view: overviewView() };
    if (section === "topics" && rest.length === 0) return { nav: "topics", view: topicsView() };
    if (section === "topics") return { nav: "topics", view: topicView(rest.join("/")) };
    if (section === "groups" && rest.length === 0) return { nav: "groups", view: groupsView() };
    if (section === "groups") return { nav: "groups", view: groupView(rest.join("/")) };
    if (section === "transactions" && rest.length === 0) return { nav: "transactions", view: transactionsView() };
    if (section === "transforms" && rest.length === 0) return { nav: "transforms", view: transformsView() };
    if (section === "transforms") return { nav: "transforms", view: transformView(rest.join("/")) };
    return { nav: null, view: notFoundView() };
  }

  const main = document.getElementById("view");
  let current = null; // { view, controller }: a tick whose `current` was replaced drops its result
  let timer = null;
  let running = false;
  let rerun = false;

  function navigate() {
    if (current) {
      current.controller.abort();
      current.view.unmount?.();
    }
    clearTimeout(timer);
    timer = null;
    hideBanner();
    const { nav, view } = route();
    current = { view, controller: new AbortController() };
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === nav);
      if (a.dataset.nav === nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.title = view.title === "Overview" ? "Runnel" : `${view.title} · Runnel`;
    main.innerHTML = "";
    const el = document.createElement("div");
    el.className = "page";
    main.appendChild(el);
    view.mount(el);
    window.scrollTo(0, 0);
    running = false; // a tick of the old view may still be awaiting; it no longer owns `current`
    tick();
  }

  async function tick() {
    clearTimeout(timer);
    timer = null;
    // Signed out (the login form is up): nothing to poll.
    if (!current) return;
    if (document.visibilityState === "hidden") {
      setLive("paused", "Paused", "Polling stops while the tab is hidden");
      return;
    }
    if (running) {
      rerun = true;
      return;
    }
    running = true;
    rerun = false;
    const mine = current;
    try {
      await mine.view.refresh(mine.controller.signal);
      if (mine !== current) return;
      const now = new Date();
      setLive("live", "Live", `Updated ${now.toLocaleTimeString()} · every ${POLL_MS / 1000} s`);
    } catch (e) {
      if (mine !== current || isAbort(e)) return;
      if (e.status === 401) {
        showLogin(e.message);
        return;
      }
      setLive("error", "Unreachable", e.message);
      showBanner(e.message, "poll");
    } finally {
      if (mine === current) {
        running = false;
        if (document.visibilityState !== "hidden") timer = setTimeout(tick, rerun ? 0 : POLL_MS);
      }
    }
  }

  /** Polls the current view now (after a form changed what it shows). */
  function refreshNow() {
    if (running) rerun = true;
    else tick();
  }

  function setLive(state, text, title) {
    const el = document.getElementById("live");
    el.dataset.state = state;
    el.title = title || "";
    document.getElementById("live-text").textContent = text;
    if (state === "live") hideBanner("poll");
  }

  /** An error line above the page; "poll" banners go away with the next good poll. */
  function showBanner(message, kind) {
    let banner = document.getElementById("banner");
    if (!banner) {
      banner = document.createElement("div");
      banner.id = "banner";
      banner.className = "banner error";
      banner.setAttribute("role", "alert");
      banner.dataset.testid = "error-banner";
      main.prepend(banner);
    }
    banner.dataset.kind = kind;
    banner.textContent = message;
  }

  function hideBanner(kind) {
    const banner = document.getElementById("banner");
    if (banner && (kind == null || banner.dataset.kind === kind)) banner.remove();
  }

  // ---------------------------------------------------------------------------------------
  // Login (a node started with --http-authentication required)
  // ---------------------------------------------------------------------------------------

  /** Replaces the page with the login form; polling stops until a login succeeds. */
  function showLogin(message) {
    if (current) {
      current.controller.abort();
      current.view.unmount?.();
      current = null;
    }
    clearTimeout(timer);
    timer = null;
    running = false;
    renderUser(null);
    setLive("error", "Signed out", message || "");
    document.title = "Log in · Runnel";
    main.innerHTML = `<div class="page"><form class="login card" data-testid="login-form">
      <h1>Log in</h1>
      <p class="muted">This node's HTTP API requires authentication: the name and password of a
        SCRAM user (the ones Kafka clients use).</p>
      <label>User <input name="username" autocomplete="username" required data-testid="login-user"></label>
      <label>Password <input name="password" type="password" autocomplete="current-password" required
        data-testid="login-password"></label>
      <button type="submit" data-testid="login-submit">Log in</button>
      <p class="form-error" data-testid="login-error" role="alert" hidden></p>
    </form></div>`;
    const form = main.querySelector("form");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = form.querySelector("[data-testid=login-error]");
      try {
        const who = await api("/v1/login", {
          method: "POST",
          body: { username: form.elements.username.value, password: form.elements.password.value },
        });
        renderUser(who);
        navigate();
      } catch (e) {
        error.textContent = e.message;
        error.hidden = false;
      }
    });
  }

  /** Who is logged in, in the top bar (nothing for an anonymous dashboard). */
  function renderUser(who) {
    const known = Boolean(who && who.method !== "anonymous");
    document.getElementById("user").hidden = !known;
    document.getElementById("user-name").textContent = known ? who.principal.replace(/^User:/, "") : "";
    document.getElementById("logout").hidden = !(who && who.method === "session");
  }

  document.getElementById("logout").addEventListener("click", async () => {
    // The node clears the cookie either way; a failed revocation is said, not hidden.
    let message = "Logged out";
    try {
      await api("/v1/logout", { method: "POST" });
    } catch (e) {
      message = "Logged out of this browser, but the node could not revoke the session (" + e.message +
        "): it stays valid until it expires";
    }
    showLogin(message);
  });

  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") {
      clearTimeout(timer);
      timer = null;
      setLive("paused", "Paused", "Polling stops while the tab is hidden");
    } else if (!running) {
      tick();
    }
  });
  window.addEventListener("hashchange", navigate);
  api("/v1/whoami").then(renderUser, () => renderUser(null));
  navigate();
})();
