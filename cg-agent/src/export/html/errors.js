// cg-trace HTML report: records every script error in the page (#cg-errors), so that a
// broken chart shows on the page and the tests (headless Chromium) can see it. Runs first.
(function () {
  "use strict";
  var pending = [];
  function record(text) {
    var el = document.getElementById("cg-errors");
    if (!el) {
      pending.push(text);
      return;
    }
    el.hidden = false;
    el.textContent += text + "\n";
  }
  window.cgRecordError = record;
  window.addEventListener("error", function (e) {
    record("error: " + (e.message || e.type) + (e.filename ? " (" + e.filename + ":" + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) {
    record("unhandled rejection: " + e.reason);
  });
  var consoleError = console.error;
  console.error = function () {
    record("console.error: " + Array.prototype.join.call(arguments, " "));
    return consoleError.apply(console, arguments);
  };
  document.addEventListener("DOMContentLoaded", function () {
    var earlier = pending;
    pending = [];
    earlier.forEach(record);
  });
})();
