// A trace dataset's preview: its length histograms and arrival rate drawn with the vendored
// Chart.js from the JSON the page embeds (the same figures as its tables, which work without
// this script).
(function () {
  "use strict";

  var node = document.getElementById("dataset-chart-data");
  if (!node || typeof Chart === "undefined") return;
  var data = JSON.parse(node.textContent);
  var BAR = "#2f5bea";

  function histogram(key, title) {
    var canvas = document.getElementById("chart-" + key);
    var bins = data.histograms[key];
    if (!canvas || !bins) return;
    new Chart(canvas, {
      type: "bar",
      data: { labels: bins.labels, datasets: [{ label: "Requests", data: bins.counts, backgroundColor: BAR }] },
      options: {
        maintainAspectRatio: false, animation: false,
        plugins: { legend: { display: false } },
        scales: {
          x: { title: { display: true, text: title } },
          y: { beginAtZero: true, title: { display: true, text: "Requests" }, ticks: { precision: 0 } }
        }
      }
    });
  }

  function arrivals() {
    var canvas = document.getElementById("chart-arrivals");
    var series = data.arrivals;
    if (!canvas || !series) return;
    new Chart(canvas, {
      type: "line",
      data: {
        datasets: [{
          label: "Requests per second", borderColor: BAR, backgroundColor: BAR, stepped: "before",
          pointRadius: 0,
          data: series.starts.map(function (start, i) { return { x: start, y: series.rates[i] }; })
        }]
      },
      options: {
        maintainAspectRatio: false, animation: false,
        plugins: { legend: { display: false } },
        scales: {
          x: { type: "linear", title: { display: true, text: "Seconds from the first request" } },
          y: { beginAtZero: true, title: { display: true, text: "Requests per second" } }
        }
      }
    });
  }

  histogram("input_len", "Input tokens");
  histogram("output_len", "Output tokens");
  arrivals();
})();
