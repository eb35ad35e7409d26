// Reports: the print button, and the charts drawn with the vendored Chart.js from the JSON the
// page embeds (the same figures as its tables; the tables work without this script).
(function () {
  "use strict";

  function data(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function num(text) {
    return text === "" || text === null ? null : Number(text);
  }

  // 70553706496 → "70.6 B", 494032768 → "494 M": parameter counts as people say them.
  function paramsText(count) {
    var billions = count / 1e9;
    if (billions >= 1) return Number(billions.toPrecision(3)) + " B";
    return Number((count / 1e6).toPrecision(3)) + " M";
  }

  // The log axis keeps Chart.js's choice of which ticks to label; only their text changes.
  var paramsAxis = {
    type: "logarithmic",
    title: { display: true, text: "Parameters" },
    ticks: {
      callback: function (value, index, ticks) {
        var shown = Chart.Ticks.formatters.logarithmic.call(this, value, index, ticks);
        return shown === "" ? "" : paramsText(value);
      }
    }
  };

  var MEASURED = "#2f5bea";
  var AMORTIZED = "#9db2f5";
  var FRONT = "#1b7a3d";
  var OTHER = "#8a93a6";

  function costChart() {
    var rows = data("cost-chart-data");
    var canvas = document.getElementById("cost-chart");
    if (!rows || !canvas) return;
    new Chart(canvas, {
      type: "bar",
      data: {
        labels: rows.map(function (r) { return r.label; }),
        datasets: [
          { label: "USD / 1M output tokens", data: rows.map(function (r) { return num(r.steady); }), backgroundColor: MEASURED },
          { label: "with cold start amortized", data: rows.map(function (r) { return num(r.amortized); }), backgroundColor: AMORTIZED }
        ]
      },
      options: {
        maintainAspectRatio: false, animation: false,
        scales: { y: { beginAtZero: true, title: { display: true, text: "USD per 1M output tokens" } } }
      }
    });
  }

  function modelCharts() {
    var points = data("model-chart-data");
    if (!points) return;
    // The demo's models are all simulated: their series say so.
    var tag = points.some(function (p) { return p.simulated; }) ? " (simulated)" : "";
    var front = points.filter(function (p) { return p.pareto; })
      .sort(function (a, b) { return a.parameters - b.parameters; });
    var label = function (ctx) {
      return ctx.raw.model + " (" + paramsText(ctx.raw.x) + "): " + ctx.raw.y;
    };
    var sizeCost = document.getElementById("size-cost-chart");
    if (sizeCost) {
      new Chart(sizeCost, {
        type: "scatter",
        data: {
          datasets: [
            { label: "Pareto front" + tag, showLine: true, borderColor: FRONT, backgroundColor: FRONT, pointRadius: 6,
              data: front.map(function (p) { return { x: p.parameters, y: num(p.usd_per_million), model: p.model }; }) },
            { label: "Dominated" + tag, backgroundColor: OTHER, pointRadius: 5,
              data: points.filter(function (p) { return !p.pareto; })
                .map(function (p) { return { x: p.parameters, y: num(p.usd_per_million), model: p.model }; }) }
          ]
        },
        options: {
          maintainAspectRatio: false, animation: false,
          plugins: { tooltip: { callbacks: { label: label } } },
          scales: {
            x: paramsAxis,
            y: { beginAtZero: true, title: { display: true, text: "USD per 1M output tokens" } }
          }
        }
      });
    }
    var sizeTput = document.getElementById("size-throughput-chart");
    if (sizeTput) {
      new Chart(sizeTput, {
        type: "scatter",
        data: {
          datasets: [{
            label: "Output tok/s per GPU" + tag, backgroundColor: MEASURED, pointRadius: 5,
            data: points.map(function (p) { return { x: p.parameters, y: num(p.throughput_per_gpu), model: p.model }; })
          }]
        },
        options: {
          maintainAspectRatio: false, animation: false,
          plugins: { tooltip: { callbacks: { label: label } } },
          scales: {
            x: paramsAxis,
            y: { beginAtZero: true, title: { display: true, text: "Output tok/s per GPU" } }
          }
        }
      });
    }
  }

  // The model choice: capacity at the SLOs against the cost there, one point per
  // configuration; simulated ones hollow, in a series of their own, and labelled so.
  function capacityChart() {
    var points = data("capacity-chart-data");
    var canvas = document.getElementById("capacity-cost-chart");
    if (!points || !canvas) return;
    var series = function (simulated) {
      return points.filter(function (p) { return p.simulated === simulated; })
        .map(function (p) { return { x: p.capacity, y: num(p.usd_per_million), label: p.label }; });
    };
    var axis = points.length && points[0].axis === "request_rate" ? "Request rate (req/s)" : "Concurrency";
    new Chart(canvas, {
      type: "scatter",
      data: {
        datasets: [
          { label: "Measured", backgroundColor: MEASURED, pointRadius: 6, data: series(false) },
          { label: "Simulated (not measured)", borderColor: "#d99a1c", backgroundColor: "rgba(0,0,0,0)",
            borderWidth: 2, pointRadius: 6, data: series(true) }
        ].filter(function (d) { return d.data.length; })
      },
      options: {
        maintainAspectRatio: false, animation: false,
        plugins: { tooltip: { callbacks: { label: function (ctx) {
          return ctx.raw.label + ": " + ctx.raw.x + ", " + ctx.raw.y + " USD / 1M";
        } } } },
        scales: {
          x: { beginAtZero: true, title: { display: true, text: axis + " at the SLOs" } },
          y: { beginAtZero: true, title: { display: true, text: "USD per 1M output tokens at capacity" } }
        }
      }
    });
  }

  // Quality against cost at the SLOs: one series per evaluation (scores on different sets
  // are not on one scale); only configurations with a score are points.
  var SERIES = ["#2f5bea", "#1b7a3d", "#b3261e", "#d99a1c", "#6b3fa0", "#00838f"];

  function qualityChart() {
    var points = data("quality-chart-data");
    var canvas = document.getElementById("quality-cost-chart");
    if (!points || !canvas) return;
    var evaluations = [];
    points.forEach(function (p) {
      if (evaluations.indexOf(p.evaluation) < 0) evaluations.push(p.evaluation);
    });
    new Chart(canvas, {
      type: "scatter",
      data: {
        datasets: evaluations.map(function (evaluation, i) {
          var colour = SERIES[i % SERIES.length];
          return {
            label: evaluation, backgroundColor: colour, borderColor: colour, pointRadius: 6,
            data: points.filter(function (p) { return p.evaluation === evaluation; })
              .map(function (p) {
                return { x: num(p.usd_per_million), y: num(p.score_pct), label: p.label,
                         low: p.low_pct, high: p.high_pct };
              })
          };
        })
      },
      options: {
        maintainAspectRatio: false, animation: false,
        plugins: { tooltip: { callbacks: { label: function (ctx) {
          var interval = ctx.raw.low !== "" ? " (95 % CI " + ctx.raw.low + "–" + ctx.raw.high + " %)" : "";
          return ctx.raw.label + ": " + ctx.raw.y + " %" + interval + ", " + ctx.raw.x + " USD / 1M";
        } } } },
        scales: {
          x: { beginAtZero: true, title: { display: true, text: "USD per 1M output tokens at the SLOs" } },
          y: { min: 0, max: 100, title: { display: true, text: "Score on the evaluation (%)" } }
        }
      }
    });
  }

  function spendChart() {
    var rows = data("spend-chart-data");
    var canvas = document.getElementById("spend-chart");
    if (!rows || !canvas) return;
    new Chart(canvas, {
      data: {
        labels: rows.map(function (r) { return r.month; }),
        datasets: [
          { type: "bar", label: "Spend USD", data: rows.map(function (r) { return num(r.spend); }), backgroundColor: MEASURED },
          { type: "line", label: "Budget USD", data: rows.map(function (r) { return num(r.budget); }),
            borderColor: "#b3261e", backgroundColor: "#b3261e", stepped: "middle", spanGaps: false }
        ]
      },
      options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true } } }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-print]").forEach(function (button) {
      button.addEventListener("click", function () { window.print(); });
    });
    if (typeof Chart === "undefined") return;
    costChart();
    modelCharts();
    spendChart();
    capacityChart();
    qualityChart();
  });
})();
