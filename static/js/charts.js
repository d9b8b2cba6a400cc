// Draw every Plotly figure handed to the page with json_script, again after htmx swaps.
(function () {
  function shown(value) {
    return value === null || value === undefined ? "?" : String(value);
  }

  function render(root) {
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      figure.data.forEach(function (trace) {
        // Compact hover facts from the server (figures._hover_facts): per point its outcome, an index into the
        // line's table of flags (escaped there) and its workload as numbers; the text reads as
        // series.flags_label and series.workload_label write it.
        var h = trace.hover_facts;
        if (!h) return;
        trace.text = h.flag.map(function (flag, i) {
          return h.ok[i] + "/" + h.requests[i] + " ok · " + h.flags[flag] +
            " · concurrency " + shown(h.concurrency[i]) + " · prompt " + shown(h.prompt[i]) +
            " tok · n_predict " + shown(h.n_predict[i]) +
            (h.sources ? "<br>" + h.sources[h.source[i]] : "");  // whose figure: the tool's or kvlab's
        });
        delete trace.hover_facts;
      });
      Plotly.react(el, figure.data, figure.layout, {
        responsive: true,
        displaylogo: false,
        toImageButtonOptions: { format: "png", filename: el.dataset.name || "kvlab-chart", scale: 2 },
      });
      if (el.removeAllListeners) {
        el.removeAllListeners("plotly_click");
        el.removeAllListeners("plotly_selected");
        el.removeAllListeners("plotly_relayout");
      }
      if (el.dataset.runUrl) {
        // The server renders run 0's URL; a click opens the clicked run's.
        el.on("plotly_click", function (event) {
          var id = event.points[0] && event.points[0].customdata;
          if (id) window.location = el.dataset.runUrl.replace(/\/0\/$/, "/" + id + "/");
        });
      }
      var compare = document.getElementById("compare-selection");
      if (compare && compare.dataset.url) {
        // Box or lasso select points, then compare those runs (at most the server's data-max-runs).
        var maxRuns = parseInt(compare.dataset.maxRuns, 10) || undefined;
        el.on("plotly_selected", function (event) {
          var ids = (event && event.points || []).map(function (p) { return p.customdata; }).filter(Boolean);
          ids = ids.filter(function (id, i) { return ids.indexOf(id) === i; }).slice(0, maxRuns);
          compare.hidden = ids.length < 2;
          compare.href = compare.dataset.url + "?" + ids.map(function (id) { return "run=" + id; }).join("&");
          compare.textContent = "compare the " + ids.length + " selected runs";
        });
      }
      if (el.dataset.rangeParams !== undefined) {
        // Zooming writes the visible range into the URL, so a copied link shows the same view.
        // The form's hidden x0/x1 inputs follow too, so the next filter change keeps the zoom.
        el.on("plotly_relayout", function (change) {
          var url = new URL(window.location);
          var x0 = "", x1 = "";
          if (change["xaxis.range[0]"]) {
            x0 = String(change["xaxis.range[0]"]).slice(0, 19);
            x1 = String(change["xaxis.range[1]"]).slice(0, 19);
            url.searchParams.set("x0", x0);
            url.searchParams.set("x1", x1);
          } else if (change["xaxis.autorange"]) {
            url.searchParams.delete("x0");
            url.searchParams.delete("x1");
          } else {
            return;
          }
          var form = document.getElementById("chart-form");
          if (form && form.elements.x0) { form.elements.x0.value = x0; form.elements.x1.value = x1; }
          window.history.replaceState(null, "", url);
        });
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  document.addEventListener("htmx:afterSettle", function (event) { render(event.detail.elt); });
})();
