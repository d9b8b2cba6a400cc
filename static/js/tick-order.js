// The run list's "Compare selected" and "Chart selected" send the runs in the order they were ticked, not the
// table's: a form sends its checked boxes in document order, and compare draws the runs in the URL's order.
// Without JavaScript the form still works, in the table's order.
(function () {
  var ticked = [];
  var BOXES = 'input[type=checkbox][name=run][form="compare-form"]';

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches(BOXES)) return;
    ticked = ticked.filter(function (value) { return value !== box.value; });
    if (box.checked) ticked.push(box.value);
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.id !== "compare-form") return;
    var checked = Array.prototype.map.call(document.querySelectorAll(BOXES + ":checked"), function (b) { return b.value; });
    // ticked first, in their order; then any box checked without a change event (restored by the browser)
    var order = ticked.filter(function (v) { return checked.indexOf(v) >= 0; });
    checked.forEach(function (v) { if (order.indexOf(v) < 0) order.push(v); });
    var action = (event.submitter && event.submitter.getAttribute("formaction")) || form.getAttribute("action");
    event.preventDefault();
    window.location.assign(action + "?" + order.map(function (v) { return "run=" + encodeURIComponent(v); }).join("&"));
  });
})();
