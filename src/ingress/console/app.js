// The console's only script (served from the ingress; the pages carry no
// inline script). It follows a running attempt's timeline over the
// console's event stream and puts each field in as text, never as markup.
"use strict";

(function () {
  const timeline = document.getElementById("timeline");
  if (!timeline || timeline.dataset.live !== "true" || !window.EventSource) {
    return;
  }
  const attempt = timeline.dataset.attempt;
  const after = timeline.dataset.after || "0";
  const status = document.getElementById("status");
  const progress = document.getElementById("progress");
  const progressMessage = document.getElementById("progress-message");

  function span(className, text) {
    const element = document.createElement("span");
    element.className = className;
    element.textContent = text;
    return element;
  }

  function lastAt() {
    const items = timeline.querySelectorAll("li[data-at]");
    return items.length ? Date.parse(items[items.length - 1].dataset.at) : NaN;
  }

  function delta(ms) {
    if (!(ms >= 0)) return "";
    if (ms < 1000) return "+" + ms + " ms";
    if (ms < 60000) return "+" + (ms / 1000).toFixed(1) + " s";
    return "+" + Math.floor(ms / 60000) + " min " + Math.floor((ms % 60000) / 1000) + " s";
  }

  function add(entry) {
    if (timeline.querySelector('li[data-seq="' + Number(entry.seq) + '"]')) return;
    const item = document.createElement("li");
    item.dataset.seq = String(entry.seq);
    item.dataset.kind = entry.kind;
    item.dataset.at = entry.at;
    item.appendChild(span("dot", ""));
    const time = document.createElement("time");
    time.textContent = entry.at;
    item.appendChild(time);
    item.appendChild(span("delta", delta(Date.parse(entry.at) - lastAt())));
    item.appendChild(span("kind", entry.kind));
    if (entry.epoch !== null && entry.epoch !== undefined) {
      item.appendChild(span("epoch", "epoch " + entry.epoch));
    }
    if (entry.runner_instance) item.appendChild(span("instance", entry.runner_instance));
    const summary = document.createElement("div");
    summary.className = "summary";
    summary.textContent = entry.summary;
    item.appendChild(summary);
    timeline.appendChild(item);
    timeline.dataset.after = String(entry.seq);
    if (entry.state && status) {
      status.textContent = entry.state;
      status.className = "badge " + entry.state;
    }
    if (entry.kind === "progress") {
      if (progress && entry.percent !== null && entry.percent !== undefined) {
        progress.value = entry.percent;
      }
      if (progressMessage) progressMessage.textContent = entry.summary;
    }
  }

  const source = new EventSource(
    "/console/attempts/" + encodeURIComponent(attempt) + "/live?after=" + encodeURIComponent(after)
  );
  source.onmessage = function (message) {
    let entry;
    try {
      entry = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    add(entry);
    if (entry.terminal) {
      source.close();
      timeline.dataset.live = "false";
      if (progress) progress.value = 100;
      const cancel = document.getElementById("cancel-form");
      if (cancel) cancel.hidden = true;
    }
  };
})();
