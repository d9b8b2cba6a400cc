// The sizing form shows what its result used. A full page is rendered that way by the
// server; after an htmx update of #results, the result carries every field's effective
// value (json_script #sizing-effective) and this copies them into the form — only when the
// answer is to the form exactly as it is now: an answer to an older state of the form (the
// user typed since that request went out) never overwrites what was typed after it.
(function () {
  var form = document.getElementById("sizing-form");
  if (!form) return;
  function state() { return new URLSearchParams(new FormData(form)).toString(); }
  form.addEventListener("htmx:beforeRequest", function (event) {
    event.detail.xhr.kvlabSent = state();
  });
  document.body.addEventListener("htmx:afterSettle", function (event) {
    var data = document.getElementById("sizing-effective");
    var xhr = event.detail && event.detail.xhr;
    if (!data || !xhr || xhr.kvlabSent === undefined || xhr.kvlabSent !== state()) return;
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
