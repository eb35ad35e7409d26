/* The live run page.
 *
 * The page starts from the state the server rendered into it, then listens on the browser
 * socket (/ws/runs/<id>/), which only notifies. A level's notice carries every figure the
 * charts draw (p50 and p99, throughput, the simulator's label), so it is drawn at once.
 * After every (re)connect — and, debounced, after a notice that changes more than a chart
 * point (a trial's start or end, the run's end) — it re-reads the whole state from live.json
 * and then applies the notices that state does not cover. A notice names its message by
 * (epoch, seq) — each agent incarnation numbers from 0 in an epoch of its own — and is
 * covered when the state read its epoch up to at least that seq, outside the epoch's gaps,
 * or when it was applied already: so nothing is lost across a reconnect, nothing is counted
 * twice, and a restarted agent's notices are never taken for its predecessor's.
 * A conflict notice (an agent message refused, see the run API's agent_conflicts) makes the
 * page re-read the run, which then shows its warning.
 *
 * window.benchsiteRunPage exposes the charts and the state (for the browser tests).
 */
(function () {
  "use strict";

  var root = document.getElementById("run-live");
  var dataNode = document.getElementById("run-state-data");
  if (!root || !dataNode || typeof window.Chart === "undefined") {
    return; // the server-rendered tables stand on their own
  }

  var COLORS = ["#2f5bea", "#d9480f", "#2b8a3e", "#ae3ec9", "#e67700", "#0b7285", "#c2255c",
    "#5c940d", "#364fc7", "#862e9c"];
  var CURVES = [
    ["ttft", "chart-ttft", "ms"],
    ["itl", "chart-itl", "ms"],
    ["tpot", "chart-tpot", "ms"]
  ];
  var RESYNC_DELAY_MS = 300;
  var MAX_RETRY_MS = 15000;

  var page = {
    charts: {},
    state: null,
    resyncs: 0,
    notices: 0,
    applied: 0,
    socket: null,
    connected: false,
    // Closes the socket as a network would; the next attempt waits ``retryAfterMs``.
    dropSocket: function (retryAfterMs) {
      if (typeof retryAfterMs === "number") { retryMs = retryAfterMs; }
      if (page.socket) { page.socket.close(); }
    }
  };
  window.benchsiteRunPage = page;

  var pending = null; // notices that arrive while a re-read is in flight
  var resyncing = false;
  var resyncAgain = false;
  var resyncTimer = null;
  var retryMs = 1000;
  var ended = false;
  var clockOffsetMs = 0;

  var $ = function (id) { return document.getElementById(id); };

  // --- state ------------------------------------------------------------------------------

  function adopt(snapshot) {
    snapshot.read = new Map();
    (snapshot.epochs_read || []).forEach(function (entry) {
      snapshot.read.set(entry.epoch, entry);
    });
    snapshot.applied = new Set(); // "epoch:seq" of the notices applied since this state
    clockOffsetMs = Date.parse(snapshot.now) - Date.now();
    page.state = snapshot;
    if (typeof snapshot.trials_html === "string") {
      replaceTrials(snapshot.trials_html);
    }
    if (typeof snapshot.answer_html === "string" && $("run-answer")) {
      $("run-answer").innerHTML = snapshot.answer_html; // the page's own (escaping) template
    }
    if (typeof snapshot.search_html === "string" && $("run-search-box")) {
      $("run-search-box").innerHTML = snapshot.search_html; // appears with search_finished
    }
    renderAll();
  }

  function epochOf(notice) {
    return typeof notice.epoch === "number" ? notice.epoch : 0; // protocol 1 is epoch 0
  }

  function covered(epoch, seq) {
    var s = page.state;
    var read = s.read.get(epoch);
    var inGap = read && read.gaps.some(function (gap) { return seq >= gap[0] && seq <= gap[1]; });
    return (read !== undefined && seq <= read.last_seq && !inGap) ||
      s.applied.has(epoch + ":" + seq);
  }

  function levelKey(level) {
    if (!level) { return "?"; }
    if (level.concurrency !== undefined && level.concurrency !== null) {
      return "c=" + level.concurrency;
    }
    return "rate=" + String(level.request_rate);
  }

  function trialOf(index) {
    var trials = page.state.trials;
    for (var i = 0; i < trials.length; i++) {
      if (trials[i].index === index) { return trials[i]; }
    }
    var trial = { index: index, label: "trial " + index, levels: [], cold_start: [],
      outcome: "running", failure_class: "", simulated: false };
    trials.push(trial);
    trials.sort(function (a, b) { return a.index - b.index; });
    return trial;
  }

  function addTimeline(stage, label, status) {
    var timeline = page.state.timeline;
    timeline.forEach(function (entry) { if (entry.status === "now") { entry.status = "done"; } });
    timeline.push({ stage: stage, label: label, at: new Date().toISOString(),
      status: status || "now" });
  }

  function apply(notice) {
    if (notice.kind === "agent_conflict") { scheduleResync(); return; }
    var epoch = epochOf(notice);
    if (typeof notice.seq !== "number" || covered(epoch, notice.seq)) { return; }
    page.state.applied.add(epoch + ":" + notice.seq);
    page.applied += 1;
    var trial = typeof notice.trial === "number" ? trialOf(notice.trial) : null;
    switch (notice.kind) {
      case "level_progress":
        page.state.progress.push({
          epoch: epoch, seq: notice.seq, t: notice.sent_at || Date.now() / 1000,
          trial: notice.trial, level: levelKey(notice.level),
          kv_cache_usage: notice.kv_cache_usage, num_requests_waiting: notice.num_requests_waiting,
          gpus: notice.gpus || null,
          requests_done: notice.requests_done, requests_total: notice.requests_total
        });
        renderServerChart();
        renderGpuChart();
        renderProgress(notice);
        return;
      case "measurement":
        // Complete for the charts: no re-read (the trial's table follows at its end).
        upsertLevel(trial, notice);
        addTimeline("level", "Trial " + trial.index + ": level " + levelKey(notice.level) +
          " done (" + (notice.result || {}).completed + " ok, " +
          (notice.result || {}).failed + " failed)", "now");
        renderCurves();
        renderTimeline();
        renderProgress(null);
        return;
      case "trial_started":
        trial.outcome = "running";
        addTimeline("trial", "Trial " + trial.index + " started");
        break;
      case "cold_start_phase":
        trial.cold_start = trial.cold_start.filter(function (p) { return p[0] !== notice.phase; });
        trial.cold_start.push([notice.phase, notice.seconds]);
        addTimeline("phase", "Trial " + trial.index + ": " + String(notice.phase).replace(/_/g, " ") +
          " at " + Number(notice.seconds).toFixed(1) + " s");
        break;
      case "trial_finished":
        trial.outcome = notice.outcome;
        trial.failure_class = notice.failure_class || "";
        addTimeline("trial_end", "Trial " + trial.index + " " + notice.outcome +
          (notice.failure_class ? " — " + notice.failure_class : ""),
          notice.outcome === "failed" ? "failed" : "now");
        break;
      case "heartbeat":
        return;
      default:
        break; // hello, run_finished: the re-read below tells the rest
    }
    renderTimeline();
    scheduleResync(); // tables, cost and state come with the full re-read
  }

  function upsertLevel(trial, notice) {
    var key = levelKey(notice.level);
    var result = notice.result || {};
    var level = null;
    trial.levels.forEach(function (l) { if (l.key === key) { level = l; } });
    if (!level) {
      level = { key: key, concurrency: notice.level.concurrency,
        request_rate: notice.level.request_rate };
      trial.levels.push(level);
    }
    level.completed = result.completed;
    level.failed = result.failed;
    level.ttft_p50 = pick(result.median_ttft_ms, level.ttft_p50);
    level.ttft_p99 = pick(result.p99_ttft_ms, level.ttft_p99);
    level.itl_p50 = pick(result.median_itl_ms, level.itl_p50);
    level.itl_p99 = pick(result.p99_itl_ms, level.itl_p99);
    level.tpot_p50 = pick(result.median_tpot_ms, level.tpot_p50);
    level.tpot_p99 = pick(result.p99_tpot_ms, level.tpot_p99);
    level.output_throughput = pick(result.output_throughput, level.output_throughput);
    // The simulator labels its figures (any value but false); so does the page, everywhere.
    if (result.simulated !== undefined && result.simulated !== null &&
        result.simulated !== false) {
      level.simulated = true;
      trial.simulated = true;
    }
  }

  function pick(value, fallback) { return typeof value === "number" ? value : fallback; }

  // --- rendering --------------------------------------------------------------------------

  function renderAll() {
    renderHeader();
    renderConflicts();
    renderTimeline();
    renderCurves();
    renderServerChart();
    renderGpuChart();
    renderProgress(null);
    tickSpend();
  }

  function renderHeader() {
    var run = page.state.run;
    var badge = $("run-state");
    badge.textContent = run.state;
    badge.className = "run-state run-state-" + run.state;
    var form = document.querySelector(".cancel-form");
    if (run.terminal && form) {
      var note = document.createElement("p");
      note.className = "muted";
      note.id = "control-note";
      note.textContent = "The run has ended (" + run.state + ")." +
        (run.failure_reason ? " " + run.failure_reason : "");
      form.replaceWith(note);
      var requested = $("cancel-requested");
      if (requested) { requested.remove(); }
    }
  }

  function renderConflicts() {
    var run = page.state.run;
    var box = $("agent-conflicts");
    if (!box || !run.agent_conflicts) { return; } // a count never goes down
    var n = run.agent_conflicts;
    var count = n + " agent message" + (n === 1 ? " was" : "s were");
    // Only a change is written: an alert is announced again on every change of its text.
    if (box.hidden || $("agent-conflicts-count").textContent !== count) {
      $("agent-conflicts-count").textContent = count;
      $("agent-conflict-last").textContent = run.agent_conflict_last;
      box.hidden = false;
    }
  }

  function renderTimeline() {
    var list = $("timeline");
    var fragment = document.createDocumentFragment();
    page.state.timeline.forEach(function (entry) {
      var item = document.createElement("li");
      item.className = "tl tl-" + entry.status + " tl-" + entry.stage;
      item.textContent = entry.label + " ";
      if (entry.at) {
        var time = document.createElement("time");
        time.className = "muted";
        time.dateTime = entry.at;
        time.textContent = entry.at.slice(11, 19);
        item.appendChild(time);
      }
      fragment.appendChild(item);
    });
    var atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
    list.replaceChildren(fragment);
    if (atEnd) { list.scrollTop = list.scrollHeight; } // follow the run unless scrolled back
  }

  // A details box by its trial, kind and summary ("trial-0|turns|By turn c=8"): what the
  // reader opened stays open across a re-read.
  function detailsKey(box) {
    var trial = box.closest("article");
    var summary = box.querySelector("summary");
    return (trial ? trial.id : "") + "|" + box.className + "|" +
      (summary ? summary.textContent.replace(/\s+/g, " ").trim() : "");
  }

  function replaceTrials(html) {
    var holder = $("trials");
    var checked = new Set();
    holder.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) {
      checked.add(box.value);
    });
    var open = new Set();
    holder.querySelectorAll("details[open]").forEach(function (box) { open.add(detailsKey(box)); });
    holder.innerHTML = html; // rendered by the page's own (escaping) template
    holder.querySelectorAll("input[type=checkbox]").forEach(function (box) {
      box.checked = checked.has(box.value);
    });
    holder.querySelectorAll("details").forEach(function (box) {
      if (open.has(detailsKey(box))) { box.open = true; }
    });
  }

  function xOf(level) {
    if (page.state.axis === "concurrency") {
      return typeof level.concurrency === "number" ? level.concurrency : null;
    }
    return typeof level.request_rate === "number" ? level.request_rate : null;
  }

  function color(index) { return COLORS[index % COLORS.length]; }

  function seriesLabel(trial) {
    return "#" + trial.index + " " + trial.label + (trial.simulated ? " (simulated)" : "");
  }

  function series(trial, field) {
    return trial.levels
      .map(function (level) { return { x: xOf(level), y: level[field] }; })
      .filter(function (p) { return p.x !== null && typeof p.y === "number"; })
      .sort(function (a, b) { return a.x - b.x; });
  }

  function lineChart(id, yTitle, extraScales) {
    if (page.charts[id]) { return page.charts[id]; }
    var axis = page.state.axis;
    var scales = {
      x: { type: axis === "concurrency" ? "logarithmic" : "linear",
        title: { display: true, text: axis === "concurrency" ? "concurrency" : "requests/s" } },
      y: { beginAtZero: true, title: { display: true, text: yTitle } }
    };
    Object.assign(scales, extraScales || {});
    page.charts[id] = new window.Chart($(id), {
      type: "line",
      data: { datasets: [] },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        parsing: false,
        scales: scales,
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } }
      }
    });
    return page.charts[id];
  }

  function renderCurves() {
    var trials = page.state.trials;
    CURVES.forEach(function (curve) {
      var chart = lineChart(curve[1], curve[2]);
      var datasets = [];
      trials.forEach(function (trial) {
        [["p50", []], ["p99", [6, 4]]].forEach(function (kind) {
          datasets.push({
            label: seriesLabel(trial) + " " + kind[0],
            data: series(trial, curve[0] + "_" + kind[0]),
            borderColor: color(trial.index), backgroundColor: color(trial.index),
            borderDash: kind[1], pointRadius: 3, tension: 0
          });
        });
      });
      chart.data.datasets = datasets;
      chart.update("none");
    });
    var throughput = lineChart("chart-throughput", "output tokens/s");
    throughput.data.datasets = trials.map(function (trial) {
      return { label: seriesLabel(trial),
        data: series(trial, "output_throughput"), borderColor: color(trial.index),
        backgroundColor: color(trial.index), pointRadius: 3, tension: 0 };
    });
    throughput.update("none");
  }

  // A chart over the live progress's time (seconds since the first level), made once: a
  // percentage axis titled ``percentTitle`` and any ``moreScales`` beside it.
  function timeChart(id, percentTitle, moreScales) {
    if (!page.charts[id]) {
      var scales = {
        x: { type: "linear", title: { display: true, text: "seconds since the first level" } },
        y: { min: 0, max: 100, title: { display: true, text: percentTitle } }
      };
      Object.keys(moreScales || {}).forEach(function (name) { scales[name] = moreScales[name]; });
      page.charts[id] = new window.Chart($(id), {
        type: "line",
        data: { datasets: [] },
        options: {
          animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
          spanGaps: true, scales: scales,
          plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } }
        }
      });
    }
    return page.charts[id];
  }

  function renderServerChart() {
    var chart = timeChart("chart-server", "KV-cache usage %", {
      waiting: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
        title: { display: true, text: "waiting requests" } }
    });
    var points = page.state.progress;
    var t0 = points.length ? points[0].t : 0;
    var kv = [];
    var waiting = [];
    points.forEach(function (p) {
      var x = Math.round((p.t - t0) * 10) / 10;
      if (typeof p.kv_cache_usage === "number") { kv.push({ x: x, y: p.kv_cache_usage * 100 }); }
      if (typeof p.num_requests_waiting === "number") {
        waiting.push({ x: x, y: p.num_requests_waiting });
      }
    });
    chart.data.datasets = [
      { label: "KV-cache usage %", data: kv, borderColor: COLORS[0], backgroundColor: COLORS[0],
        pointRadius: 0, yAxisID: "y" },
      { label: "waiting requests", data: waiting, borderColor: COLORS[1],
        backgroundColor: COLORS[1], pointRadius: 0, yAxisID: "waiting" }
    ];
    chart.update("none");
  }

  // Each GPU's utilization (solid) and memory used as % of its total (dashed), over the same
  // time axis as the KV-cache chart; the figure stays hidden (its chart drawn, empty) until a
  // point has GPUs (a simulator or a host without NVML sends none).
  function renderGpuChart() {
    var points = page.state.progress;
    var t0 = points.length ? points[0].t : 0;
    var byGpu = {};
    points.forEach(function (p) {
      (p.gpus || []).forEach(function (gpu) {
        var lines = byGpu[gpu.index] || (byGpu[gpu.index] = { util: [], memory: [] });
        var x = Math.round((p.t - t0) * 10) / 10;
        if (typeof gpu.utilization_pct === "number") { lines.util.push({ x: x, y: gpu.utilization_pct }); }
        if (typeof gpu.memory_used_mib === "number" && gpu.memory_total_mib) {
          lines.memory.push({ x: x, y: gpu.memory_used_mib / gpu.memory_total_mib * 100 });
        }
      });
    });
    var indexes = Object.keys(byGpu);
    $("gpu-figure").hidden = indexes.length === 0;
    var chart = timeChart("chart-gpu", "%");
    chart.data.datasets = [];
    indexes.forEach(function (index) {
      var shade = COLORS[Number(index) % COLORS.length];
      chart.data.datasets.push(
        { label: "GPU " + index + " utilization %", data: byGpu[index].util, borderColor: shade,
          backgroundColor: shade, pointRadius: 0 },
        { label: "GPU " + index + " memory used %", data: byGpu[index].memory, borderColor: shade,
          backgroundColor: shade, pointRadius: 0, borderDash: [6, 4] });
    });
    chart.update("none");
  }

  // A steady level's total is the least it sends: it goes on until its window holds
  // enough, so the count may pass it; then it reads as a count, never "257 of 256".
  function requestsText(done, total) {
    if (!total) { return done + " requests"; }
    if (done <= total) { return done + " of " + total + " requests"; }
    return done + " requests (at least " + total + " planned)";
  }

  function renderProgress(notice) {
    var s = page.state;
    $("progress-trials").textContent = String(s.trials.length);
    var line = $("progress-level");
    if (notice && !s.run.terminal) {
      line.textContent = "Trial " + notice.trial + " · " + levelKey(notice.level) + ": " +
        requestsText(notice.requests_done, notice.requests_total);
    } else {
      // The planned levels against the planned total; what the capacity search measured
      // (probes, and loads too close to call measured again) beside it, never inside it.
      var fixed = 0, searched = 0;
      s.trials.forEach(function (t) {
        t.levels.forEach(function (level) {
          if (level.probe || level.extension) { searched += 1; } else { fixed += 1; }
        });
      });
      line.textContent = fixed + " of " + (s.planned_trials * s.planned_levels) +
        " load levels finished" +
        (searched ? "; " + searched + " more measured by the capacity search" : "");
    }
  }

  function tickSpend() {
    var run = page.state.run;
    if (run.cost_usd === null) {  // an endpoint without a price: unknown, not zero
      $("spend").textContent = "unknown";
      return;
    }
    var spend = parseFloat(run.cost_usd);
    var live = !run.terminal && run.price_usd_hr && run.pod_started_at && !run.pod_terminated_at;
    if (live) {
      // Runpod bills every started second; the billed figure lands when the pod is gone.
      var seconds = Math.ceil(Math.max(0,
        (Date.now() + clockOffsetMs - Date.parse(run.pod_started_at)) / 1000));
      spend = Math.max(spend, parseFloat(run.price_usd_hr) * seconds / 3600);
    }
    $("spend").textContent = "$" + spend.toFixed(4);
    var meter = $("spend-meter");
    meter.value = spend;
    if (live) {
      $("spend-note").textContent = "≈ so far at $" + run.price_usd_hr +
        "/h; billed exactly when the pod is gone";
    }
  }

  function status(text, kind) {
    var node = $("live-status");
    node.textContent = text;
    node.className = "live-status live-" + kind;
  }

  // --- the socket and the re-read ---------------------------------------------------------

  function scheduleResync() {
    if (resyncTimer) { return; }
    resyncTimer = setTimeout(function () { resyncTimer = null; resync(); }, RESYNC_DELAY_MS);
  }

  function resync() {
    if (resyncing) { resyncAgain = true; return; }
    resyncing = true;
    pending = [];
    fetch(root.dataset.liveUrl, { credentials: "same-origin", cache: "no-store",
      headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (snapshot) {
        adopt(snapshot);
        page.resyncs += 1;
      })
      .catch(function () {
        status("could not re-read the run; retrying", "error");
        resyncAgain = true;
      })
      .then(function () {
        var queued = pending;
        pending = null;
        resyncing = false;
        queued.forEach(apply);
        if (page.state.run.terminal && !ended) {
          ended = true;
          status("run ended", "ended");
          if (page.socket) { page.socket.close(); }
        }
        if (resyncAgain) { resyncAgain = false; setTimeout(scheduleResync, 2000); }
      });
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    var socket = new WebSocket(scheme + "//" + window.location.host + root.dataset.socketPath);
    page.socket = socket;
    socket.onopen = function () {
      retryMs = 1000;
      page.connected = true;
      status("live", "on");
      resync(); // whatever happened while no socket was open
    };
    socket.onmessage = function (event) {
      var notice;
      try { notice = JSON.parse(event.data); } catch (err) { return; }
      page.notices += 1;
      if (pending) { pending.push(notice); } else { apply(notice); }
    };
    socket.onclose = function () {
      page.connected = false;
      if (page.socket === socket) { page.socket = null; }
      if (ended) { return; }
      status("reconnecting…", "off");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    };
  }

  adopt(JSON.parse(dataNode.textContent));
  setInterval(tickSpend, 1000);
  if (page.state.run.terminal) {
    ended = true;
    status("run ended", "ended");
  } else {
    connect();
  }
})();
