// Caravel dashboard: keeps open pages up to date by fetching the same page again and swapping
// in the parts marked data-live. No framework; nothing runs when data-refresh is 0.
(function () {
  "use strict";
  var seconds = Number(document.body.getAttribute("data-refresh") || "0");
  var status = document.getElementById("refresh-status");
  var toggle = document.getElementById("refresh-toggle");
  if (!seconds || !window.fetch || !window.DOMParser) { return; }
  var key = "caravel-dashboard-paused";
  var paused = false;
  try { paused = window.sessionStorage.getItem(key) === "1"; } catch (e) { paused = false; }
  var timer = null;

  function say(text) { if (status) { status.textContent = text; } }
  function clock() { return new Date().toLocaleTimeString(); }

  function schedule() {
    window.clearTimeout(timer);
    if (!paused && !document.hidden && seconds > 0) {
      timer = window.setTimeout(refresh, seconds * 1000);
    }
  }

  function swap(fresh) {
    var active = document.activeElement;
    var keep = active && active.closest && active.closest("[data-live]") ? active.getAttribute("href") : null;
    var regions = document.querySelectorAll("[data-live]");
    for (var i = 0; i < regions.length; i++) {
      var next = fresh.getElementById(regions[i].id);
      if (next) { regions[i].replaceWith(document.importNode(next, true)); }
    }
    if (keep) {
      var again = document.querySelector('[data-live] a[href="' + CSS.escape(keep) + '"]');
      if (again) { again.focus(); }
    }
  }

  function refresh() {
    window.fetch(window.location.href, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Accept": "text/html" }
    }).then(function (response) {
      return response.text().then(function (text) {
        if (!response.ok) {
          say("Update failed (HTTP " + response.status + "); retrying");
          return;
        }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        swap(fresh);
        seconds = Number(fresh.body.getAttribute("data-refresh") || "0");
        say(seconds ? "Updated " + clock() : "Finished " + clock());
      });
    }).catch(function () {
      say("Update failed; retrying");
    }).then(schedule);
  }

  function render() {
    if (!toggle) { return; }
    toggle.hidden = false;
    toggle.setAttribute("aria-pressed", paused ? "true" : "false");
    toggle.textContent = paused ? "Resume updates" : "Pause updates";
    if (paused) { say("Updates paused"); }
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      try { window.sessionStorage.setItem(key, paused ? "1" : "0"); } catch (e) { /* private mode */ }
      render();
      if (!paused) { refresh(); } else { window.clearTimeout(timer); }
    });
  }
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !paused) { refresh(); } else { schedule(); }
  });
  render();
  schedule();
})();
