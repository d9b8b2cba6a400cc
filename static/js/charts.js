// Draw every Plotly figure handed to the page with json_script, again after htmx swaps.
(function () {
  function render(root) {
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      Plotly.react(el, figure.data, figure.layout, {
        responsive: true,
        displaylogo: false,
        toImageButtonOptions: { format: "png", filename: el.dataset.name || "kvlab-chart", scale: 2 },
      });
      if (el.dataset.clickRuns !== undefined && el.removeAllListeners) {
        el.removeAllListeners("plotly_click");
        el.on("plotly_click", function (event) {
          var id = event.points[0] && event.points[0].customdata;
          if (id) window.location = "/runs/" + id + "/";
        });
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  document.addEventListener("htmx:afterSettle", function (event) { render(event.detail.elt); });
})();
