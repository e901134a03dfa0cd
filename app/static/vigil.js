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

  document.addEventListener("focusin", function (event) {
    if (event.target.matches && event.target.matches("[data-select-on-focus]")) { event.target.select(); }
  });
}());
