// The job form: show only the chosen prompt source's input, the request rate fields only
// when a request rate is chosen, and say when fewer requests than the concurrency are asked for. Without JavaScript every input shows and the server
// says the same after a submit.
(function () {
  "use strict";
  function setUp() {
    var form = document.querySelector("form.stack");
    var source = form && form.querySelector("select[name=prompt_source]");
    if (!source) return;
    function showSource() {
      form.querySelectorAll("[data-prompt-source]").forEach(function (p) {
        p.hidden = p.getAttribute("data-prompt-source") !== source.value;
      });
    }
    var requests = form.querySelector("input[name=requests]");
    var concurrency = form.querySelector("input[name=concurrency]");
    var note = document.getElementById("concurrency-note");
    function sayConcurrency() {
      var r = parseInt(requests.value, 10);
      var c = parseInt(concurrency.value, 10);
      note.textContent = r > 0 && c > 0 && r < c
        ? "Only " + r + " request" + (r === 1 ? "" : "s") + " per repeat: at most " + r +
          " in flight at once, so a concurrency of " + c + " is never reached."
        : "";
    }
    var arrival = form.querySelector("select[name=arrival]");
    function showRate() {
      form.querySelectorAll("[data-needs-arrival]").forEach(function (p) {
        p.hidden = !arrival.value;
      });
    }
    if (arrival) {
      arrival.addEventListener("change", showRate);
      showRate();
    }
    source.addEventListener("change", showSource);
    if (requests && concurrency && note) {
      requests.addEventListener("input", sayConcurrency);
      concurrency.addEventListener("input", sayConcurrency);
    }
    showSource();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
})();
