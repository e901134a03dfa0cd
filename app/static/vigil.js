// Vigil's page behaviour, from /static so the Content-Security-Policy can forbid inline script.
// Delegated from the document, so parts htmx swaps in (cards over SSE) behave the same.
(function () {
  "use strict";

  function copied(button) {
    button.textContent = "Copied";
  }

  function copy(button, text, field) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { copied(button); });
    } else if (field) {
      field.select();
      if (document.execCommand("copy")) { copied(button); }
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy], [data-copy-from]");
    if (!button) { return; }
    var field = button.dataset.copyFrom ? document.querySelector(button.dataset.copyFrom) : null;
    copy(button, field ? field.value : button.dataset.copy, field);
  });

  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) { event.preventDefault(); }
  }, true);

  // Relative times ("2 min ago", "in 3 min") from each <time data-relative>'s datetime, the words the server
  // wrote (engine/glance.relative), refreshed every 30 s; the UTC time stays in its title.
  var UNITS = [[31536000, "y"], [2592000, "mo"], [86400, "d"], [3600, "h"], [60, "min"]];

  function relative(at, now) {
    var seconds = Math.trunc((at - now) / 1000), span = Math.abs(seconds), amount, unit, i;
    if (span < 45) { return seconds <= 0 ? "just now" : "in a moment"; }
    amount = Math.max(1, Math.round(span / 60)); unit = "min";
    for (i = 0; i < UNITS.length; i += 1) {
      if (span >= UNITS[i][0]) { amount = Math.floor(span / UNITS[i][0]); unit = UNITS[i][1]; break; }
    }
    return seconds > 0 ? "in " + amount + " " + unit : amount + " " + unit + " ago";
  }

  function refreshTimes() {
    var now = Date.now();
    document.querySelectorAll("time[data-relative]").forEach(function (node) {
      var at = Date.parse(node.getAttribute("datetime"));
      if (!isNaN(at)) { node.textContent = relative(at, now); }
    });
  }
  window.setInterval(refreshTimes, 30000);

  // Settings → Monitors' filters: a changed select applies at once (the Filter button does the same).
  document.addEventListener("change", function (event) {
    var form = event.target.closest("form[data-autosubmit]");
    if (form && event.target.matches("select")) { form.requestSubmit(); }
  });

  // Check now's refusals (409 already stopped, 429 just checked) carry a sentence to show where the button is.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var elt = event.detail.elt, status = event.detail.xhr.status;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-swap-errors") && (status === 409 || status === 429)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("focusin", function (event) {
    if (event.target.matches && event.target.matches("[data-select-on-focus]")) { event.target.select(); }
  });
}());
