// Send only the head of a GGUF file: its metadata sits at the start of the file.
// The server renders its byte limit (KVLAB_GGUF_HEAD_MAX_BYTES) as data-head-max; without
// it the whole file goes up and the server keeps only the head. The sizing form's current
// inputs go along (as "query"), so the command and workload already entered stay.
(function () {
  var form = document.getElementById("gguf-form");
  var headMax = form && parseInt(form.dataset.headMax, 10);
  if (!headMax) return;
  form.addEventListener("submit", async function (event) {
    var input = form.elements.head;
    if (!input.files.length) return;
    event.preventDefault();
    var file = input.files[0];
    var body = new FormData();
    body.append("head", file.slice(0, headMax), file.name);
    body.append("csrfmiddlewaretoken", form.elements.csrfmiddlewaretoken.value);
    var sizing = document.getElementById("sizing-form");
    body.append("query", sizing ? new URLSearchParams(new FormData(sizing)).toString() : form.elements.query.value);
    var response = await fetch(form.action, { method: "POST", body: body });
    if (response.redirected) { window.location = response.url; return; }
    document.open(); document.write(await response.text()); document.close();
  });
})();
