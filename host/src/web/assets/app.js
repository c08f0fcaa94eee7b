// ctxhost dashboard: live updates and confirmations. No framework, no build step.
// Pages whose <body> has class "live" listen to /events (server-sent events); on each change
// they fetch the same URL again and swap every element marked data-live="…" for the fresh one
// (and once on each connection, which catches what changed before it).
// Everything swapped in was rendered (and escaped) by the server; no script runs from it.
(function () {
  "use strict";

  function confirmForms() {
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      if (form.dataset.bound) return;
      form.dataset.bound = "1";
      form.addEventListener("submit", function (ev) {
        if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
      });
    });
  }

  var refreshing = false;
  var again = false;

  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Live-Refresh": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (old) {
          // Leave a region alone while the user types in it.
          if (old.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
          var repl = fresh.querySelector('[data-live="' + old.dataset.live + '"]');
          if (repl) old.replaceWith(document.importNode(repl, true));
        });
        confirmForms();
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
        watchStream();
      })
      .catch(function () {})
      .finally(function () {
        refreshing = false;
        if (again) { again = false; setTimeout(refresh, 300); }
      });
  }

  // A reply arriving (a streamed reply: no database change marks its growth): refresh every
  // second while the page shows one.
  var streamTimer = null;
  function watchStream() {
    var streaming = document.querySelector("[data-streaming]");
    if (streaming && streamTimer === null) {
      streamTimer = setInterval(refresh, 1000);
    } else if (!streaming && streamTimer !== null) {
      clearInterval(streamTimer);
      streamTimer = null;
    }
  }

  function listen() {
    var state = document.getElementById("live-state");
    if (!document.body.classList.contains("live") || !window.EventSource) {
      if (state) state.hidden = true;
      return;
    }
    var es = new EventSource("/events");
    // Each (re)connection resyncs: a change committed after this page was rendered and before
    // the subscription (or while it was down) sends no `change` event of its own.
    es.addEventListener("hello", function () {
      if (state) state.className = "live-state on";
      refresh();
    });
    es.addEventListener("change", refresh);
    es.onerror = function () { if (state) state.className = "live-state off"; };
  }

  document.addEventListener("DOMContentLoaded", function () {
    confirmForms();
    listen();
    watchStream();
  });
})();
