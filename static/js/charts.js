// Draw every Plotly figure handed to the page with json_script, again after htmx swaps.
(function () {
  function shown(value) {
    return value === null || value === undefined ? "?" : String(value);
  }

  function utc(seconds) {
    return new Date(seconds * 1000).toISOString().slice(0, 19);
  }

  function when(seconds) {
    return utc(seconds).replace("T", " ").slice(0, 16);
  }

  // A reduced line (timeline_figure.timeline_reduced): per bucket its start, end, min, max and counts. Each bucket
  // is drawn as a vertical stroke from its min to its max (a gap between buckets; each line's strokes at its
  // own place within the bucket, r.at), the hover at either end
  // saying what the point stands for; the point's customdata is the bucket's start (a click zooms into the
  // bucket: trace.reduced.end), not a run id.
  function expandReduced(trace) {
    var r = trace.reduced;
    if (!r || !r.lo) return;
    // Without markers (a chart of many buckets) a lone point would not show, nor a stroke from a value to
    // itself: such a bucket is a short dash at its value, r.dash of the bucket either side of the line's place.
    var dashed = trace.mode === "lines";
    var x = [], y = [], text = [], starts = [], ends = [];
    r.start.forEach(function (start, i) {
      var end = r.end[i];
      var middle = utc(start + (end - start) * r.at);  // the line's place within the bucket
      var range = when(start) + " … " + when(end) + " UTC";
      var runs = r.runs[i] + " run" + (r.runs[i] === 1 ? "" : "s");
      var valued = r.valued[i] === r.runs[i] ? "" : " (" + r.valued[i] + " with a value)";
      if (!r.valued[i]) {
        x.push(middle); y.push(null); text.push(runs + ", none with a value · " + range);
        starts.push(start); ends.push(end);
      } else if (r.valued[i] === 1 || (dashed && r.lo[i] === r.hi[i])) {
        var said = (r.valued[i] > 1 ? "<b>min = max</b> of " + runs + valued + " · " + range + " · click to zoom in"
                    : (r.runs[i] === 1 ? "1 run" : "the only value of " + runs) + " · " + range);
        if (dashed) {
          x.push(utc(start + (end - start) * (r.at - r.dash)), utc(start + (end - start) * (r.at + r.dash)), null);
          y.push(r.lo[i], r.lo[i], null); text.push(said, said, "");
          starts.push(start, start, null); ends.push(end, end, null);
        } else {  // a point, not joined to the next bucket's min
          x.push(middle, null); y.push(r.lo[i], null); text.push(said, "");
          starts.push(start, null); ends.push(end, null);
        }
      } else {
        x.push(middle, middle, null); y.push(r.lo[i], r.hi[i], null);
        starts.push(start, start, null); ends.push(end, end, null);
        text.push("<b>min</b> of " + runs + valued + " · " + range + " · click to zoom in",
                  "<b>max</b> of " + runs + valued + " · " + range + " · click to zoom in", "");
      }
    });
    trace.x = x; trace.y = y; trace.text = text; trace.customdata = starts;
    trace.reduced = { end: ends };
  }

  // Zoom the chart to [x0, x1] (Plotly date strings); its relayout event fetches the detail.
  function zoom(el, x0, x1) {
    Plotly.relayout(el, { "xaxis.range": [x0, x1] });
  }

  // A legend above the plots (figure_common.LEGEND) takes its rows from the figure's height: on a phone a
  // legend of ten entries wraps to five rows, and Plotly, which widens the top margin only so far, squeezes
  // the plots and lets the legend run over the axes. Once drawn, a legend of more than one row gets rows of
  // its own: the figure grows by the legend's height and the top margin holds it. el.dataset.fitted says the
  // figure is final (the browser tests wait for it).
  function fitLegend(el) {
    var full = el._fullLayout, legend = full && full.legend;
    var above = legend && full.showlegend && legend.yanchor === "bottom" && legend.y >= 1;
    var rows = above ? Math.ceil(legend._effHeight || legend._height || 0) : 0;  // as drawn: scrolled past maxheight
    if (rows <= 24) { el.dataset.fitted = "1"; return null; }  // one row: Plotly's own margin holds it
    return Plotly.relayout(el, { height: full.height + rows, "margin.t": full.margin.t + rows + 8 }).then(function () {
      el.dataset.fitted = "1";
    });
  }

  function render(root) {
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      figure.data.forEach(expandReduced);
      figure.data.forEach(function (trace) {
        // Compact hover facts from the server (timeline_figure._hover_facts): per point its outcome, an index into the
        // line's table of flags (escaped there) and its workload as numbers; the text reads as
        // series.flags_label and series.workload_label write it. Points of many lines (the grey points)
        // may carry an index into a table of their lines' names: each point's hovertext.
        var h = trace.hover_facts;
        if (!h) return;
        trace.text = h.flag.map(function (flag, i) {
          var rate = h.rate && h.rate[i] !== null ? " · " + Number(h.rate[i].toPrecision(6)) + " req/s" : "";
          return h.ok[i] + "/" + h.requests[i] + " ok · " + h.flags[flag] +
            " · concurrency " + shown(h.concurrency[i]) + rate + " · prompt " + shown(h.prompt[i]) +
            " tok · n_predict " + shown(h.n_predict[i]) +
            (h.sources ? "<br>" + h.sources[h.source[i]] : "");  // whose figure: the tool's or kvlab's
        });
        if (h.lines) trace.hovertext = h.line.map(function (line) { return h.lines[line]; });
        delete trace.hover_facts;
      });
      delete el.dataset.fitted;
      Plotly.react(el, figure.data, figure.layout, {
        responsive: true,
        displaylogo: false,
        toImageButtonOptions: { format: "png", filename: el.dataset.name || "kvlab-chart", scale: 2 },
      }).then(function () { return fitLegend(el); });
      if (el.removeAllListeners) {
        el.removeAllListeners("plotly_click");
        el.removeAllListeners("plotly_selected");
        el.removeAllListeners("plotly_relayout");
      }
      if (el.dataset.runUrl) {
        // The server renders run 0's URL; a click opens the clicked run's.
        el.on("plotly_click", function (event) {
          var point = event.points[0];
          var id = point && point.customdata;
          if (!id) return;
          if (point.data.reduced) {  // a bucket: zoom into it, which loads its runs
            zoom(el, utc(id), utc(point.data.reduced.end[point.pointNumber]));
            return;
          }
          window.location = el.dataset.runUrl.replace(/\/0\/$/, "/" + id + "/");
        });
      }
      var compare = document.getElementById("compare-selection");
      if (compare && compare.dataset.url) {
        // Box or lasso select points, then compare those runs (at most the server's data-max-runs).
        var maxRuns = parseInt(compare.dataset.maxRuns, 10) || undefined;
        el.on("plotly_selected", function (event) {
          var runs = (event && event.points || []).filter(function (p) { return !p.data.reduced; });  // not buckets
          var ids = runs.map(function (p) { return p.customdata; }).filter(Boolean);
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
          var range = change["xaxis.range"] || (change["xaxis.range[0]"] && [change["xaxis.range[0]"], change["xaxis.range[1]"]]);
          if (range) {
            x0 = String(range[0]).replace("T", " ").slice(0, 19);
            x1 = String(range[1]).replace("T", " ").slice(0, 19);
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
          // The figure holds buckets, or only the latest runs, or only a range: fetch the new range's
          // detail (the form's htmx request redraws the chart; without JavaScript the form does).
          if (form && el.closest("[data-fetch-range]") && window.htmx) htmx.trigger(form, "submit");
        });
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  document.addEventListener("htmx:afterSettle", function (event) { render(event.detail.elt); });
})();
