// The experiment builder's live parts: the serve-grid editor (rows or raw JSON), showing
// only the inputs that apply, and a live check of the whole form against the server — the
// same validation as the API — with the trial count, the estimate and field errors.
// Without this script the form still submits, and the server shows the same errors.
(function () {
  "use strict";

  const form = document.getElementById("builder");
  if (!form) return;
  const checkUrl = form.dataset.checkUrl;
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const rowsBody = document.getElementById("grid-rows");
  const rowTemplate = document.getElementById("grid-row-template");
  const jsonArea = document.getElementById("f-serve_grid_json");
  const DEBOUNCE_MS = 300;

  // --- the serve-grid editor ------------------------------------------------------------

  // A typed value as the server reads it: JSON literals, else the text itself.
  function literal(text) {
    const lowered = text.toLowerCase();
    if (lowered === "true" || lowered === "false" || lowered === "null") return JSON.parse(lowered);
    try {
      return JSON.parse(text);
    } catch (_) {
      return text;
    }
  }

  function shown(value) {
    if (typeof value === "string" && literal(value) === value) return value;
    return JSON.stringify(value);
  }

  function rowsToGrid() {
    const grid = {};
    rowsBody.querySelectorAll(".grid-row").forEach(function (row) {
      const flag = row.querySelector("select[name=grid_flag]").value;
      const text = row.querySelector("input[name=grid_values]").value;
      if (!flag) return;
      grid[flag] = text.split(",").map(function (part) { return part.trim(); })
        .filter(function (part) { return part !== ""; }).map(literal);
    });
    return grid;
  }

  function addRow(flag, valuesText) {
    const row = rowTemplate.content.firstElementChild.cloneNode(true);
    const select = row.querySelector("select");
    if (flag && !Array.from(select.options).some(function (o) { return o.value === flag; })) {
      select.add(new Option(flag + " (not a known flag)", flag));
    }
    select.value = flag || "";
    row.querySelector("input").value = valuesText || "";
    rowsBody.appendChild(row);
    return row;
  }

  function gridToRows(grid) {
    rowsBody.replaceChildren();
    Object.keys(grid).forEach(function (flag) {
      const values = Array.isArray(grid[flag]) ? grid[flag] : [grid[flag]];
      addRow(flag, values.map(shown).join(", "));
    });
    if (!rowsBody.children.length) addRow("", "");
  }

  function gridMode() {
    return form.querySelector("input[name=grid_mode]:checked").value;
  }

  function showGridEditor() {
    const mode = gridMode();
    form.querySelectorAll("[data-grid-editor]").forEach(function (editor) {
      editor.hidden = editor.dataset.gridEditor !== mode;
    });
  }

  form.querySelectorAll("input[name=grid_mode]").forEach(function (radio) {
    radio.addEventListener("change", function () {
      if (radio.value === "json") {
        jsonArea.value = JSON.stringify(rowsToGrid(), null, 2);
      } else {
        let grid;
        try {
          grid = JSON.parse(jsonArea.value || "{}");
        } catch (error) {
          // Keep the JSON (and its editor) until it parses; the live check names the problem.
          form.querySelector("input[name=grid_mode][value=json]").checked = true;
          showErrors({ serve_grid: ["Not valid JSON: " + error.message] });
          return;
        }
        if (grid && typeof grid === "object" && !Array.isArray(grid)) gridToRows(grid);
      }
      showGridEditor();
    });
  });

  // Blank rows are what the page offers without JavaScript; with it, rows are added on demand.
  rowsBody.querySelectorAll(".grid-row").forEach(function (row) {
    const flag = row.querySelector("select").value;
    const text = row.querySelector("input").value;
    if (!flag && !text && rowsBody.querySelectorAll(".grid-row").length > 1) row.remove();
  });
  rowsBody.querySelectorAll(".remove-row").forEach(function (button) { button.hidden = false; });
  const addButton = document.getElementById("add-grid-row");
  addButton.hidden = false;
  addButton.addEventListener("click", function () {
    addRow("", "").querySelector("select").focus();
  });
  rowsBody.addEventListener("click", function (event) {
    const button = event.target.closest(".remove-row");
    if (!button) return;
    button.closest(".grid-row").remove();
    if (!rowsBody.children.length) addRow("", "");
    scheduleCheck();
  });

  // --- inputs that apply only to some choices -------------------------------------------

  const kindSelect = document.getElementById("f-dataset_kind");
  const engineSelect = document.getElementById("f-engine");

  const datasetSelect = document.getElementById("f-dataset_id");

  function showApplicable() {
    form.querySelectorAll("[data-kinds]").forEach(function (field) {
      field.hidden = !field.dataset.kinds.split(" ").includes(kindSelect.value);
    });
    // An uploaded dataset of the format the kind names; another one's choice is cleared.
    datasetSelect.querySelectorAll("optgroup").forEach(function (group) {
      const fits = group.dataset.format === kindSelect.value;
      group.hidden = !fits;
      group.disabled = !fits;
    });
    const chosen = datasetSelect.selectedOptions[0];
    if (chosen && chosen.dataset.format && chosen.dataset.format !== kindSelect.value) {
      datasetSelect.value = "";
    }
    document.querySelectorAll("[data-engine-only]").forEach(function (element) {
      element.hidden = element.dataset.engineOnly !== engineSelect.value;
    });
    // What an existing endpoint does not have (a rented pod, a serve grid, a search).
    document.querySelectorAll("[data-engine-not]").forEach(function (element) {
      element.hidden = element.dataset.engineNot === engineSelect.value;
    });
  }

  // --- the live check -------------------------------------------------------------------

  const figures = {
    trials: document.getElementById("live-trials"),
    levels: document.getElementById("live-levels"),
    cost: document.getElementById("live-cost"),
    duration: document.getElementById("live-duration"),
    budget: document.getElementById("live-budget"),
    source: document.getElementById("live-source"),
    calibration: document.getElementById("live-calibration"),
    fit: document.getElementById("live-fit"),
    warnings: document.getElementById("live-warnings"),
    status: document.getElementById("live-status"),
  };

  // A grid error's path names its flag (serve_grid.max_num_seqs[1]): mark that row.
  function markGridRows(fields) {
    Object.keys(fields).forEach(function (path) {
      const match = /^serve_grid\.([^.[]+)/.exec(path);
      if (!match) return;
      rowsBody.querySelectorAll(".grid-row").forEach(function (row) {
        if (row.querySelector("select").value === match[1]) {
          row.querySelector("input").setAttribute("aria-invalid", "true");
        }
      });
    });
  }

  function showErrors(slots) {
    form.querySelectorAll(".field-errors").forEach(function (list) { list.replaceChildren(); });
    form.querySelectorAll(".has-error").forEach(function (field) {
      field.classList.remove("has-error");
    });
    form.querySelectorAll("[aria-invalid]").forEach(function (input) {
      input.removeAttribute("aria-invalid");
    });
    Object.keys(slots).forEach(function (slot) {
      const list = form.querySelector('.field-errors[data-slot="' + slot + '"]') ||
        form.querySelector('.field-errors[data-slot="form"]');
      slots[slot].forEach(function (message) {
        const item = document.createElement("li");
        item.textContent = message;
        list.appendChild(item);
      });
      const field = list.closest(".field");
      if (field) {
        field.classList.add("has-error");
        field.querySelectorAll("input, select, textarea").forEach(function (input) {
          input.setAttribute("aria-invalid", "true");
        });
      }
    });
  }

  function showResult(result) {
    figures.trials.textContent = result.trials === null ? "–" : String(result.trials);
    const estimate = result.estimate;
    figures.levels.textContent = estimate ? String(estimate.levels_per_trial) : "–";
    figures.cost.textContent = estimate ? estimate.cost_text : "–";
    figures.duration.textContent = estimate ? estimate.duration_text : "–";
    figures.source.textContent = estimate ? "Price: " + estimate.price_source : "";
    figures.calibration.textContent = estimate ? estimate.calibration_text : "";
    figures.fit.textContent = result.fit ? result.fit.text : "";
    figures.fit.className = result.fit && !result.fit.fits ? "error" : "muted";
    figures.budget.className = estimate && estimate.within_budget === false ? "error" : "muted";
    if (!estimate || estimate.within_budget === null) {
      figures.budget.textContent = "";
    } else if (estimate.within_budget) {
      figures.budget.textContent = "Within the cap of $" + estimate.budget_cap_usd + ".";
    } else {
      figures.budget.textContent =
        "Over the cap of $" + estimate.budget_cap_usd + ": a run would be refused.";
    }
    figures.warnings.replaceChildren();
    (estimate ? estimate.warnings : []).forEach(function (warning) {
      const item = document.createElement("li");
      item.textContent = warning;
      figures.warnings.appendChild(item);
    });
    const problems = Object.values(result.slots).reduce(function (n, list) {
      return n + list.length;
    }, 0);
    figures.status.textContent = result.ok ? "Valid: ready to save." :
      problems + (problems === 1 ? " problem" : " problems") + " marked in the form.";
    showErrors(result.slots);
    markGridRows(result.fields);
  }

  let timer = null;
  let sent = 0;
  let controller = null;

  async function check() {
    const number = ++sent;
    if (controller) controller.abort();
    controller = new AbortController();
    const body = new FormData(form);
    figures.status.textContent = "Checking…";
    try {
      const response = await fetch(checkUrl, {
        method: "POST",
        body: body,
        headers: { "X-CSRFToken": csrf, Accept: "application/json" },
        credentials: "same-origin",
        signal: controller.signal,
      });
      if (!response.ok) throw new Error("the server answered " + response.status);
      const result = await response.json();
      if (number !== sent) return; // a newer check is on its way
      showResult(result);
      form.dataset.checked = String(number);
    } catch (error) {
      if (error.name === "AbortError") return;
      figures.status.textContent = "Could not check the form (" + error.message +
        "); saving still checks it.";
    }
  }

  function scheduleCheck() {
    clearTimeout(timer);
    timer = setTimeout(check, DEBOUNCE_MS);
  }

  form.addEventListener("input", scheduleCheck);
  const endpointSelect = document.getElementById("f-endpoint");
  form.addEventListener("change", function (event) {
    if (event.target === kindSelect || event.target === engineSelect) showApplicable();
    // Chat sessions go only to the chat endpoint: choosing them chooses it (without the
    // script, the check's refusal shows beside the endpoint instead).
    if (event.target === kindSelect && kindSelect.value === "chat_sessions") {
      endpointSelect.value = "chat";
    }
    scheduleCheck();
  });
  // With the live check, "Check and estimate" is what already happens on every change.
  document.getElementById("check-button").hidden = true;

  // --- the prediction: every configuration on the simulator, on request ----------------

  const predictUrl = form.dataset.predictUrl;
  const predictButton = document.getElementById("predict-button");
  const predictionBox = document.getElementById("live-prediction");

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  // The same table as the server renders (_prediction.html), built from its JSON.
  function showPrediction(prediction) {
    const parts = [element("p", prediction.note, "muted prediction-note")];
    const table = element("table", undefined, "prediction-table");
    table.append(element("caption", "Predicted on the simulator (simulated figures)"));
    const head = element("tr");
    const names = ["Configuration", "Capacity at the SLOs", "Output tok/s there",
      "$ per 1M output tokens", "GPU-min"];
    names.forEach(function (name) {
      const th = element("th", name);
      th.scope = "col";
      head.append(th);
    });
    const thead = element("thead");
    thead.append(head);
    table.append(thead);
    const body = element("tbody");
    prediction.rows.forEach(function (row) {
      const tr = element("tr", undefined, (row.best ? "best" : "") + (row.starts ? "" : " refused"));
      const name = element("th", row.label);
      name.scope = "row";
      if (row.best) name.append(" ", element("strong", "(best)"));
      tr.append(name);
      [row.capacity_text, row.throughput_text, row.cost_text, row.gpu_minutes_text]
        .forEach(function (text, i) {
          const cell = element("td", text);
          cell.dataset.label = names[i + 1]; // the panel stacks each row (experiments.css)
          tr.append(cell);
        });
      body.append(tr);
    });
    table.append(body);
    parts.push(table);
    const total = element("p", "An exhaustive run would take ", "prediction-exhaustive");
    const figure = element("span", prediction.exhaustive_text);
    figure.id = "prediction-exhaustive";
    total.append(figure, " on the GPU (simulated start-ups and levels).");
    parts.push(total);
    parts.push(element("p", "Price: " + prediction.price_source + " · " + prediction.cpu_text, "muted"));
    parts.push(element("p", prediction.calibration_text, "muted prediction-calibration"));
    const warnings = element("ul", undefined, "warnings");
    prediction.warnings.forEach(function (w) { warnings.append(element("li", w)); });
    parts.push(warnings);
    predictionBox.replaceChildren.apply(predictionBox, parts);
  }

  predictButton.addEventListener("click", async function (event) {
    event.preventDefault();
    const body = new FormData(form);
    body.set("action", "predict");
    predictButton.disabled = true;
    predictionBox.replaceChildren(element("p", "Predicting every configuration on the simulator…", "muted"));
    try {
      const response = await fetch(predictUrl, {
        method: "POST",
        body: body,
        headers: { "X-CSRFToken": csrf, Accept: "application/json" },
        credentials: "same-origin",
      });
      if (!response.ok) throw new Error("the server answered " + response.status);
      const result = await response.json();
      if (!result.ok || !result.prediction) {
        showErrors(result.slots || {});
        predictionBox.replaceChildren(element("p", "Fix the problems marked in the form first.", "error"));
      } else {
        showPrediction(result.prediction);
      }
    } catch (error) {
      predictionBox.replaceChildren(element("p", "Could not predict (" + error.message + ").", "error"));
    } finally {
      predictButton.disabled = false;
    }
  });

  showGridEditor();
  showApplicable();
})();
