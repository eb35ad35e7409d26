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
            { label: "Pareto front", showLine: true, borderColor: FRONT, backgroundColor: FRONT, pointRadius: 6,
              data: front.map(function (p) { return { x: p.parameters, y: num(p.usd_per_million), model: p.model }; }) },
            { label: "Dominated", backgroundColor: OTHER, pointRadius: 5,
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
            label: "Output tok/s per GPU", backgroundColor: MEASURED, pointRadius: 5,
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
  });
})();
