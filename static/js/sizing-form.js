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
      var value = effective[name];
      if (Array.isArray(value)) {  // a repeated field (one per GPU row): copy only when the rows line up
        var fields = form.querySelectorAll('[name="' + name + '"]');
        if (fields.length === value.length) {
          fields.forEach(function (f, i) { f.value = value[i] === null ? "" : String(value[i]); });
        }
        return;
      }
      var field = form.elements[name];
      if (!field || (field.length !== undefined && !field.options)) return;
      if (field.type === "checkbox") field.checked = value === true;
      else field.value = value === null || value === false ? "" : String(value);
    });
  });

  // GPU rows: "Add a GPU" copies the last row blank (without JavaScript it asks the server for one);
  // "remove" drops a row (the last one left is cleared instead) and sizes again.
  var gpus = document.getElementById("gpus");
  if (!gpus) return;
  function rows() { return gpus.querySelectorAll(".gpu-row"); }
  function renumber() {
    rows().forEach(function (row, i) {
      var name = row.querySelector(".gpu-name");
      if (name) name.textContent = "GPU " + i;
    });
  }
  function changed() { form.dispatchEvent(new Event("change", { bubbles: true })); }
  gpus.querySelectorAll(".remove-gpu").forEach(function (b) { b.hidden = false; });
  // With JavaScript, "Add a GPU" adds a row here: no longer a submit button, so that htmx never sends it.
  gpus.querySelectorAll(".add-gpu").forEach(function (b) { b.type = "button"; b.removeAttribute("name"); });
  gpus.addEventListener("click", function (event) {
    var target = event.target;
    if (target.classList.contains("add-gpu")) {
      event.preventDefault();
      var all = rows();
      if (all.length >= 16) return;
      var copy = all[all.length - 1].cloneNode(true);
      copy.querySelectorAll("input, select").forEach(function (f) { f.value = ""; });
      copy.querySelector('[name="gpu_gbps"]').placeholder = "unknown";
      all[all.length - 1].after(copy);
      renumber();
      copy.querySelector("select").focus();
    } else if (target.classList.contains("remove-gpu")) {
      event.preventDefault();
      var row = target.closest(".gpu-row");
      if (rows().length > 1) row.remove();
      else row.querySelectorAll("input, select").forEach(function (f) { f.value = ""; });
      renumber();
      changed();
    }
  });
})();
