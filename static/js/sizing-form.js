// The sizing form shows what its result used. A full page is rendered that way by the
// server; after an htmx update of #results, the result carries every field's effective
// value (json_script #sizing-effective) and this copies them into the form — unless the
// form changed while the request was in flight: what the user typed since then is kept,
// and the newer request it sent brings the values to show.
(function () {
  var form = document.getElementById("sizing-form");
  if (!form) return;
  var sent = null;
  function state() { return new URLSearchParams(new FormData(form)).toString(); }
  form.addEventListener("htmx:beforeRequest", function () { sent = state(); });
  document.body.addEventListener("htmx:afterSettle", function () {
    var data = document.getElementById("sizing-effective");
    if (!data || sent === null || state() !== sent) return;
    var effective = JSON.parse(data.textContent);
    Object.keys(effective).forEach(function (name) {
      var field = form.elements[name];
      if (!field || (field.length !== undefined && !field.options)) return;
      var value = effective[name];
      if (field.type === "checkbox") field.checked = value === true;
      else field.value = value === null || value === false ? "" : String(value);
    });
  });
})();
